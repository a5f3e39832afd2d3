"""A part's per-batch work computed by Spark: the twin of dsp.operators's driver path for large batches.

A part whose root is an Aggregate over sources, filters, projections, lookup joins and unions
(`computable`) need not see its batch's rows: Spark computes the stateless prefix and the
per-window, per-group partial aggregation over the micro-batch's DataFrame, on the executors,
and only the partials (a row per group and window) come to the driver, which folds them into
the part's state and emits exactly as the driver's path does (AggregateOp.fold_groups,
emit). What stays on the driver: the state, the bound and the emission; annotated (triage-error)
aggregates and event patterns (their per-row work is the state: MatchOp).

A batch of one topic (a raw reader's) costs one job, shared by all its parts and by the other
lanes of the process's micro-batch (dsp.spark.rounds): its statistics (per topic what the batch
tells each kind of source about event time, SourceProgress) and every part's partials together
(`collect_batch`); a batch of many topics two, the statistics first (`BatchOnSpark.progress`).
What does not change from batch to batch is built once a session (dsp.spark.columns).
The two paths agree because they share everything but the per-batch arithmetic: the sources
advance through `SourceOp.advance`, the partials merge through `fold_groups`. One batch spans
topics; the driver's path pushes them one after another, a row being late against the bound
before its topic's push: the same bound per topic is the late filter here (a literal per topic).
The windows a batch closes leave at its end rather than after the topic that closed them: a
bound never falls, so no row a later topic adds lands in a window an earlier topic closed.

Proven equal by tests/test_spark_partials.py: every part of ≥ 300 generated plans, every batch
evaluated both ways, rows and state compared (doubles to 1e-9: Spark sums in another order).
"""

from __future__ import annotations

import functools
import math
import os
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column as SparkColumn
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from base.plan import PROGRESS_COLUMN, AggSpec, LookupJoin, Source
from dsp.operators.aggregate import ROW_BY_ROW, WINDOW_COLUMN, AggregateOp, advance_topics, group_rows
from dsp.operators.changes import ChangesOp
from dsp.operators.core import WEIGHT, Operator
from dsp.operators.quality import QualifyOp
from dsp.operators.rowwise import FilterOp, LookupJoinOp, ProjectOp, UnionOp
from dsp.operators.source import SourceOp, SourceProgress
from dsp.operators.topic_batch import TOPIC_COLUMN
from dsp.operators.tree import sources_under
from dsp.spark import rounds
from dsp.spark.columns import cached
from dsp.spark.compiler import compile_expr, compiles, spark_type
from dsp.spark.rounds import quoted

LATE = "__late"


def computable(root: Operator) -> bool:
    """Whether Spark can compute `root`'s per-batch work (see the module): an Aggregate, under
    filters and projections of its output (HAVING, a parent's final projection), the judging
    of mote quality (its periods' means) or EMIT CHANGES: the driver's."""
    aggregate = _split(root)[1]
    return aggregate is not None and not aggregate.plan.annotate and _prefix_computable(aggregate.child)


def _split(root: Operator) -> tuple[list[Operator], AggregateOp | None]:
    """The filters, projections, mote-quality judging and changes over `root`'s Aggregate (top
    first), and the Aggregate."""
    above = []
    while isinstance(root, FilterOp | ProjectOp | QualifyOp | ChangesOp):
        above.append(root)
        root = root.child
    return above, root if isinstance(root, AggregateOp) else None


def _prefix_computable(op: Operator) -> bool:
    if isinstance(op, SourceOp):   # not a join's rows: Spark reads `a.tag_id` as a field of `a`
        return not any("." in name for name, _ in op.columns)
    if isinstance(op, UnionOp):
        return all(_prefix_computable(child) for child in op.children)
    if isinstance(op, FilterOp):
        return all(compiles(term) for term in op.terms) and _prefix_computable(op.child)
    if isinstance(op, ProjectOp):
        return all(compiles(expr) for _, expr in op.plan.outputs) and _prefix_computable(op.child)
    return isinstance(op, LookupJoinOp) and _prefix_computable(op.child)


