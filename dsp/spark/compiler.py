"""Compile a base.plan tree into Spark Structured Streaming DataFrame operations.

This is the only place plans become Spark code. Static relations are handed in as rows (the
node reads them from the MDR), so compiling does no metadata I/O itself.
"""

from __future__ import annotations

import functools
import json
import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from pyspark.sql import Column as SparkColumn
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from base.plan import (
    EPC_SCHEME,
    PROGRESS_COLUMN,
    SGTIN_INDICATOR,
    Aggregate,
    AggSpec,
    BinOp,
    Col,
    Expr,
    Filter,
    Func,
    LookupJoin,
    Plan,
    PlanError,
    Project,
    Smooth,
    Source,
    Union_,
)
from base.plan_schema import event_time_column, output_columns
from base.tag_count import SEPARATOR
from wire.intake import IntakeRules

SPARK_TYPES = {"string": "STRING", "int": "INT", "long": "BIGINT", "double": "DOUBLE",
               "timestamp": "TIMESTAMP", "boolean": "BOOLEAN", "binary": "BINARY"}

_BINARY: dict[str, Callable[[SparkColumn, SparkColumn], SparkColumn]] = {
    "=": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt,
    ">=": operator.ge, "AND": operator.and_, "OR": operator.or_, "+": operator.add, "-": operator.sub,
    "*": operator.mul, "/": F.try_divide,   # x / 0 is NULL, as in SQL (ANSI mode would fail the query)
}


def spark_type(kind: str) -> str:
    if kind.startswith("array<") and kind.endswith(">"):
        return f"ARRAY<{spark_type(kind[6:-1])}>"
    return SPARK_TYPES[kind]


def ddl(columns: Sequence[tuple[str, str]]) -> str:
    return ", ".join(f"`{name}` {spark_type(kind)}" for name, kind in columns)


_FUNCTIONS: dict[str, Callable[..., SparkColumn]] = {
    "not": operator.invert, "size": F.size, "double": lambda c: c.cast("double"),
    "epoch_ms": F.unix_millis,
    "product": lambda c: F.regexp_replace(F.substring_index(c, ".", 2), EPC_SCHEME, ""),
    "indicator": lambda c: F.regexp_replace(c, SGTIN_INDICATOR, "$1"),
    # base.tag_count.read_key (concat: NULL if any part is)
    "read_key": lambda receptor, ms, tag: F.concat(receptor, F.lit(SEPARATOR), ms.cast("string"),
                                                   F.lit(SEPARATOR), tag),
}


def compiles(expr: Expr) -> bool:
    """Whether `compile_expr` has every function and operator of `expr`."""
    if isinstance(expr, BinOp):
        return expr.op in _BINARY and compiles(expr.left) and compiles(expr.right)
    if isinstance(expr, Func):
        return expr.name in _FUNCTIONS and all(compiles(a) for a in expr.args)
    return True


def compile_expr(expr: Expr) -> SparkColumn:
    if isinstance(expr, Col):
        return F.col(expr.name)
    if isinstance(expr, BinOp):
        return _BINARY[expr.op](compile_expr(expr.left), compile_expr(expr.right))
    if isinstance(expr, Func):
        return _FUNCTIONS[expr.name](*[compile_expr(a) for a in expr.args])
    return F.lit(expr.value)


def _aggregate(spec: AggSpec) -> SparkColumn:
    column = F.col(spec.column) if spec.column else None
    if spec.fn == "count":
        result = F.count(column if column is not None else F.lit(1))
    elif spec.fn == "count_distinct":
        # Streaming aggregation has no DISTINCT; an exact set per group is equivalent.
        result = F.size(F.collect_set(column))
    elif spec.fn == "argmax":
        result = F.min_by(column, F.struct(-F.col(spec.by), column))
    elif spec.fn == "union_sets":
        result = F.array_distinct(F.flatten(F.collect_list(column)))
    else:
        result = getattr(F, spec.fn)(column)
    return result.alias(spec.name)


@dataclass(frozen=True)
class Ingest:
    """Makes the query that reads `raw_topic` the node's data listener (see dsp.spark.kafka_source)."""

    node: str
    raw_topic: str
    mdr_url: str
    weak_below: float = 0.0   # readings weaker than this count as "weak" in the receptor telemetry
    triage_ms: int = 0        # Data Triage: what a range's read may spend decoding exactly (dsp.triage); 0: all


