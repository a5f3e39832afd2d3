"""An incremental evaluator of base.plan trees over Arrow micro-batches. Pure: no I/O.

A node's shared runtime (dsp.shared) reads each input topic once per micro-batch and hands the
batch to every plan reading it; this module is what a plan does with it. Stateless operators
are vectorized (pyarrow.compute); an Aggregate folds each batch into per-group partials
(pyarrow's hash aggregation, then a merge per group, so the Python work is per group, not per
row) and emits a group once its input's *bound* has passed it.

A bound is the promise that no later row has an event time below it:
  - a raw source: the newest event time seen minus the source's lateness (Spark's watermark);
  - a source with progress markers: the smallest of its topics' latest markers (each child
    promises that its later rows start at or after its marker). Until every topic has sent one
    there is none, so a child that starts a little later than its siblings loses nothing; a
    topic still silent once the others have promised SILENT_CHILD_GRACE_MS past their first
    promise is left out (a child with no receptors must not stop its parent);
  - a windowed Aggregate: the start of the earliest window it can still emit;
  - an Aggregate keyed by its input's event time: its input's bound.
A window [s, e) is emitted when e <= bound, a group keyed by event time t when t < bound, and a
row whose event time is below the bound an Aggregate had before the batch is late: dropped and
counted. Unlike Spark, a batch's rows and the windows they close leave in the same micro-batch
(Spark closes them one batch later), and a parent's windows close as soon as the slowest
child's marker passes them — no fixed slack per level.

Data Triage: a raw reader over its node's latency target decodes only a sample of the records
it could not process in time (dsp.kafka_source); their rows carry `weight` k (each stands for
k records' rows) and a batch that left records out a row of weight 0. A source passes the
weights on in hidden columns (WEIGHT, CLUSTER: the record a row came from) and reports the
event-time span of a triaged batch; an Aggregate folds counts and sums weighted (the
Horvitz-Thompson estimate), and an annotated one (`approximate`) says per group whether the
span touched its window (TRIAGED) and bounds its first count or sum (ERROR_BOUND): BOUND_Z
standard deviations of the estimate, the variance estimated from the sampled records as
sum over records of (k^2 - k) x (the record's share of the group)^2. A parent merging
annotated partials ORs the flags and adds the variances (children sample independently).

The whole evaluator pickles (dsp.shared saves it after each batch, so a restart resumes it).
"""

from __future__ import annotations

import functools
import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from base.changes import KeyChanges
from base.events import Found, PatternState, Step, order_key, ordering_columns
from base.mote_quality import MoteQuality, judge_periods
from base.plan import (
    ERROR_BOUND,
    EVENT_TIME,
    JOIN_OLDEST,
    JOIN_TIME,
    PROGRESS_COLUMN,
    SAMPLE_QUANTITIES,
    TRIAGED,
    Aggregate,
    AggSpec,
    Changes,
    Filter,
    LookupJoin,
    Match,
    Plan,
    PlanError,
    Project,
    Qualify,
    Source,
    Union_,
    WindowJoin,
    conjuncts,
    event_time_column,
    output_columns,
)
from base.window_join import Buffers
from dsp.arrow_exprs import arrow_schema, arrow_type, column, epoch_ms, evaluate, timestamps
from dsp.topic_batch import TOPIC_COLUMN, TopicBatch
from wire.windows import Window

# aggregates Arrow has no hash kernel for: argmax (the row with the largest `by`) and
# union_sets (hash_list has no kernel for list values in pyarrow 26)
ROW_BY_ROW = ("argmax", "union_sets")

# Hidden columns of a triaged batch's rows (see the module docstring): how many records a row's
# record stands for, and which record it came from (partition and offset in one number).
WEIGHT, CLUSTER = "__weight", "__cluster"
HIDDEN = (WEIGHT, CLUSTER)
# The error bound is this many standard deviations of the estimate: it holds for 99 % of groups
# (normal approximation).
BOUND_Z = 2.576


def _none_min(a: Any, b: Any) -> Any:
    return b if a is None else a if b is None else min(a, b)


def _none_max(a: Any, b: Any) -> Any:
    return b if a is None else a if b is None else max(a, b)


def _none_add(a: Any, b: Any) -> Any:
    return b if a is None else a if b is None else a + b