def _ms(column: str) -> SparkColumn:
    return cached(("ms", column), lambda: F.unix_millis(F.col(column)))


@dataclass
class BatchOnSpark:
    """One micro-batch as Spark holds it: its DataFrame (in the reader's shape), the topics it
    has rows of in the reader's order, and per topic what its rows tell the sources (`progress`).

    A batch of one topic may be `deferred`: its statistics computed in the job that computes its
    parts' partials (`collect_batch`), not in a job before. The rows of one topic are late against
    one bound, the bound before the batch, known before any job; the sources are advanced once
    the statistics are in. A batch of many topics needs them first: a topic's rows are late
    against the bound the topics before it left."""

    frame: DataFrame
    names: list[str]            # its columns
    topics: list[str]
    stats: dict[str, dict]      # topic -> the progress job's row
    rows: int                   # how many rows the batch has
    pending: DataFrame | None = None   # a deferred batch's statistics, to compute (`collect_batch`)

    @classmethod
    def progress(cls, frame: DataFrame, reader_topics: Sequence[str], sources: Sequence[SourceOp],
                 defer: bool = False) -> BatchOnSpark:
        """The batch with one job's statistics for the sources of every part reading it; `defer`:
        a batch of one topic (no topic column) left for the partials' job to compute them."""
        names = frame.columns
        shapes = sorted({(s.plan.format, s.plan.event_time) for s in sources
                         if any(s.reads(topic, names) for topic in reader_topics)})
        aggregates = _stats_aggregates(tuple(shapes), tuple(names))
        tagged = TOPIC_COLUMN in names
        stats_frame = frame.groupBy(TOPIC_COLUMN).agg(*aggregates) if tagged else frame.agg(*aggregates)
        batch = cls(frame, names, list(reader_topics), {}, 0)
        if defer and not tagged and len(reader_topics) == 1:
            batch.pending = stats_frame
        else:
            batch.take_stats(_rows_of(stats_frame), list(reader_topics))
        return batch

    @property
    def deferred(self) -> bool:
        return self.pending is not None

    def take_stats(self, table: pa.Table, reader_topics: list[str]) -> None:
        """The statistics job's rows taken in: the topics with rows, their rows counted."""
        if TOPIC_COLUMN in self.names:
            stats = {row.pop(TOPIC_COLUMN): row for row in table.to_pylist()}
        else:
            stats = {reader_topics[0]: table.to_pylist()[0]} if len(reader_topics) == 1 else {}
        self.stats = {topic: row for topic, row in stats.items() if row["rows"]}
        self.topics = [t for t in reader_topics if t in self.stats]
        self.rows = sum(row["rows"] for row in self.stats.values())
        self.pending = None

    def progress_of(self, source: SourceOp, topic: str) -> SourceProgress:
        """What this batch's rows of `topic` tell `source` (as SourceOp.push works it out)."""
        row = self.stats[topic]

        def stat(what: str):
            return row.get(f"{source.plan.format}|{source.plan.event_time}|{what}")

        if source.plan.format == "rfid":
            weights = (stat("weight_min"), stat("weight_max"))
            triaged = any(w not in (None, 1) for w in weights)
            low, high = stat("low"), stat("high")
            held = source.newest_ms or 0
            span = ((low, high) if low is not None else (held, held)) if triaged else None
            return SourceProgress(newest_ms=stat("newest"), triaged=True, triaged_span=span)
        return SourceProgress(newest_ms=stat("newest"), mark_ms=stat("mark"))


def _rows_of(frame: DataFrame) -> pa.Table:
    """`frame`'s rows, computed in the round of the lane's micro-batch (dsp.spark.rounds)."""
    found = rounds.collect([frame])[0]
    if isinstance(found, Exception):
        raise found
    return found


def _marker(names: Sequence[str]) -> SparkColumn:
    """Whether a row of a batch with columns `names` is a progress marker (SourceOp.push)."""
    marked = PROGRESS_COLUMN in names
    return cached(("marker", marked),
                  lambda: F.coalesce(F.col(PROGRESS_COLUMN), F.lit(False)) if marked else F.lit(False))