@dataclass
class CompileContext:
    spark: SparkSession
    bootstrap: str
    relations: Mapping[str, Sequence[tuple]] = field(default_factory=dict)
    ingest: Ingest | None = None
    # {"topic:partition": first offset}: read what the sources received after a query's start
    # (partitions not named: from their beginning). None: every source from its beginning.
    start_offsets: Mapping[str, int] | None = None
    intake: IntakeRules = field(default_factory=IntakeRules)   # what every source checks each record against
    mdr_url: str = ""    # where refused records of children's views are counted (see dsp.spark.kafka_source)
    handoff_dir: str = ""   # readers hand their rows to the driver in files there (dsp.spark.kafka_source)


def compile_plan(plan: Plan, ctx: CompileContext) -> DataFrame:
    """The plan's rows as a streaming DataFrame; for a Smooth, the input of the sink that runs
    it (see _smooth)."""
    output_columns(plan)  # type-check the whole tree first: errors name the operator, not Spark
    if isinstance(plan, Smooth):
        return _smooth(plan, ctx)
    return _compile(plan, ctx)


def read_source(source: Source, ctx: CompileContext, valid_only: bool = True, heartbeats: bool = False) -> DataFrame:
    """The source's stream; raw RFID sources keep only valid readings unless `valid_only` is off.

    With markers, every topic is read as its own stream with its own watermark and the streams
    are unioned: Spark's global watermark is then the minimum over the children (a child that
    is behind holds it back instead of seeing its rows dropped as late). Marker rows advance
    their stream's watermark and are dropped right after it.
    """
    if source.markers:
        return _union([_read_topic(source, (topic,), ctx, valid_only) for topic in source.topics])
    return _read_topic(source, source.topics, ctx, valid_only, heartbeats)


def _union(frames: list[DataFrame]) -> DataFrame:
    return functools.reduce(DataFrame.unionByName, frames)


def topic_reader(ctx: CompileContext, topics: tuple[str, ...], fmt: str, columns: Sequence[tuple[str, str]] = (),
                 markers: bool = False, event_time: str = "", heartbeats: bool = False) -> DataFrame:
    """The `hifi_kafka` stream of `topics` in a reader's shape (dsp.spark.kafka_source): raw readings
    with their `error` column, or a view's `columns` with a marker row per progress marker."""
    return kafka_stream(ctx.spark, reader_options(ctx, topics, fmt, columns, markers, event_time, heartbeats))


def kafka_stream(spark: SparkSession, options: Mapping[str, str]) -> DataFrame:
    """The `hifi_kafka` source with these options (reader_options), as a stream."""
    return spark.readStream.format("hifi_kafka").options(**options).load()


def reader_options(ctx: CompileContext, topics: tuple[str, ...], fmt: str, columns: Sequence[tuple[str, str]] = (),
                   markers: bool = False, event_time: str = "", heartbeats: bool = False) -> dict[str, str]:
    """The options of topic_reader's source (what dsp.spark.kafka_source's reader is made of)."""
    options = {"bootstrap": ctx.bootstrap, "topics": ",".join(topics), "format": fmt,
               "heartbeats": str(heartbeats).lower(), "intake": ctx.intake.to_option(), "mdr_url": ctx.mdr_url}
    if fmt == "samples":
        options["schema"] = ddl(columns)
    if fmt == "rows":
        shape = [*columns, (PROGRESS_COLUMN, "boolean")] if markers else list(columns)
        options.update(schema=ddl(shape), markers=str(markers).lower(), event_time=event_time)
    if ctx.handoff_dir:
        options["handoff_dir"] = ctx.handoff_dir
    options["tasks"] = str(ctx.spark.sparkContext.defaultParallelism)
    if ctx.start_offsets is not None:
        mine = {key: offset for key, offset in ctx.start_offsets.items() if key.rpartition(":")[0] in topics}
        options["startingOffsets"] = json.dumps(mine)
    if ctx.ingest is not None and topics == (ctx.ingest.raw_topic,):
        options.update(ingest_node=ctx.ingest.node, mdr_url=ctx.ingest.mdr_url, weak_below=str(ctx.ingest.weak_below),
                       triage_ms=str(ctx.ingest.triage_ms))
    return options


def _read_topic(source: Source, topics: tuple[str, ...], ctx: CompileContext, valid_only: bool,
                heartbeats: bool = False) -> DataFrame:
    df = topic_reader(ctx, topics, source.format, source.columns, source.markers, source.event_time, heartbeats)
    if source.format == "rfid" and valid_only:
        df = df.where(F.col("error").isNull())
    names = [name for name, _ in source.columns]
    if valid_only and not source.markers:
        df = df.select(*names)
    df = df.withWatermark(source.event_time, f"{source.watermark_ms} milliseconds")
    if source.markers:
        # The condition names the event-time column so the optimizer keeps it above the watermark
        # (predicates that do not are pushed below it, and markers would never count).
        df = df.where(F.col(PROGRESS_COLUMN).isNull() | F.col(source.event_time).isNull()).select(*names)
    return df