def first_window_open(bound: int, range_ms: int, slide_ms: int) -> int:
    """The start of the earliest window (starts are multiples of the slide) ending after `bound`."""
    return ((bound - range_ms) // slide_ms + 1) * slide_ms


def _together(tables: Sequence[pa.Table]) -> pa.Table | None:
    """Tables of one operator's output as one (a triaged input's hidden weights: null is 1)."""
    if len(tables) <= 1:
        return tables[0] if tables else None
    return pa.concat_tables(tables, promote_options="default")


class Operator:
    """One node of an evaluated plan: `push` hands it a topic's batch (in the reader's shape)
    and returns the rows it lets through now, or None when it does not read that topic."""

    columns: tuple[tuple[str, str], ...]

    def push(self, topic: str, batch: pa.Table) -> pa.Table | None:
        raise NotImplementedError

    def push_many(self, pieces: Sequence[tuple[str, pa.Table]]) -> pa.Table | None:
        """One micro-batch of several topics (a shared reader's), as `push` of each in turn would
        return it, the rows together; None when the operator reads none of them. An aggregate
        folds and emits once (AggregateOp), whatever the number of topics."""
        outs = [out for topic, batch in pieces if (out := self.push(topic, batch)) is not None]
        return _together(outs)

    def push_tagged(self, batch: TopicBatch) -> pa.Table | None:
        """A shared reader's micro-batch (dsp.topic_batch), as `push_many` of its pieces would
        return it; an Aggregate over children's views takes it whole (AggregateOp.push_tagged)."""
        return self.push_many(batch.pieces)

    def bound(self) -> int | None:
        raise NotImplementedError

    def late_rows(self) -> int:
        return 0

    def triaged(self) -> tuple[int, int] | None:
        """The event-time span (ms) of the last batch pushed if Data Triage sampled it, else None."""
        return None


def carry_hidden(source: pa.Table, out: pa.Table) -> pa.Table:
    """`out` (computed row for row from `source`) with `source`'s triage weights and topic, if it has them."""
    for name in (*HIDDEN, TOPIC_COLUMN):
        if name in source.column_names:
            out = out.append_column(name, source[name])
    return out


# Event time a parent waits for a child that has never sent a marker before leaving it out. At
# start children come up seconds apart (a parent that went on without the later one assigned
# its tags to the other's location, then dropped its rows as late: seen in the e2e suite).
SILENT_CHILD_GRACE_MS = 30_000


# A column only a raw topic's batches of that form have: a union of raw streams (receptor_stream)
# reads one topic in two forms, each reader's batch is for the source of its form.
FORM_COLUMN = {"rfid": "tag_id", "samples": "temperature"}


@dataclass(frozen=True)
class SourceProgress:
    """What one batch of a topic tells its source about event time."""

    newest_ms: int | None = None        # the newest event time among its rows (raw sources)
    mark_ms: int | None = None          # its newest progress marker (sources of children's views)
    triaged: bool = False               # a raw RFID batch: whether `triaged_span` is this batch's
    triaged_span: tuple[int, int] | None = None


@dataclass
class SourceOp(Operator):
    plan: Source
    newest_ms: int | None = None                       # raw sources: newest event time seen
    marks: dict[str, int] = field(default_factory=dict)  # marker sources: each topic's latest promise
    first_mark_ms: int | None = None                   # marker sources: the first promise of any topic
    triaged_span: tuple[int, int] | None = None        # raw sources: the last batch's, if triaged
    # raw sources fed a node's archive (a query over the past): how much more than the plan's
    # lateness the bound waits, so rows that came too late live are in their windows (dsp.shared)
    history_lateness_ms = 0

    def __post_init__(self) -> None:
        self.columns = self.plan.columns
        self.schema = arrow_schema(self.plan.columns)

    def reads(self, topic: str, names: Sequence[str]) -> bool:
        """Whether a batch of `topic` with columns `names` is this source's (a raw topic's batch
        of the other form is not: receptor_stream reads both)."""
        form = FORM_COLUMN.get(self.plan.format)
        return topic in self.plan.topics and (form is None or form in names)

    def push(self, topic: str, batch: pa.Table) -> pa.Table | None:
        names = batch.column_names
        if not self.reads(topic, names):
            return None
        progress = SourceProgress()
        hidden: dict[str, pa.ChunkedArray] = {}
        if self.plan.format == "rfid":
            span, hidden = self._triage(batch)
            progress = replace(progress, triaged=True, triaged_span=span)
            valid = pc.is_null(batch["error"]) if "error" in names else None
            if "tag_id" in names:   # heartbeat rows (a cycle, no tag) are for adaptive smoothing only
                tagged = pc.is_valid(batch["tag_id"])
                valid = tagged if valid is None else pc.and_(valid, tagged)
            # the plan's columns only, and filtered only if a row must go: a filter copies what it
            # keeps (2 M raw rows: 0.66 s filtering all twelve columns, most of a node's batch)
            batch = batch.select([name for name, _ in self.plan.columns])
            if hidden:
                batch = batch.append_column(WEIGHT, hidden[WEIGHT]).append_column(CLUSTER, hidden[CLUSTER])
            if valid is not None and not pc.all(valid).as_py():
                batch = batch.filter(valid)
        if PROGRESS_COLUMN in names:
            is_marker = pc.fill_null(batch[PROGRESS_COLUMN], False)
            promises = batch.filter(is_marker)
            if promises.num_rows:
                progress = replace(progress, mark_ms=pc.max(epoch_ms(promises[self.plan.event_time])).as_py())
            batch = batch.filter(pc.invert(is_marker))
        if self.plan.format == "samples" and batch.num_rows:
            # a sample batch's clock row (no receptor: dsp.kafka_source) moves event time, nothing else
            progress = replace(progress, newest_ms=pc.max(epoch_ms(batch[self.plan.event_time])).as_py())
            batch = batch.filter(pc.is_valid(batch["receptor_id"]))
            if self.plan.sample_ms:   # `sample every`: the samples on the period only
                ms = epoch_ms(batch[self.plan.event_time])
                batch = batch.filter(pc.equal(pc.subtract(ms, pc.multiply(pc.divide(ms, self.plan.sample_ms),
                                                                           self.plan.sample_ms)), 0))
        rows = batch.select([name for name, _ in self.plan.columns]).cast(self.schema)
        if hidden:
            rows = carry_hidden(batch, rows)
        if self.plan.format != "samples" and rows.num_rows:
            progress = replace(progress, newest_ms=pc.max(epoch_ms(rows[self.plan.event_time])).as_py())
        self.advance(topic, progress)
        return rows

    def advance(self, topic: str, progress: SourceProgress) -> None:
        """Take in what a batch of `topic` promised (both the driver's path and Spark's, dsp.spark.partials)."""
        if progress.triaged:
            self.triaged_span = progress.triaged_span
        if progress.mark_ms is not None and self.plan.markers:
            self.marks[topic] = max(self.marks.get(topic, progress.mark_ms), progress.mark_ms)
            self.first_mark_ms = _none_min(self.first_mark_ms, progress.mark_ms)
        if progress.newest_ms is not None and not self.plan.markers:
            self.newest_ms = _none_max(self.newest_ms, progress.newest_ms)

    def tagged_rows(self, batch: TopicBatch, topics: set[str]) -> pa.Table | None:
        """Its rows of `topics` of a batch of children's views, each with its topic (no progress
        taken in: `advance_topics` does that); None when it reads none of them."""
        mine = [t for t in batch.topics if t in topics and self.reads(t, batch.names)]
        if not mine:
            return None
        keep = pc.invert(batch.is_marker)
        if len(mine) < len(batch.whole.topics):
            keep = pc.and_(keep, pc.is_in(batch.table[TOPIC_COLUMN], pa.array(mine, pa.string())))
        rows = batch.table.filter(keep)
        out = rows.select([name for name, _ in self.plan.columns]).cast(self.schema)
        return out.append_column(TOPIC_COLUMN, rows[TOPIC_COLUMN])

    def bound(self) -> int | None:
        if self.plan.markers:
            if not self.marks:
                return None
            heard = min(self.marks.values())
            waiting = self.first_mark_ms is not None and heard - self.first_mark_ms < SILENT_CHILD_GRACE_MS
            if len(self.marks) < len(self.plan.topics) and waiting:
                return None
            return heard
        if self.newest_ms is None:
            return None
        return self.newest_ms - self.plan.watermark_ms - self.history_lateness_ms

    def triaged(self) -> tuple[int, int] | None:
        return self.triaged_span

    def _triage(self, batch: pa.Table) -> tuple[tuple[int, int] | None, dict[str, pa.ChunkedArray]]:
        """A raw batch's triage: the event-time span of its rows if its reader left records out
        (rows of weight other than 1), and then the hidden weight and record columns."""
        if "weight" not in batch.column_names or not batch.num_rows:
            return None, {}
        # every weight 1 (a null is 1) in one pass with nothing allocated: 2 M rows in ~5 ms,
        # against ~60 ms filling nulls and comparing (measured)
        if all(v in (None, 1) for v in pc.min_max(batch["weight"]).as_py().values()):
            return None, {}
        weight = pc.fill_null(batch["weight"], 1)
        stamps = epoch_ms(batch[self.plan.event_time])
        low, high = pc.min(stamps).as_py(), pc.max(stamps).as_py()
        span = (low, high) if low is not None else (self.newest_ms or 0, self.newest_ms or 0)
        record = pc.add(pc.multiply(pc.cast(pc.fill_null(batch["partition"], 0), pa.int64()), 1 << 40),
                        pc.fill_null(batch["offset"], 0))
        return span, {WEIGHT: pc.cast(weight, pa.int64()), CLUSTER: record}


@dataclass
class RowwiseOp(Operator):
    """An operator over one child that maps each batch its child gives (a filter, a projection, a
    lookup join row by row; the judging of mote quality period by period): it reads what its
    child reads and its progress is its child's unless it says otherwise."""

    child: Operator

    def apply(self, rows: pa.Table | None) -> pa.Table | None:
        """What it makes of its child's rows (None: its child read none of the topics)."""
        raise NotImplementedError

    def push(self, topic: str, batch: pa.Table) -> pa.Table | None:
        return self.apply(self.child.push(topic, batch))

    def push_many(self, pieces: Sequence[tuple[str, pa.Table]]) -> pa.Table | None:
        return self.apply(self.child.push_many(pieces))

    def push_tagged(self, batch: TopicBatch) -> pa.Table | None:
        return self.apply(self.child.push_tagged(batch))

    def bound(self) -> int | None:
        return self.child.bound()

    def late_rows(self) -> int:
        return self.child.late_rows()

    def triaged(self) -> tuple[int, int] | None:
        return self.child.triaged()


@dataclass
class FilterOp(RowwiseOp):
    plan: Filter

    def __post_init__(self) -> None:
        self.columns = self.child.columns
        self.terms = conjuncts(self.plan.predicate)

    def apply(self, rows: pa.Table | None) -> pa.Table | None:
        """The rows of `rows` the predicate holds for."""
        # term by term, in the plan's order (the planner puts the most selective first,
        # glue.rewrite.selectivity): each later term is evaluated on the rows the earlier kept
        for term in self.terms:
            if rows is None or not rows.num_rows:
                return rows
            keep = evaluate(term, rows)
            if isinstance(keep, pa.Scalar):
                rows = rows if keep.as_py() else rows.slice(0, 0)
            else:
                rows = rows.filter(keep)   # NULL is not true: dropped, as in SQL
        return rows



@dataclass
class ProjectOp(RowwiseOp):
    plan: Project

    def __post_init__(self) -> None:
        self.columns = output_columns(self.plan)
        self.schema = arrow_schema(self.columns)

    def apply(self, rows: pa.Table | None) -> pa.Table | None:
        """The projection of `rows`."""
        if rows is None:
            return None
        outputs = zip(self.plan.outputs, self.columns, strict=True)
        arrays = [column(expr, rows, kind) for (_, expr), (_, kind) in outputs]
        return carry_hidden(rows, pa.Table.from_arrays(arrays, schema=self.schema))



@dataclass
class LookupJoinOp(RowwiseOp):
    """Stream-static left outer equi-join with a relation the node holds."""

    plan: LookupJoin
    rows: Sequence[tuple] = ()

    def __post_init__(self) -> None:
        self.columns = output_columns(self.plan)
        self.schema = arrow_schema(self.columns)
        key_type = dict(self.child.columns)[self.plan.on]
        schema = arrow_schema([(self.plan.on, key_type), *self.plan.columns])
        self.relation = pa.Table.from_pylist([dict(zip(schema.names, row, strict=False)) for row in self.rows],
                                             schema=schema)

    def apply(self, rows: pa.Table | None) -> pa.Table | None:
        """`rows` joined with the relation (a row without a match keeps NULLs)."""
        if rows is None:
            return None
        joined = rows.join(self.relation, keys=self.plan.on, join_type="left outer", use_threads=False)
        return carry_hidden(joined, joined.select(self.schema.names).cast(self.schema))



@dataclass
class UnionOp(Operator):
    children: list[Operator]
    first_ms: int | None = None    # the first bound any input gave

    def __post_init__(self) -> None:
        self.columns = self.children[0].columns

    def push(self, topic: str, batch: pa.Table) -> pa.Table | None:
        parts = [rows for child in self.children if (rows := child.push(topic, batch)) is not None]
        # an input's rows may carry triage weights the other's lack (null: weight 1)
        return pa.concat_tables(parts, promote_options="default") if parts else None

    def bound(self) -> int | None:
        """The smallest of the inputs' bounds. An input with none yet is waited for (its reader
        may start later) until the others are SILENT_CHILD_GRACE_MS past their first; an input
        that far behind the newest (a node with no motes, or whose motes all went silent) must
        not hold the other's rows for ever."""
        bounds = [child.bound() for child in self.children]
        heard = [b for b in bounds if b is not None]
        if not heard:
            return None
        newest = max(heard)
        self.first_ms = _none_min(self.first_ms, min(heard))
        if len(heard) < len(bounds) and newest - self.first_ms < SILENT_CHILD_GRACE_MS:
            return None
        return min(b for b in heard if newest - b < SILENT_CHILD_GRACE_MS)

    def late_rows(self) -> int:
        return sum(child.late_rows() for child in self.children)

    def triaged(self) -> tuple[int, int] | None:
        spans = [span for child in self.children if (span := child.triaged()) is not None]
        return (min(s[0] for s in spans), max(s[1] for s in spans)) if spans else None


@dataclass
class WindowJoinOp(Operator):
    """A window join (base.window_join): each input's new rows probe the others' buffers, one at a
    time, and the combinations they complete go out at once; rows behind their input's bound are
    late (dropped and counted, as an Aggregate drops them); buffers are evicted as bounds pass."""

    plan: WindowJoin
    children: list[Operator]
    buffers: Buffers | None = None
    late: int = 0

    def __post_init__(self) -> None:
        self.columns = output_columns(self.plan)
        self.schema = arrow_schema(self.columns)
        self.times = [event_time_column(child) for child in self.plan.children]
        if self.buffers is None:
            self.buffers = Buffers(self.plan.aliases, self.plan.keys, self.plan.bounds)

    def push(self, topic: str, batch: pa.Table) -> pa.Table | None:
        assert self.buffers is not None
        befores = [child.bound() for child in self.children]
        pushed = [child.push(topic, batch) for child in self.children]
        if all(rows is None for rows in pushed):
            return None
        found: list[dict[str, tuple[int, dict]]] = []
        for alias, time, before, rows in zip(self.plan.aliases, self.times, befores, pushed, strict=True):
            if rows is None or not rows.num_rows:
                continue
            for stamp, row in zip(epoch_ms(rows[time]).to_pylist(), rows.to_pylist(), strict=True):
                if stamp is not None and stamp < self.plan.from_ms:
                    continue   # from before the query's start: it joins nothing
                if stamp is None or (before is not None and stamp < before):
                    self.late += 1
                    continue
                found += self.buffers.add(alias, stamp, row)
        self.buffers.evict(dict(zip(self.plan.aliases, (child.bound() for child in self.children), strict=True)))
        return self._rows(found)

    def _rows(self, found: list[dict[str, tuple[int, dict]]]) -> pa.Table:
        values: dict[str, list] = {name: [] for name, _ in self.columns}
        for combination in found:
            for alias, child in zip(self.plan.aliases, self.children, strict=True):
                row = combination[alias][1]
                for name, _ in child.columns:
                    if name != EVENT_TIME:
                        values[f"{alias}.{name}"].append(row[name])
            times = [t for t, _ in combination.values()]
            values[JOIN_OLDEST].append(min(times))
            values[JOIN_TIME].append(max(times))
        arrays = [pa.array(values[name], arrow_type(kind)) for name, kind in self.columns[:-2]]
        return pa.Table.from_arrays([*arrays, timestamps(values[JOIN_OLDEST]), timestamps(values[JOIN_TIME])],
                                    schema=self.schema)

    def bound(self) -> int | None:
        """No joined row to come is older than the oldest input's bound: its newest row is one
        still to come, at or after that input's bound."""
        bounds = [child.bound() for child in self.children]
        return None if any(b is None for b in bounds) else min(bounds)   # type: ignore[type-var]

    def late_rows(self) -> int:
        return sum(child.late_rows() for child in self.children) + self.late


# ---------------------------------------------------------------- aggregation

class Partial:
    """How one aggregate is computed per batch by Arrow, merged across batches and finished."""

    def __init__(self, spec: AggSpec) -> None:
        self.spec = spec

    def arrow(self, weighted: bool = False) -> list[tuple]:
        """pyarrow hash aggregations whose results `start` turns into this partial; `weighted`:
        over a triaged batch, counts and sums as estimates (the columns `weighted_inputs` adds)."""
        fn, col = self.spec.fn, self.spec.column
        if weighted and fn in ("count", "sum", "avg"):
            rows, total = (f"__rows_{col}" if col else WEIGHT, "sum"), (f"__total_{col}", "sum")
            return [rows] if fn == "count" else [total] if fn == "sum" else [total, rows]
        if fn == "count":
            return [(col, "count")] if col else [([], "count_all")]
        if fn in ("count_distinct", "collect_set"):
            return [(col, "distinct", pc.CountOptions(mode="only_valid"))]
        if fn == "avg":
            return [(col, "sum"), (col, "count")]
        if fn in ROW_BY_ROW:
            return []   # folded row by row (see AggregateOp._row_by_row)
        return [(col, fn)]

    def weighted_inputs(self, rows: pa.Table) -> dict[str, Any]:
        """The columns `arrow(weighted=True)` sums: a row's weight where its column is set, and
        its value times its weight."""
        fn, col = self.spec.fn, self.spec.column
        if fn not in ("count", "sum", "avg") or col is None:
            return {}
        weight = rows[WEIGHT]
        found = {f"__rows_{col}": pc.if_else(pc.is_valid(rows[col]), weight, 0)}
        if fn != "count":
            value = rows[col]
            found[f"__total_{col}"] = pc.multiply(value, pc.cast(weight, value.type))
        return found

    def estimand(self, rows: pa.Table) -> pa.ChunkedArray | pa.Array:
        """What a row adds to this count or sum, unweighted (the variance of a triaged estimate)."""
        col = self.spec.column
        if col is None:
            return pa.array([1.0] * rows.num_rows)
        if self.spec.fn == "count":
            return pc.cast(pc.is_valid(rows[col]), pa.float64())
        return pc.fill_null(pc.cast(rows[col], pa.float64()), 0.0)

    def start(self, values: list[Any]) -> Any:
        fn = self.spec.fn
        if fn in ("count_distinct", "collect_set"):
            return set(values[0] or ())
        if fn == "avg":
            return [values[0], values[1]]
        return values[0]

    def row(self, value: Any, by: Any) -> Any:
        """The partial of one row (the aggregates Arrow cannot fold: ROW_BY_ROW)."""
        if self.spec.fn == "union_sets":
            return {item for item in value or () if item is not None}
        return None if by is None else (by, value)

    def merge(self, a: Any, b: Any) -> Any:
        fn = self.spec.fn
        if fn == "count":
            return a + b
        if fn in ("count_distinct", "collect_set", "union_sets"):
            return a | b
        if fn == "avg":
            return [_none_add(a[0], b[0]), a[1] + b[1]]
        if fn == "sum":
            return _none_add(a, b)
        if fn == "min":
            return _none_min(a, b)
        if fn == "max":
            return _none_max(a, b)
        if fn == "argmax":   # (by, value): the larger by, ties to the smaller value
            if a is None or b is None:
                return b if a is None else a
            return a if (a[0], _Desc(a[1])) >= (b[0], _Desc(b[1])) else b
        raise PlanError(f"aggregate {self.spec.name}: unknown function {fn!r}")

    def finish(self, partial: Any) -> Any:
        fn = self.spec.fn
        if fn == "count_distinct":
            return len(partial)
        if fn in ("collect_set", "union_sets"):
            return sorted(partial)
        if fn == "avg":
            return partial[0] / partial[1] if partial[1] else None
        if fn == "argmax":
            return None if partial is None else partial[1]
        return partial


@dataclass(frozen=True)
class _Desc:
    """Orders its value in reverse (argmax's tie-break: the smallest value wins)."""

    value: Any

    def __ge__(self, other: _Desc) -> bool:
        return self.value <= other.value

    def __gt__(self, other: _Desc) -> bool:
        return self.value < other.value

    def __lt__(self, other: _Desc) -> bool:
        return self.value > other.value

    def __le__(self, other: _Desc) -> bool:
        return self.value >= other.value


WINDOW_COLUMN = "__window_start"


@dataclass
class AggregateOp(Operator):
    """Groups (per window) folded batch by batch; a group leaves once the input's bound passes it."""

    plan: Aggregate
    child: Operator
    # {bucket: {group: [partial per aggregate]}}; a bucket is the window start (ms) of a windowed
    # aggregate, else the group's event time (ms), else None (a group that never closes)
    buckets: dict[int | None, dict[tuple, list]] = field(default_factory=dict)
    late: int = 0
    # annotated (`approximate`) only: {bucket: {group: [triaged, variance of the estimate]}}, and
    # the event-time spans of the triaged batches that open windows may overlap
    notes: dict[int | None, dict[tuple, list]] = field(default_factory=dict)
    triaged_spans: list[tuple[int, int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.columns = output_columns(self.plan)
        self.schema = arrow_schema(self.columns)
        self.partials = [Partial(spec) for spec in self.plan.aggregates]
        self.time_column = event_time_column(self.plan.child)
        window = self.plan.window
        if window is None and self.time_column in self.plan.keys:
            self.bucket_key: int | None = self.plan.keys.index(self.time_column)
        else:
            self.bucket_key = None
        if window is not None and self.time_column is None:
            raise PlanError("windowed aggregate over an input without event time")

    def push(self, topic: str, batch: pa.Table) -> pa.Table | None:
        return self.push_many([(topic, batch)])

    def push_many(self, pieces: Sequence[tuple[str, pa.Table]]) -> pa.Table | None:
        """Each topic's rows judged late against the bound before that topic (as `push` in turn
        would), then folded in one group-by and emitted once: no row a later topic brings lands
        in a window an earlier one closed, since a bound never falls (so it would be late). A
        parent of 64 children's views folded and emitted 64 times a batch. Annotated aggregates
        note every batch's triage span and estimate: they take several topics in turn."""
        if self.plan.annotate and len(pieces) > 1:
            return super().push_many(pieces)
        kept: list[pa.Table] = []
        for topic, batch in pieces:
            before = self.child.bound()
            rows = self.child.push(topic, batch)
            if rows is None:
                continue
            span = self.child.triaged()
            if span is not None and self.plan.annotate:
                self.triaged_spans.append(span)
            kept.append(self._on_time(rows, before))
        if not kept:
            return None
        rows = _together(kept)
        if rows is not None and rows.num_rows:
            self._fold(self._windowed(rows) if self.plan.window is not None else rows)
        return self.emit()

    def push_tagged(self, batch: TopicBatch) -> pa.Table | None:
        """A batch of children's views taken whole: each topic's progress taken in, in the
        reader's order, noting the bound before it; the rows through the stateless prefix at
        once, each judged late against its topic's bound before; one fold, one emit. What
        `push_many` of its pieces does, with the per-topic work one group-by (dsp.topic_batch)."""
        if TOPIC_COLUMN not in batch.table.column_names or self.plan.annotate or not takes_whole(self.child):
            return self.push_many(batch.pieces)
        befores = advance_topics(self, batch.topics, batch.names, functools.partial(view_progress, batch))
        if not befores:
            return None
        rows = tagged_rows(self.child, batch, set(befores))
        if rows is not None and rows.num_rows:
            rows = self._on_time(rows.drop_columns([TOPIC_COLUMN]), _per_row(rows[TOPIC_COLUMN], befores))
            if rows.num_rows:
                self._fold(self._windowed(rows) if self.plan.window is not None else rows)
        return self.emit()

    def _on_time(self, rows: pa.Table, before: int | pa.Array | None) -> pa.Table:
        """`rows` but those late against `before`, the input's bound before they came (counted;
        per row when their topics' bounds differ)."""
        if not rows.num_rows or before is None or self.time_column is None:
            return rows
        on_time = pc.fill_null(pc.greater_equal(epoch_ms(rows[self.time_column]), before), True)
        kept = rows.filter(on_time)
        self.late += rows.num_rows - kept.num_rows
        return kept

    def emit(self) -> pa.Table:
        """The groups the input's bound has passed, finished (HAVING applied): they leave the state."""
        return self._emit(self.child.bound())

    def bound(self) -> int | None:
        inner = self.child.bound()
        if inner is None or self.plan.window is None:
            return inner
        return first_window_open(inner, self.plan.window.range_ms, self.plan.window.slide_ms)

    def late_rows(self) -> int:
        return self.late + self.child.late_rows()

    def _windowed(self, rows: pa.Table) -> pa.Table:
        """Each row once per window containing it, with that window's start (ms)."""
        assert self.plan.window is not None and self.time_column is not None
        range_ms, slide_ms = self.plan.window.range_ms, self.plan.window.slide_ms
        times = epoch_ms(rows[self.time_column])
        last = pc.multiply(pc.divide(times, slide_ms), slide_ms)   # event times are positive: floor
        copies = []
        for i in range(-(-range_ms // slide_ms)):
            starts = pc.subtract(last, i * slide_ms)
            copy = rows.append_column(WINDOW_COLUMN, starts)
            if range_ms % slide_ms:
                copy = copy.filter(pc.greater(pc.add(starts, range_ms), times))
            copies.append(copy)
        return pa.concat_tables(copies)

    def _group_columns(self) -> list[str]:
        return ([WINDOW_COLUMN] if self.plan.window is not None else []) + list(self.plan.keys)

    def _fold(self, rows: pa.Table) -> None:
        keys = self._group_columns()
        weighted = WEIGHT in rows.column_names
        if weighted:   # a triaged batch: counts and sums are estimates (rows of a union's other input: weight 1)
            rows = rows.set_column(rows.column_names.index(WEIGHT), WEIGHT, pc.fill_null(rows[WEIGHT], 1))
            for partial in self.partials:
                for name, values in partial.weighted_inputs(rows).items():
                    if name not in rows.column_names:
                        rows = rows.append_column(name, values)
        if self.plan.annotate:
            self._note(rows, keys, weighted)
        specs = [agg for partial in self.partials for agg in partial.arrow(weighted)]
        grouped = rows.group_by(keys, use_threads=False).aggregate(specs)
        first = grouped.num_columns - len(specs)   # aggregates follow the keys (pyarrow >= 14)
        results = [grouped.column(first + i).to_pylist() for i in range(len(specs))]
        best = {i: self._row_by_row(rows, keys, p) for i, p in enumerate(self.partials) if p.spec.fn in ROW_BY_ROW}
        self.fold_groups(group_rows(grouped, keys), results, best, weighted)

    def fold_groups(self, groups: list[tuple], results: list[list], best: Mapping[int, Mapping[tuple, Any]],
                    weighted: bool) -> None:
        """Merge a batch's partials into the state: per group (values of the group columns) the
        values of `Partial.arrow`'s aggregations in order (`results`, a list per aggregation), and
        the ROW_BY_ROW aggregates' partials per group (`best`, by aggregate index). The driver's
        path and Spark's (dsp.spark.partials) both end here."""
        for n, group in enumerate(groups):
            fresh, at = [], 0
            for i, partial in enumerate(self.partials):
                width = len(partial.arrow(weighted))
                fresh.append(best[i].get(group) if i in best else partial.start([r[n] for r in results[at:at + width]]))
                at += width
            self._merge(group, fresh)

    def _note(self, rows: pa.Table, keys: list[str], weighted: bool) -> None:
        """An annotated aggregate's per-group approximation: the variance its sampled records
        add to the estimate of its first aggregate; a child's annotated partials' flags and
        variances (from their bounds)."""
        if weighted:
            sampled = rows.filter(pc.greater(rows[WEIGHT], 1))
            if sampled.num_rows:
                shares = sampled.append_column("__share", self.partials[0].estimand(sampled)).group_by(
                    [*keys, CLUSTER, WEIGHT], use_threads=False).aggregate([("__share", "sum")])
                weight, share = pc.cast(shares[WEIGHT], pa.float64()), shares["__share_sum"]
                spread = pc.subtract(pc.multiply(weight, weight), weight)   # k^2 - k
                shares = shares.append_column("__variance", pc.multiply(spread, pc.multiply(share, share)))
                self._add_notes(shares.group_by(keys, use_threads=False).aggregate([("__variance", "sum")]), keys)
        if TRIAGED in rows.column_names and ERROR_BOUND in rows.column_names:
            deviation = pc.divide(pc.fill_null(rows[ERROR_BOUND], 0.0), BOUND_Z)
            children = rows.append_column("__variance", pc.multiply(deviation, deviation))
            self._add_notes(children.group_by(keys, use_threads=False).aggregate(
                [("__variance", "sum"), (TRIAGED, "any")]), keys)

    def _add_notes(self, grouped: pa.Table, keys: list[str]) -> None:
        variances = grouped["__variance_sum"].to_pylist()
        flags = grouped[f"{TRIAGED}_any"].to_pylist() if f"{TRIAGED}_any" in grouped.column_names else None
        for i, group in enumerate(group_rows(grouped, keys)):
            note = self.notes.setdefault(self._bucket(group), {}).setdefault(group, [flags is None, 0.0])
            note[0] = note[0] or bool(flags is None or flags[i])
            note[1] += variances[i] or 0.0

    def _spanned(self, bucket: int | None) -> bool:
        """Whether a triaged batch's span touches the bucket's window (or event time)."""
        if bucket is None:
            return False
        end = bucket + self.plan.window.range_ms if self.plan.window is not None else bucket + 1
        return any(low < end and high >= bucket for low, high in self.triaged_spans)

    @staticmethod
    def _row_by_row(rows: pa.Table, keys: list[str], partial: Partial) -> dict[tuple, Any]:
        """A ROW_BY_ROW aggregate's partial per group of a batch (their inputs are a child's
        partials: few rows)."""
        spec = partial.spec
        assert spec.column is not None
        found: dict[tuple, Any] = {}
        groups = zip(*[rows[k].to_pylist() for k in keys], strict=True)
        bys = rows[spec.by].to_pylist() if spec.by else [None] * rows.num_rows
        for group, value, by in zip(groups, rows[spec.column].to_pylist(), bys, strict=True):
            fresh = partial.row(value, by)
            found[group] = fresh if group not in found else partial.merge(found[group], fresh)
        return found

    def _bucket(self, group: tuple) -> int | None:
        if self.plan.window is not None:
            return group[0]
        if self.bucket_key is None:
            return None
        value = group[self.bucket_key]
        return None if value is None else _ms(value)

    def _merge(self, group: tuple, fresh: list) -> None:
        bucket = self.buckets.setdefault(self._bucket(group), {})
        held = bucket.get(group)
        if held is None:
            bucket[group] = fresh
            return
        for i, partial in enumerate(self.partials):
            held[i] = partial.merge(held[i], fresh[i])

    def _closed(self, bucket: int | None, bound: int) -> bool:
        if bucket is None:
            return False
        if self.plan.window is not None:
            return bucket + self.plan.window.range_ms <= bound
        return bucket < bound

    def _emit(self, bound: int | None) -> pa.Table:
        if bound is None:
            return self.schema.empty_table()
        done = sorted(b for b in self.buckets if self._closed(b, bound))
        out: list[list[Any]] = []
        for bucket in done:
            notes, spanned = self.notes.pop(bucket, {}), self.plan.annotate and self._spanned(bucket)
            for group, held in self.buckets.pop(bucket).items():
                row = [*group, *(p.finish(h) for p, h in zip(self.partials, held, strict=True))]
                if self.plan.annotate:
                    triaged, variance = notes.get(group, (False, 0.0))
                    row += [bool(triaged or spanned), BOUND_Z * math.sqrt(variance)]
                out.append(row)
        if self.triaged_spans:   # spans no window still open can overlap
            oldest = min((b for b in self.buckets if b is not None), default=bound)
            self.triaged_spans = [s for s in self.triaged_spans if s[1] >= oldest]
        return self._table(out)

    def _table(self, out: list[list[Any]]) -> pa.Table:
        columns = list(zip(*out, strict=True)) if out else [[] for _ in range(len(self.columns) - (
            1 if self.plan.window is not None else 0))]
        arrays: list[Any] = []
        at = 0
        if self.plan.window is not None:
            starts = timestamps(list(columns[0]))
            ends = timestamps([s + self.plan.window.range_ms for s in columns[0]])
            arrays += [starts, ends]
            at = 1
        for (_, kind), values in zip(self.columns[len(arrays):], columns[at:], strict=True):
            arrays.append(pa.array(list(values), arrow_type(kind)))
        table = pa.Table.from_arrays(arrays, schema=self.schema)
        if self.plan.having is not None and table.num_rows:
            table = table.filter(evaluate(self.plan.having, table))
        return table


def takes_whole(op: Operator) -> bool:
    """Whether `op` (an Aggregate's input) computes a batch of children's views at once: sources
    of views under filters, projections, lookup joins and unions (spark_partials' prefix too)."""
    if isinstance(op, SourceOp):
        return op.plan.format == "rows"
    if isinstance(op, UnionOp):
        return all(takes_whole(child) for child in op.children)
    return isinstance(op, FilterOp | ProjectOp | LookupJoinOp) and takes_whole(op.child)


Progress = Callable[["SourceOp", str], SourceProgress]   # what a batch's rows of a topic tell a source


def advance_topics(aggregate: AggregateOp, topics: Sequence[str], names: Sequence[str], progress: Progress,
                   together: bool = False) -> dict[str, int | None]:
    """Each of a batch's `topics` (in order) taken in by the sources under `aggregate` reading it
    (`progress`: what its rows tell a source); per topic read, its input's bound before it — the
    bound its rows are late against (`together`: the bound before the batch, for all). Both the
    driver's whole batch (AggregateOp.push_tagged) and Spark's (dsp.spark.partials) go through here."""
    befores: dict[str, int | None] = {}
    first, under = aggregate.child.bound(), sources_under(aggregate)
    for topic in topics:
        readers = [s for s in under if s.reads(topic, names)]
        if not readers:
            continue
        befores[topic] = first if together else aggregate.child.bound()
        for source in readers:
            source.advance(topic, progress(source, topic))
    return befores


def view_progress(batch: TopicBatch, source: SourceOp, topic: str) -> SourceProgress:
    """What a batch's rows of `topic` tell a source of children's views (as SourceOp.push finds it)."""
    newest, mark = batch.times(source.plan.event_time).get(topic, (None, None))
    return SourceProgress(newest_ms=newest, mark_ms=mark)


def tagged_rows(op: Operator, batch: TopicBatch, topics: set[str]) -> pa.Table | None:
    """`op`'s rows (`takes_whole`) of the batch's `topics`, each with its topic."""
    if isinstance(op, SourceOp):
        return op.tagged_rows(batch, topics)
    if isinstance(op, UnionOp):
        found = [rows for child in op.children if (rows := tagged_rows(child, batch, topics)) is not None]
        return _together(found)
    assert isinstance(op, RowwiseOp)
    return op.apply(tagged_rows(op.child, batch, topics))


def _per_row(topics: pa.ChunkedArray, befores: Mapping[str, int | None]) -> pa.Array | None:
    """Each row's bound from its topic's (`befores`; null where a topic had none)."""
    known = [(topic, before) for topic, before in befores.items() if before is not None]
    if not known:
        return None
    index = pc.index_in(topics, value_set=pa.array([t for t, _ in known], pa.string()))
    return pc.take(pa.array([b for _, b in known], pa.int64()), index)


def group_rows(grouped: pa.Table, keys: Sequence[str]) -> list[tuple]:
    """Each row's values of the group columns `keys`."""
    if not keys:
        return [()] * grouped.num_rows
    return list(zip(*[grouped[k].to_pylist() for k in keys], strict=True))


def _ms(value: Any) -> int:
    if hasattr(value, "timestamp"):
        return round(value.timestamp() * 1000)
    return int(value)


@dataclass
class MatchOp(Operator):
    """Event patterns (base.events): rows held until the input's bound has passed them, then fed
    in event-time order to their partition's candidates; matches go out as rows."""

    plan: Match
    child: Operator
    held: list[tuple[tuple, tuple, int, dict[str, bool], dict]] = field(default_factory=list)
    states: dict[tuple, PatternState] = field(default_factory=dict)
    passed_ms: int | None = None      # the bound up to which rows were fed
    late: int = 0

    def __post_init__(self) -> None:
        self.columns = output_columns(self.plan)
        self.schema = arrow_schema(self.columns)
        self.time = event_time_column(self.plan.child)
        self.conditions = {name: cond for step in self.plan.steps for name, cond in zip(
            step.names, step.conditions, strict=True)}
        self.ordering = ordering_columns(self.plan, dict(output_columns(self.plan.child)))

    def push(self, topic: str, batch: pa.Table) -> pa.Table | None:
        rows = self.child.push(topic, batch)
        if rows is not None and rows.num_rows:
            stamps = epoch_ms(rows[self.time]).to_pylist()
            meets = {name: _truth(evaluate(cond, rows), rows.num_rows) for name, cond in self.conditions.items()}
            for i, row in enumerate(rows.to_pylist()):
                if stamps[i] is None or (self.passed_ms is not None and stamps[i] < self.passed_ms):
                    self.late += 1   # the pattern went past its time: dropped, as an Aggregate drops a late row
                    continue
                self.held.append((tuple(row[k] for k in self.plan.partition), order_key(row, stamps[i], self.ordering),
                                  stamps[i], {name: values[i] for name, values in meets.items()}, row))
        bound = self.child.bound()
        if bound is None or (self.passed_ms is not None and bound <= self.passed_ms):
            return None if rows is None else self._rows([])
        ready = sorted((h for h in self.held if h[2] < bound), key=lambda h: h[1])
        self.held = [h for h in self.held if h[2] >= bound]
        found: list[tuple[tuple, Found]] = []
        steps = [Step(s.names, s.negated) for s in self.plan.steps]
        for key, _, ts, meets, row in ready:
            state = self.states.setdefault(key, PatternState(steps, self.plan.within_ms))
            found += [(key, f) for f in state.feed(ts, meets, row)]
        for key, state in self.states.items():
            found += [(key, f) for f in state.close(bound)]
        # a partition with no candidate and no match ending at or after the bound holds nothing
        self.states = {key: state for key, state in self.states.items()
                       if state.candidates or (state.resume_after is not None and state.resume_after >= bound)}
        self.passed_ms = bound
        return self._rows(found)

    def _rows(self, found: list[tuple[tuple, Found]]) -> pa.Table:
        out = []
        for key, match in sorted(found, key=lambda kf: kf[1].end_ms):
            values = dict(zip(self.plan.partition, key, strict=True))
            out.append([values[column] if not step else match.rows[step].get(column)
                        for _, step, column in self.plan.outputs] + [match.end_ms])
        arrays = [pa.array([r[i] for r in out], arrow_type(kind)) for i, (_, kind) in enumerate(self.columns[:-1])]
        return pa.Table.from_arrays([*arrays, timestamps([r[-1] for r in out])], schema=self.schema)

    def bound(self) -> int | None:
        return self.passed_ms

    def late_rows(self) -> int:
        return self.child.late_rows() + self.late

    def triaged(self) -> tuple[int, int] | None:
        return self.child.triaged()


@dataclass
class QualifyOp(RowwiseOp):
    """Faulty-mote detection (base.plan.Qualify): its child is each mote's mean values per sampling
    period (an AggregateOp, `qualify_means`), emitted as the input's bound closes the period; each
    batch of closed periods is judged in order from the one after the last judged to the newest
    (base.mote_quality.judge_periods), every mote seen so far in each: a mote with no sample in a
    period is silent. Motes with no position are left out (their neighbours are unknown)."""

    plan: Qualify
    quality: MoteQuality = field(default_factory=lambda: MoteQuality({}))
    judged: int | None = None      # the last period judged

    def __post_init__(self) -> None:
        self.columns = output_columns(self.plan)
        self.schema = arrow_schema(self.columns)
        self.first_period = -(-self.plan.from_ms // self.plan.period_ms)

    def apply(self, means: pa.Table | None) -> pa.Table | None:
        if means is None or not means.num_rows:
            return means if means is None else self.schema.empty_table()
        samples: dict[int, dict[str, tuple[float, float, dict[str, float]]]] = defaultdict(dict)
        values = [means[q].to_pylist() for q in SAMPLE_QUANTITIES]
        for i, (start, mote, x, y) in enumerate(zip(epoch_ms(means["window_start"]).to_pylist(),
                                                   *(means[c].to_pylist() for c in ("receptor_id", "x", "y")),
                                                   strict=True)):
            period = start // self.plan.period_ms
            if period >= self.first_period and x is not None and y is not None:
                samples[period][mote] = (x, y, {q: v[i] for q, v in zip(SAMPLE_QUANTITIES, values, strict=True)
                                                if v[i] is not None})
        if not samples:
            return self.schema.empty_table()
        first, last = self.judged + 1 if self.judged is not None else min(samples), max(samples)
        rows = judge_periods(self.quality, samples, first, last, self.plan.period_ms)
        self.judged = last if self.judged is None else max(last, self.judged)
        return pa.Table.from_pylist([dict(zip(self.schema.names, row, strict=True)) for row in rows],
                                    schema=self.schema)

    def bound(self) -> int | None:
        """A period the means closed but no sample has yet followed (every mote silent) is judged
        later: no row to come is older than the period after the last judged."""
        inner = self.child.bound()
        if inner is None or self.judged is None:
            return inner
        return min(inner, (self.judged + 1) * self.plan.period_ms)


@dataclass
class ChangesOp(RowwiseOp):
    """EMIT CHANGES (base.changes): its child's windows' rows as each key's starts and ends, once
    the child's bound closes their windows. Its bound is its child's: a row still to come is for
    a window not closed yet (a start) or the one after a key's last (an end), both after it."""

    plan: Changes

    def __post_init__(self) -> None:
        self.columns = output_columns(self.plan)
        self.schema = arrow_schema(self.columns)
        self.tracker = KeyChanges(self.plan.keys, self.plan.slide_ms)

    def apply(self, rows: pa.Table | None) -> pa.Table | None:
        if rows is None:
            return None
        given = rows.drop_columns([c for c in rows.column_names if c not in dict(self.child.columns)]).to_pylist()
        for row, start, end in zip(given, epoch_ms(rows["window_start"]).to_pylist(),
                                   epoch_ms(rows["window_end"]).to_pylist(), strict=True):
            row["window_start"], row["window_end"] = start, end
        changed = self.tracker.feed(given, self.child.bound())
        arrays = [timestamps([r[name] for r in changed]) if name in MS_COLUMNS else
                  pa.array([r[name] for r in changed], arrow_type(kind)) for name, kind in self.columns]
        return pa.Table.from_arrays(arrays, schema=self.schema)


MS_COLUMNS = ("window_start", "window_end", "since")   # epoch ms in base.changes' rows


def qualify_means(plan: Qualify) -> Aggregate:
    """What a Qualify judges: each mote's mean values, with its position, per sampling period."""
    return Aggregate(plan.child, ("receptor_id", "x", "y"), tuple(AggSpec(q, "avg", q) for q in SAMPLE_QUANTITIES),
                     window=Window(plan.period_ms, plan.period_ms))


def _truth(values: Any, n: int) -> list[bool]:
    """A condition's values as booleans (NULL is not true)."""
    if isinstance(values, pa.Scalar):
        return [values.as_py() is True] * n
    return [v is True for v in values.to_pylist()]


def sources_under(root: Operator) -> list[SourceOp]:
    """The sources `root` reads, left to right."""
    if isinstance(root, SourceOp):
        return [root]
    children = root.children if isinstance(root, UnionOp | WindowJoinOp) else [root.child]   # type: ignore[attr-defined]
    return [source for child in children for source in sources_under(child)]


def raw_sources(root: Operator) -> list[SourceOp]:
    """The sources of raw readings or samples under `root` (their bound is event time minus lateness)."""
    return [source for source in sources_under(root) if not source.plan.markers]


def lateness_seen(batches: Iterable[pa.Table], column: str) -> int:
    """How far (ms) behind the newest event time before it the latest row of `batches`, in order,
    came: the lateness a replay of them needs for no row to be late."""
    newest, most = None, 0
    for batch in batches:
        if column not in batch.column_names or not batch.num_rows:
            continue
        stamps = epoch_ms(batch[column]).drop_null().to_numpy()
        if not len(stamps):
            continue
        before = np.maximum.accumulate(stamps)
        if newest is not None:
            before = np.maximum(before, newest)
        most = max(most, int((before - stamps).max()))
        newest = int(before[-1])
    return most


def build(plan: Plan, relations: Mapping[str, Sequence[tuple]]) -> Operator:
    """The evaluator of a plan; `relations` holds the rows of the static relations it joins."""
    output_columns(plan)   # type-check first: errors name the operator
    if isinstance(plan, Source):
        return SourceOp(plan)
    if isinstance(plan, Filter):
        return FilterOp(plan=plan, child=build(plan.child, relations))
    if isinstance(plan, Project):
        return ProjectOp(plan=plan, child=build(plan.child, relations))
    if isinstance(plan, Aggregate):
        return AggregateOp(plan, build(plan.child, relations))
    if isinstance(plan, LookupJoin):
        rows = relations.get(plan.relation)
        if rows is None:
            raise PlanError(f"static relation {plan.relation!r} is not replicated at this node")
        return LookupJoinOp(plan=plan, child=build(plan.child, relations), rows=list(rows))
    if isinstance(plan, Union_):
        return UnionOp([build(child, relations) for child in plan.children])
    if isinstance(plan, Match):
        return MatchOp(plan, build(plan.child, relations))
    if isinstance(plan, WindowJoin):
        return WindowJoinOp(plan, [build(child, relations) for child in plan.children])
    if isinstance(plan, Qualify):
        return QualifyOp(plan=plan, child=build(qualify_means(plan), relations))
    if isinstance(plan, Changes):
        return ChangesOp(plan=plan, child=build(plan.child, relations))
    raise PlanError(f"{type(plan).__name__} does not run in the shared runtime")


def supported(plan: Plan) -> bool:
    """Whether the evaluator runs every operator of the plan (Smooth keeps a Spark query of its
    own: its state lives in its sink, dsp.smoothing)."""
    if isinstance(plan, Source):
        return True
    if isinstance(plan, Union_ | WindowJoin):
        return all(supported(child) for child in plan.children)
    if isinstance(plan, Filter | Project | Aggregate | LookupJoin | Match | Qualify | Changes):
        return supported(plan.child)
    return False


def rows_of(table: pa.Table) -> list[tuple]:
    """A table's rows as tuples (timestamps as aware datetimes), for the wire (wire.codec)."""
    return list(zip(*[table[name].to_pylist() for name in table.column_names], strict=True))


def view_batch(columns: Sequence[tuple[str, str]], rows: pa.Table | None = None,
               marker_ms: int | None = None) -> pa.Table:
    """A view's rows, then a progress marker, in a view reader's shape (dsp.kafka_source): what a
    part on the same node as the view's producer is handed without a Kafka round trip."""
    schema = arrow_schema([*columns, (PROGRESS_COLUMN, "boolean")])
    parts = []
    if rows is not None and rows.num_rows:
        shaped = rows.append_column(PROGRESS_COLUMN, pa.nulls(rows.num_rows, pa.bool_()))
        # cast only when it changes something: a cast costs per column, and a door's few rows a
        # batch paid ~0.7 ms for one in a process of 33 lanes (py-spy, 2026-11-28)
        parts.append(shaped if shaped.schema.equals(schema) else shaped.cast(schema))
    if marker_ms is not None:
        stamp = pa.scalar(marker_ms * 1000, pa.timestamp("us", tz="UTC"))
        parts.append(pa.Table.from_arrays([pa.array([stamp if kind == "timestamp" else None], field.type)
                                           if name != PROGRESS_COLUMN else pa.array([True])
                                           for (name, kind), field in zip([*columns, (PROGRESS_COLUMN, "boolean")],
                                                                          schema, strict=True)], schema=schema))
    return pa.concat_tables(parts) if parts else schema.empty_table()


def run_batches(plan: Plan, batches: Iterable[tuple[str, pa.Table]],
                relations: Mapping[str, Sequence[tuple]] | None = None) -> list[tuple]:
    """Every row a plan emits over a sequence of (topic, batch): for tests and tools."""
    root = build(plan, relations or {})
    out: list[tuple] = []
    for topic, batch in batches:
        rows = root.push(topic, batch)
        if rows is not None:
            out.extend(rows_of(rows))
    return out