def _valid_reading(names: Sequence[str]) -> SparkColumn:
    """Whether a raw RFID row is a reading a source keeps: no error, a tag (not a cycle's heartbeat)."""
    errors, tags = "error" in names, "tag_id" in names

    def build() -> SparkColumn:
        valid = F.lit(True)
        if errors:
            valid = valid & F.col("error").isNull()
        if tags:
            valid = valid & F.col("tag_id").isNotNull()
        return valid

    return cached(("valid", errors, tags), build)


def _stats_aggregates(shapes: tuple[tuple[str, str], ...], names: tuple[str, ...]) -> list[SparkColumn]:
    """The progress job's aggregates: the rows, and each source shape's (format, event time) statistics."""
    def build() -> list[SparkColumn]:
        aggregates = [F.count(F.lit(1)).alias("rows")]
        for fmt, event_time in shapes:
            stats = _shape_stats(fmt, event_time, names)
            aggregates += [agg.alias(f"{fmt}|{event_time}|{what}") for what, agg in stats]
        return aggregates

    return cached(("stats", shapes, names), build)


def _shape_stats(fmt: str, event_time: str, names: Sequence[str]) -> list[tuple[str, SparkColumn]]:
    """The progress job's aggregates for sources of one format and event-time column."""
    ms, marker = _ms(event_time), _marker(names)
    if fmt == "rfid":
        found = [("newest", F.max(F.when(_valid_reading(names), ms))), ("low", F.min(ms)), ("high", F.max(ms))]
        if "weight" in names:
            found += [("weight_min", F.min("weight")), ("weight_max", F.max("weight"))]
        return found
    return [("newest", F.max(F.when(~marker, ms))), ("mark", F.max(F.when(marker, ms)))]


def push(root: Operator, batch: BatchOnSpark, together: bool = False) -> pa.Table | None:
    """What `root.push` of each of the batch's topics in turn would return, computed by Spark
    (`root`: `computable`); None when the part reads none of them. `together`: every topic's rows
    judged against the bound before the whole batch (the past as one batch, dsp.spark.past: a
    topic's hours of rows must not make another's late)."""
    planned = plan(root, batch, together)
    return None if planned is None else planned.finish(collect_batch(batch, [planned])[0])


@dataclass
class Planned:
    """One part's share of a batch on Spark, its sources advanced: its partials' rows to compute
    (`grouped`, None: no rows of the batch reach its Aggregate), then to fold (`finish`)."""

    root: Operator
    above: list[Operator]
    aggregate: AggregateOp
    weighted: bool
    grouped: DataFrame | None
    keys: list[str]
    row_by_row: dict[int, str]
    batch: BatchOnSpark | None = None   # a deferred batch's: its sources advanced at `finish`

    def finish(self, grouped: pa.Table | Exception | None) -> pa.Table | None:
        """The part's output once its partials (`grouped`, as `collect` brings them) are folded in
        (raised: why they could not be computed)."""
        if isinstance(grouped, Exception):
            raise grouped
        if self.batch is not None:   # deferred: its statistics came with the partials
            self.weighted = _advance(self.aggregate, self.batch)[1]
        if grouped is not None:
            _take_grouped(self.aggregate, grouped, self.keys, self.row_by_row, self.weighted)
        out = self.aggregate.emit()
        for op in reversed(self.above):
            out = op.apply(out)   # type: ignore[attr-defined]
        return out


def plan(root: Operator, batch: BatchOnSpark, together: bool = False) -> Planned | None:
    """`root`'s sources advanced over the batch and its partials' DataFrame made (not computed);
    None when the part reads none of the batch's topics."""
    above, aggregate = _split(root)
    assert aggregate is not None
    if batch.deferred:
        return _plan_deferred(root, above, aggregate, batch)
    befores, weighted = _advance(aggregate, batch, together)
    if not befores:
        return None
    rows = _rows(aggregate.child, batch, set(befores), weighted)
    if rows is None:
        return Planned(root, above, aggregate, weighted, None, [], {})
    grouped, keys, row_by_row = _grouped(aggregate, rows, befores, weighted)
    return Planned(root, above, aggregate, weighted, grouped, keys, row_by_row)


