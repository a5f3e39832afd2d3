"""A bound HiFi SQL query (LogicalQuery) and its parts: aggregate calls, lookup joins, the paper's
arbitration, adaptive smoothing, an event pattern. What the analyzer makes and placement,
rewriting and the reference evaluator read. Pure data."""

from __future__ import annotations

from dataclasses import dataclass

from base.plan import Column, Expr, MatchStep, Window
from glue.stream_join import StreamJoin


@dataclass(frozen=True)
class AggCall:
    name: str
    fn: str                 # count | count_distinct | sum | min | max | avg
    column: str | None      # None: count(*)


@dataclass(frozen=True)
class RelationJoin:
    relation: str
    on: str
    columns: tuple[Column, ...]


@dataclass(frozen=True)
class Arbitration:
    by: str                 # the correlated column (each value assigned once per window)
    winner: str             # the subquery's grouping column (who wins it)
    weight: str | None = None   # HAVING sum(weight) >= ALL (...): rows weigh this column; None: count(*)


@dataclass(frozen=True)
class Smoothing:
    """`[adaptive epoch 'E', delta D]`: readings (after WHERE) smoothed per receptor and tag."""

    epoch_ms: int
    delta: float


@dataclass(frozen=True)
class EventPattern:
    """`PATTERN SEQ(...) WITHIN ... PARTITION BY ... DEFINE ...` bound (base.events has its meaning)."""

    steps: tuple[MatchStep, ...]
    within_ms: int                            # 0: no bound
    partition: tuple[str, ...]
    outputs: tuple[tuple[str, str, str], ...]   # (output name, step, column); step "" for a partition column


@dataclass(frozen=True)
class LogicalQuery:
    text: str
    source: str                              # stream or materialized view name
    source_kind: str                         # "stream" | "view"
    source_columns: tuple[Column, ...]
    event_time: str                          # ts for raw streams, window_start for views
    source_window: Window | None             # a view's own window
    window: Window | None
    joins: tuple[RelationJoin, ...]
    predicate: Expr | None                   # over source and joined columns
    keys: tuple[str, ...]
    aggregates: tuple[AggCall, ...]
    having: Expr | None                      # over keys and aggregate names
    outputs: tuple[tuple[str, Expr], ...]    # the select list
    arbitration: Arbitration | None = None
    view_name: str | None = None             # CREATE VIEW
    smoothing: Smoothing | None = None       # the source is read through adaptive smoothing
    derived: tuple[tuple[str, Expr], ...] = ()   # grouping columns computed from each row (GROUP BY an alias)
    pattern: EventPattern | None = None      # an event query: its matches are its rows
    sample_ms: int = 0                       # `sample every`: only the samples whose time is a multiple of it
    approximate: bool = False                # `approximate`: windows carry triaged and error_bound (Data Triage)
    stream_join: StreamJoin | None = None    # a join of streams: source_kind "join", columns `<alias>.<column>`
    changes: tuple[str, ...] | None = None   # EMIT CHANGES BY these: each key's starts and ends, not every window

    @property
    def is_aggregate(self) -> bool:
        return bool(self.aggregates) or bool(self.keys)

    @property
    def visible_columns(self) -> tuple[Column, ...]:
        return self.source_columns + tuple(c for j in self.joins for c in j.columns)
