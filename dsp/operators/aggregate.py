"""Aggregates: per-window, per-group partials folded batch by batch, emitted once the bound passes them."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from base.plan import ERROR_BOUND, TRIAGED, Aggregate, AggSpec, PlanError
from base.plan_schema import event_time_column, output_columns
from dsp.operators.core import (
    CLUSTER,
    WEIGHT,
    Operator,
    as_ms,
    first_window_open,
    none_add,
    none_max,
    none_min,
    together,
)
from dsp.operators.expressions import arrow_schema, arrow_type, epoch_ms, evaluate, timestamps
from dsp.operators.source import SourceOp, SourceProgress, view_progress
from dsp.operators.topic_batch import TOPIC_COLUMN, TopicBatch
from dsp.operators.tree import sources_under, tagged_rows, takes_whole

# aggregates Arrow has no hash kernel for: argmax (the row with the largest `by`) and
# union_sets (hash_list has no kernel for list values in pyarrow 26)
ROW_BY_ROW = ("argmax", "union_sets")


# The error bound is this many standard deviations of the estimate: it holds for 99 % of groups
# (normal approximation).
BOUND_Z = 2.576


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
            return [none_add(a[0], b[0]), a[1] + b[1]]
        if fn == "sum":
            return none_add(a, b)
        if fn == "min":
            return none_min(a, b)
        if fn == "max":
            return none_max(a, b)
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
        rows = together(kept)
        if rows is not None and rows.num_rows:
            self._fold(self._windowed(rows) if self.plan.window is not None else rows)
        return self.emit()

    def push_tagged(self, batch: TopicBatch) -> pa.Table | None:
        """A batch of children's views taken whole: each topic's progress taken in, in the
        reader's order, noting the bound before it; the rows through the stateless prefix at
        once, each judged late against its topic's bound before; one fold, one emit. What
        `push_many` of its pieces does, with the per-topic work one group-by (dsp.operators.topic_batch)."""
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
        return None if value is None else as_ms(value)

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