def _plan_deferred(root: Operator, above: list[Operator], aggregate: AggregateOp, batch: BatchOnSpark
                   ) -> Planned | None:
    """`plan` of a deferred batch (one topic): its rows late against the bound before it, the
    sources advanced at `finish`. Weighted partials whenever the rows carry weights: with every
    weight 1 (a batch not triaged) they are the plain ones, so the fold, told then whether the
    batch was triaged, takes them either way."""
    topic = batch.topics[0]
    readers = [s for s in sources_under(aggregate) if s.reads(topic, batch.names)]
    if not readers:
        return None
    weighted = "weight" in batch.names and any(s.plan.format == "rfid" for s in readers)
    rows = _rows(aggregate.child, batch, {topic}, weighted)
    if rows is None:
        return Planned(root, above, aggregate, weighted, None, [], {}, batch)
    grouped, keys, row_by_row = _grouped(aggregate, rows, {topic: aggregate.child.bound()}, weighted)
    return Planned(root, above, aggregate, weighted, grouped, keys, row_by_row, batch)


def _advance(aggregate: AggregateOp, batch: BatchOnSpark, together: bool = False
             ) -> tuple[dict[str, int | None], bool]:
    """The sources under `aggregate` advanced over the batch (its statistics in): each topic's
    bound before it (advance_topics), and whether the batch was triaged."""
    weighted = False

    def progress(source: SourceOp, topic: str) -> SourceProgress:
        nonlocal weighted
        found = batch.progress_of(source, topic)
        weighted = weighted or found.triaged_span is not None
        return found

    befores = advance_topics(aggregate, batch.topics, batch.names, progress, together)
    return befores, weighted


def collect_batch(batch: BatchOnSpark, planned: Sequence[Planned], extra: Sequence[DataFrame] = ()
                  ) -> list[pa.Table | Exception | None]:
    """`collect` of the batch's planned parts and `extra` frames, a deferred batch's statistics
    computed in the same job (and taken in before any part finishes)."""
    if not batch.deferred:
        return collect(planned, extra)
    found = collect(planned, [*extra, batch.pending])
    stats = found.pop()
    if isinstance(stats, Exception):
        raise stats
    batch.take_stats(stats, batch.topics)
    return found


def collect(planned: Sequence[Planned], extra: Sequence[DataFrame] = ()) -> list[pa.Table | Exception | None]:
    """Every planned part's partials, then the rows of each `extra` frame, computed by one Spark
    job (dsp.spark.rounds.collect_frames); should that job fail, each is computed alone, so that
    only the part whose rows fail it fails (its `finish` raises). A lane of the process's stream
    shares the job with the other lanes of its micro-batch (dsp.spark.rounds)."""
    frames = [p.grouped for p in planned if p.grouped is not None]
    found = iter(rounds.collect([*frames, *extra]))
    return [None if p.grouped is None else next(found) for p in planned] + list(found)


# ---------------------------------------------------------------- the stateless prefix