def _lookup_join(df: DataFrame, plan: LookupJoin, ctx: CompileContext) -> DataFrame:
    rows = ctx.relations.get(plan.relation)
    if rows is None:
        raise PlanError(f"static relation {plan.relation!r} is not replicated at this node")
    child_types = dict(output_columns(plan.child))
    schema = ddl([(plan.on, child_types[plan.on]), *plan.columns])
    static = ctx.spark.createDataFrame(list(rows), schema)
    return df.join(F.broadcast(static), on=plan.on, how="left")


def _compile(plan: Plan, ctx: CompileContext) -> DataFrame:
    if isinstance(plan, Source):
        return read_source(plan, ctx)
    if isinstance(plan, Filter):
        return _compile(plan.child, ctx).where(compile_expr(plan.predicate))
    if isinstance(plan, Project):
        return _compile(plan.child, ctx).select(*[compile_expr(e).alias(n) for n, e in plan.outputs])
    if isinstance(plan, Aggregate):
        df = _compile(plan.child, ctx)
        keys: list[SparkColumn] = [F.col(k) for k in plan.keys]
        if plan.window is not None:
            time_col = event_time_column(plan.child)
            if time_col is None:
                raise PlanError("windowed aggregate over an input without event time")
            window = F.window(time_col, f"{plan.window.range_ms} milliseconds",
                              f"{plan.window.slide_ms} milliseconds")
            keys = [window.alias("__window"), *keys]
        out = df.groupBy(*keys).agg(*[_aggregate(spec) for spec in plan.aggregates])
        if plan.window is not None:
            out = out.select(F.col("__window.start").alias("window_start"),
                             F.col("__window.end").alias("window_end"),
                             *[F.col(k) for k in plan.keys], *[F.col(s.name) for s in plan.aggregates])
        if plan.having is not None:
            out = out.where(compile_expr(plan.having))
        return out
    if isinstance(plan, LookupJoin):
        return _lookup_join(_compile(plan.child, ctx), plan, ctx)
    if isinstance(plan, Union_):
        return _union([_compile(child, ctx) for child in plan.children])
    if isinstance(plan, Smooth):
        raise PlanError("Smooth runs at the root of a node's plan (its state lives in the sink)")
    raise PlanError(f"not a plan operator: {type(plan).__name__}")


def _smooth_input(plan: Plan, ctx: CompileContext) -> DataFrame:
    """The readings under a Smooth, with a heartbeat row (no tag) per read cycle that filters let
    through: the epochs a reader cycled in, read or not."""
    if isinstance(plan, Source):
        return read_source(plan, ctx, heartbeats=True)
    if isinstance(plan, Filter):
        return _smooth_input(plan.child, ctx).where(compile_expr(plan.predicate) | F.col("tag_id").isNull())
    if isinstance(plan, LookupJoin):
        return _lookup_join(_smooth_input(plan.child, ctx), plan, ctx)
    raise PlanError(f"adaptive smoothing reads readings through filters and joins, not {type(plan).__name__}")


def _smooth(plan: Smooth, ctx: CompileContext) -> DataFrame:
    """Reads per receptor, tag and epoch, emitted when the watermark closes the epoch; the epochs'
    heartbeats come out as rows with no tag and no reads. The smoothing itself runs on them in
    the sink (dsp.spark.smoothing), where its per-receptor state lives: its input is small. (On PySpark
    4.0.1 with pandas 3 applyInPandasWithState failed; on the pinned 4.3.0 it works, unused here.)"""
    return _per_epoch(_smooth_input(plan.child, ctx), event_time_column(plan.child), plan.epoch_ms,
                      ("receptor_id", "tag_id"), [F.count("tag_id").alias("reads")])


def _per_epoch(df: DataFrame, time_col: str | None, epoch_ms: int, keys: Sequence[str],
               aggregates: list[SparkColumn]) -> DataFrame:
    """`aggregates` per key and tumbling epoch, emitted once the watermark closes the epoch:
    window_start, window_end, the keys, the aggregates (the input of a sink-side operator)."""
    grouped = df.groupBy(F.window(time_col, f"{epoch_ms} milliseconds").alias("__window"), *keys).agg(*aggregates)
    return grouped.select(F.col("__window.start").alias("window_start"), F.col("__window.end").alias("window_end"),
                          *keys, *grouped.columns[len(keys) + 1:])