def _rows(op: Operator, batch: BatchOnSpark, topics: set[str], weighted: bool) -> DataFrame | None:
    """`op`'s rows of the batch's `topics`, with the topic (and, `weighted`, the weight) carried.
    (Every schema is the plan's: asking a DataFrame for its own costs the JVM an analysis.)"""
    if isinstance(op, SourceOp):
        return _source_rows(op, batch, topics, weighted)
    if isinstance(op, UnionOp):
        found = [rows for child in op.children if (rows := _rows(child, batch, topics, weighted)) is not None]
        return functools.reduce(DataFrame.unionByName, found) if found else None
    rows = _rows(op.child, batch, topics, weighted)   # type: ignore[attr-defined]
    if rows is None:
        return None
    carried = [TOPIC_COLUMN, WEIGHT] if weighted else [TOPIC_COLUMN]
    if isinstance(op, FilterOp):
        for term in op.terms:   # in the plan's order, as the driver's path (NULL is not true)
            rows = rows.where(cached(("term", term), functools.partial(compile_expr, term)))
        return rows
    if isinstance(op, ProjectOp):
        return rows.select(*_projected(op.plan.outputs, tuple(op.columns), tuple(carried)))
    assert isinstance(op, LookupJoinOp)
    key_type = spark_type(dict(op.child.columns)[op.plan.on])
    found = _lookup(op.plan, key_type, tuple(tuple(row) for row in op.rows))
    if found is None:   # keys repeat (each match is a row) or too many for a literal: a broadcast join
        relation = batch.frame.sparkSession.createDataFrame(op.relation)
        rows = rows.join(F.broadcast(relation), on=op.plan.on, how="left")
        taken = {name: F.col(name) for name, _ in op.columns}
    else:
        rows = rows.withColumn("__match", F.try_element_at(found, F.col(op.plan.on)))
        taken = {name: F.col(name) for name, _ in op.child.columns}
        taken |= {name: F.col("__match")[name] for name, _ in op.plan.columns}
    return rows.select(*[taken[name].cast(spark_type(kind)).alias(name) for name, kind in op.columns], *carried)


def _projected(outputs: tuple, columns: tuple[tuple[str, str], ...], carried: tuple[str, ...]) -> list[SparkColumn]:
    """A projection's Columns (each output cast to its type), then the carried columns."""
    def build() -> list[SparkColumn]:
        return [*[compile_expr(expr).cast(spark_type(kind)).alias(name)
                  for (name, expr), (_, kind) in zip(outputs, columns, strict=True)], *map(F.col, carried)]

    return cached(("project", outputs, columns, carried), build)


LOOKUP_LITERAL_ROWS = 10_000   # a relation this small is a map in the plan: no join, no broadcast job


@functools.lru_cache(maxsize=64)
def _lookup(join: LookupJoin, key_type: str, rows: tuple[tuple, ...]) -> SparkColumn | None:
    """The relation's `rows` (key first, then `join.columns`) as a literal map, key -> the rest,
    if every key is set and appears once (kept: building one is a JVM call per value)."""
    keys = [row[0] for row in rows]
    if len(keys) > LOOKUP_LITERAL_ROWS or None in keys or len(set(keys)) != len(keys):
        return None
    entries = []
    for row in rows:
        value = F.struct(*[F.lit(v).cast(spark_type(kind)).alias(name)
                           for (name, kind), v in zip(join.columns, row[1:], strict=False)])
        entries += [F.lit(row[0]).cast(key_type), value]
    return F.create_map(*entries) if entries else None


def _source_rows(source: SourceOp, batch: BatchOnSpark, topics: set[str], weighted: bool) -> DataFrame | None:
    frame, names = batch.frame, batch.names
    mine = tuple(sorted(t for t in topics if source.reads(t, names)))
    if not mine:
        return None
    if TOPIC_COLUMN in names:
        rows = frame.where(cached(("topics", mine), lambda: F.col(TOPIC_COLUMN).isin(list(mine))))
    else:
        rows = frame.withColumn(TOPIC_COLUMN, cached(("topic", mine[0]), lambda: F.lit(mine[0])))
    kept, taken = _source_columns(source.plan, tuple(names), weighted)
    return rows.where(kept).select(*taken)


def _source_columns(plan: Source, names: tuple[str, ...], weighted: bool) -> tuple[SparkColumn, list[SparkColumn]]:
    """A source's test of the rows it keeps (no marker; a reading, or a mote's sample on its
    period) and its columns (cast to the plan's types, the topic and, `weighted`, the weight carried)."""
    def build() -> tuple[SparkColumn, list[SparkColumn]]:
        kept = ~_marker(names)
        if plan.format == "rfid":
            kept = kept & _valid_reading(names)
        if plan.format == "samples":
            kept = kept & F.col("receptor_id").isNotNull()
            if plan.sample_ms:
                kept = kept & (_ms(plan.event_time) % plan.sample_ms == 0)
        carried = [F.col(TOPIC_COLUMN)]
        if weighted:
            weight = F.coalesce(F.col("weight"), F.lit(1)) if plan.format == "rfid" and "weight" in names else F.lit(1)
            carried.append(weight.cast("bigint").alias(WEIGHT))
        return kept, [*[F.col(name).cast(spark_type(kind)).alias(name) for name, kind in plan.columns], *carried]

    return cached(("source", plan, names, weighted), build)


# ---------------------------------------------------------------- the partial aggregation

def _grouped(root: AggregateOp, rows: DataFrame, befores: Mapping[str, int | None], weighted: bool
             ) -> tuple[DataFrame, list[str], dict[int, str]]:
    """The partials' DataFrame: rows late against their topic's bound marked (a group of their
    own, to be counted and dropped), the rest windowed and grouped, in one pass on Spark; with the
    grouping columns and the row-by-row partials' columns."""
    rows = rows.withColumn(LATE, _late(root.time_column, befores))
    if root.plan.window is not None:
        rows = _windowed(rows, root.time_column, root.plan.window.range_ms, root.plan.window.slide_ms)
    keys = ([WINDOW_COLUMN] if root.plan.window is not None else []) + list(root.plan.keys)
    specs = tuple(partial.spec for partial in root.partials)
    aggregates, row_by_row = _aggregates(specs, weighted, tuple(root.child.columns))
    grouped = rows.groupBy(LATE, *keys).agg(*aggregates)
    for name, column in _best_of(specs, row_by_row):
        grouped = grouped.withColumn(name, column)
    return grouped, keys, dict(row_by_row)


def _late(time_column: str | None, befores: Mapping[str, int | None]) -> SparkColumn:
    """Whether a row is late against the bound its topic's rows had before the batch: the batch's
    own bounds, so built with the batch, in one call (a SQL expression)."""
    bounds = [(topic, before) for topic, before in befores.items() if before is not None]
    if time_column is None or not bounds:
        return cached(("late", None), lambda: F.lit(False))
    entries = ", ".join(f"'{topic.replace(chr(39), chr(39) * 2)}', {int(before)}L" for topic, before in bounds)
    return F.expr(f"coalesce(unix_millis({quoted(time_column)}) < "
                  f"try_element_at(map({entries}), {quoted(TOPIC_COLUMN)}), false)")


def _aggregates(specs: tuple, weighted: bool, columns: tuple[tuple[str, str], ...]
                ) -> tuple[list[SparkColumn], tuple[tuple[int, str], ...]]:
    """The Aggregate's Spark aggregates (a row count first), and where its row-by-row partials go."""
    def build() -> tuple[list[SparkColumn], tuple[tuple[int, str], ...]]:
        types = {name: spark_type(kind) for name, kind in columns}
        aggregates, row_by_row = [F.count(F.lit(1)).alias("__rows")], []
        for i, spec in enumerate(specs):
            if spec.fn in ROW_BY_ROW:
                row_by_row.append((i, f"__best{i}"))
                aggregates += _row_by_row(spec, f"__best{i}")
            else:
                twins = _arrow_twins(spec, weighted, types)   # avg: two (its sum and count)
                aggregates += [agg.alias(f"__p{len(aggregates) + n}") for n, agg in enumerate(twins)]
        return aggregates, tuple(row_by_row)

    return cached(("aggregates", specs, weighted, columns), build)


def _take_grouped(root: AggregateOp, table: pa.Table, keys: list[str], row_by_row: Mapping[int, str],
                  weighted: bool) -> None:
    """The late rows counted, the partials of the others folded into the part's state."""
    is_late = pc.fill_null(table[LATE], False)
    root.late += pc.sum(table.filter(is_late)["__rows"]).as_py() or 0
    _take(root, table.filter(pc.invert(is_late)), keys, row_by_row, weighted)


def _take(root: AggregateOp, grouped: pa.Table, keys: list[str], row_by_row: Mapping[int, str], weighted: bool) -> None:
    groups = group_rows(grouped, keys)
    results = [grouped[name].to_pylist() for name in grouped.column_names if name.startswith("__p")]
    best = {}
    for i, name in row_by_row.items():
        values = grouped[name].to_pylist()
        if root.partials[i].spec.fn == "union_sets":
            best[i] = {group: set(v or ()) for group, v in zip(groups, values, strict=True)}
        else:   # argmax: (by, value) of the largest by, ties to the smallest value; None with no by
            bys = grouped[f"{name}_by"].to_pylist()
            best[i] = {group: None if by is None else (by, v) for group, by, v in zip(groups, bys, values, strict=True)}
    root.fold_groups(groups, results, best, weighted)


def _windowed(rows: DataFrame, time_column: str | None, range_ms: int, slide_ms: int) -> DataFrame:
    """Each row once per window containing it, with that window's start (ms): AggregateOp._windowed
    (a late row once, in no window: it is only counted)."""
    assert time_column is not None
    copies, start, within = _window_columns(time_column, range_ms, slide_ms)
    out = rows.withColumn("__copy", copies).withColumn(WINDOW_COLUMN, start)
    if within is not None:
        out = out.where(within)
    return out.drop("__copy")


def _window_columns(time_column: str, range_ms: int, slide_ms: int
                    ) -> tuple[SparkColumn, SparkColumn, SparkColumn | None]:
    """A row's copies (one per window it is in), each copy's window start, and (windows that
    do not tile the slide) the test that the copy's window holds the row."""
    def build() -> tuple[SparkColumn, SparkColumn, SparkColumn | None]:
        ms = _ms(time_column)
        every = F.array(*[F.lit(i) for i in range(math.ceil(range_ms / slide_ms))])
        copies = F.explode(F.when(F.col(LATE), F.array(F.lit(0))).otherwise(every))
        start = F.when(~F.col(LATE), ms - ms % slide_ms - F.col("__copy") * slide_ms)   # event times are positive
        within = F.col(LATE) | (F.col(WINDOW_COLUMN) + range_ms > ms) if range_ms % slide_ms else None
        return copies, start, within

    return cached(("windows", time_column, range_ms, slide_ms), build)


def _arrow_twins(spec: AggSpec, weighted: bool, types: Mapping[str, str]) -> list[SparkColumn]:
    """Spark aggregates equal to `Partial(spec).arrow(weighted)`'s pyarrow ones, in the same order
    (`types`: the input's Spark column types)."""
    fn, name = spec.fn, spec.column
    col = F.col(name) if name else None
    if weighted and fn in ("count", "sum", "avg"):
        weight = F.col(WEIGHT)
        counted = F.sum(F.when(col.isNotNull(), weight).otherwise(0) if col is not None else weight)
        if fn == "count":
            return [counted]
        assert col is not None
        total = F.sum(col * weight.cast(types[name]))   # pyarrow multiplies in the value's type
        return [total] if fn == "sum" else [total, counted]
    if fn == "count":
        return [F.count(col if col is not None else F.lit(1))]
    if fn in ("count_distinct", "collect_set"):
        return [F.collect_set(col)]
    if fn == "avg":
        return [F.sum(col), F.count(col)]
    return [getattr(F, fn)(col)]


def _row_by_row(spec: AggSpec, name: str) -> list[SparkColumn]:
    if spec.fn == "union_sets":
        return [F.flatten(F.collect_list(F.col(spec.column))).alias(name)]
    # argmax: every (by, value) of the group; the largest by and its smallest value are picked after
    return [F.collect_list(F.struct(F.col(spec.by).alias("by"), F.col(spec.column).alias("value"))).alias(name),
            F.max(spec.by).alias(f"{name}_by")]


def _best_of(specs: tuple, row_by_row: tuple[tuple[int, str], ...]) -> list[tuple[str, SparkColumn]]:
    """Each row-by-row partial's column over its group's collected values: a set's distinct
    items; argmax's smallest value among those of the largest by."""
    def build() -> list[tuple[str, SparkColumn]]:
        found = []
        for i, name in row_by_row:
            if specs[i].fn == "union_sets":
                found.append((name, F.array_distinct(F.filter(F.col(name), lambda item: item.isNotNull()))))
            else:
                best = F.filter(F.col(name), _by_is(F.col(f"{name}_by")))
                found.append((name, F.array_min(F.transform(best, lambda pair: pair["value"]))))
        return found

    return cached(("best", specs, row_by_row), build)


def _by_is(largest: SparkColumn):
    """A (by, value) pair's test that its by is the group's largest (for F.filter: one argument)."""
    return lambda pair: pair["by"] == largest


def write_by_topic(frame: DataFrame, topics: Sequence[str], folder: str) -> dict[str, str]:
    """The batch's rows written by Spark's tasks under `folder`, a Parquet folder per topic (the
    topic column dropped); topic -> its folder (dsp.runtime.archive.Archive.adopt takes them)."""
    if TOPIC_COLUMN in frame.columns:
        frame.write.partitionBy(TOPIC_COLUMN).parquet(folder)
    elif len(topics) == 1:
        frame.write.parquet(os.path.join(folder, f"{TOPIC_COLUMN}={urllib.parse.quote(topics[0])}"))
    else:
        return {}
    prefix = f"{TOPIC_COLUMN}="
    written = {urllib.parse.unquote(name[len(prefix):]): os.path.join(folder, name)
               for name in os.listdir(folder) if name.startswith(prefix)} if os.path.isdir(folder) else {}
    return {topic: path for topic, path in written.items() if topic in topics}


@dataclass(frozen=True)
class SparkBatches:
    """When Spark computes a batch's parts rather than the driver: on a cluster every batch (its
    executors read it; the rows would otherwise all travel to the driver); in local mode a batch
    of `min_records` records or more if HIFI_SPARK_BATCH_RECORDS sets it, else none (see
    docs/architecture.md for the measurement: on this 2-core machine the driver's path is faster
    at every size, Spark's jobs competing with it for the same cores). A local node whose large
    batches go to Spark reads them without handing rows over in files (dsp.spark.kafka_source). A part's
    past (dsp.spark.past): on a cluster always, locally a past of `past_minutes` or more
    (HIFI_SPARK_PAST_MINUTES, default 30; 0: never). Measured with `hifi bench past` (an hour of
    archive, one run): at 200 readings/s the driver took 21.4 s, Spark 17.9 s; at 2 000/s 96.4 s
    against 16.1 s — Spark's cost is mostly fixed (~15 s here), the driver's grows with the rows."""

    on_cluster: bool
    min_records: int = 0
    past_minutes: int = 30

    @classmethod
    def configured(cls, on_cluster: bool, environ: Mapping[str, str] | None = None) -> SparkBatches:
        """The policy the environment sets.

        >>> SparkBatches.configured(False, {"HIFI_SPARK_BATCH_RECORDS": "50000"}).small(49_999)
        True
        >>> SparkBatches.configured(True, {}).small(1)
        False
        >>> SparkBatches.configured(False, {}).past(29 * 60_000), SparkBatches.configured(False, {}).past(3_600_000)
        (False, True)
        >>> SparkBatches.configured(False, {"HIFI_SPARK_PAST_MINUTES": "0"}).past(3_600_000)
        False
        """
        environ = os.environ if environ is None else environ

        def count(name: str, default: int = 0) -> int:
            return max(0, int(environ.get(name, str(default)) or 0))

        return cls(on_cluster, count("HIFI_SPARK_BATCH_RECORDS"), count("HIFI_SPARK_PAST_MINUTES", cls.past_minutes))

    @property
    def enabled(self) -> bool:
        return self.on_cluster or self.min_records > 0

    @property
    def handoff(self) -> bool:
        """Whether readers hand their rows to the driver in files (local mode, Spark computing none)."""
        return not self.enabled

    def small(self, records: int) -> bool:
        """Whether a batch of `records` records stays with the driver."""
        return not self.on_cluster and (self.min_records == 0 or records < self.min_records)

    def past(self, span_ms: int) -> bool:
        """Whether Spark computes a part's past of `span_ms` (dsp.spark.past)."""
        return self.on_cluster or (self.past_minutes > 0 and span_ms >= self.past_minutes * 60_000)
