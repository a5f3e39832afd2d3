"""Compile a dsp.plan tree into Spark Structured Streaming DataFrame operations.

This is the only place plans become Spark code. Static relations are handed in as rows (the
node reads them from the MDR), so compiling does no metadata I/O itself.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from pyspark.sql import Column as SparkColumn
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from dsp.plan import (
    Aggregate,
    AggSpec,
    BinOp,
    Col,
    Expr,
    Filter,
    LookupJoin,
    Plan,
    PlanError,
    Project,
    Source,
    Union_,
    event_time_column,
    output_columns,
)

SPARK_TYPES = {"string": "STRING", "int": "INT", "long": "BIGINT", "double": "DOUBLE",
               "timestamp": "TIMESTAMP", "boolean": "BOOLEAN", "binary": "BINARY"}

_BINARY: dict[str, Callable[[SparkColumn, SparkColumn], SparkColumn]] = {
    "=": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt,
    ">=": operator.ge, "AND": operator.and_, "OR": operator.or_, "+": operator.add, "-": operator.sub,
    "*": operator.mul, "/": operator.truediv,
}


def ddl(columns: Sequence[tuple[str, str]]) -> str:
    return ", ".join(f"`{name}` {SPARK_TYPES[kind]}" for name, kind in columns)


def compile_expr(expr: Expr) -> SparkColumn:
    if isinstance(expr, Col):
        return F.col(expr.name)
    if isinstance(expr, BinOp):
        return _BINARY[expr.op](compile_expr(expr.left), compile_expr(expr.right))
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
    else:
        result = getattr(F, spec.fn)(column)
    return result.alias(spec.name)


@dataclass(frozen=True)
class Ingest:
    """Makes the query that reads `raw_topic` the node's data listener (see dsp.kafka_source)."""

    node: str
    raw_topic: str
    mdr_url: str


@dataclass
class CompileContext:
    spark: SparkSession
    bootstrap: str
    relations: Mapping[str, Sequence[tuple]] = field(default_factory=dict)
    ingest: Ingest | None = None


def compile_plan(plan: Plan, ctx: CompileContext) -> DataFrame:
    output_columns(plan)  # type-check the whole tree first: errors name the operator, not Spark
    return _compile(plan, ctx)


def read_source(source: Source, ctx: CompileContext, valid_only: bool = True) -> DataFrame:
    """The source's stream; raw RFID sources keep only valid readings unless `valid_only` is off."""
    reader = (ctx.spark.readStream.format("hifi_kafka").option("bootstrap", ctx.bootstrap)
              .option("topics", ",".join(source.topics)).option("format", source.format))
    if source.format == "rows":
        reader = reader.option("schema", ddl(source.columns))
    if ctx.ingest is not None and source.topics == (ctx.ingest.raw_topic,):
        reader = reader.option("ingest_node", ctx.ingest.node).option("mdr_url", ctx.ingest.mdr_url)
    df = reader.load()
    if source.format == "rfid" and valid_only:
        df = df.where(F.col("error").isNull())
    if valid_only:
        df = df.select(*[name for name, _ in source.columns])
    return df.withWatermark(source.event_time, f"{source.watermark_ms} milliseconds")


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
        rows = ctx.relations.get(plan.relation)
        if rows is None:
            raise PlanError(f"static relation {plan.relation!r} is not replicated at this node")
        child_types = dict(output_columns(plan.child))
        schema = ddl([(plan.on, child_types[plan.on]), *plan.columns])
        static = ctx.spark.createDataFrame(list(rows), schema)
        return _compile(plan.child, ctx).join(F.broadcast(static), on=plan.on, how="left")
    if isinstance(plan, Union_):
        frames = [_compile(child, ctx) for child in plan.children]
        result = frames[0]
        for frame in frames[1:]:
            result = result.unionByName(frame)
        return result
    raise PlanError(f"not a plan operator: {type(plan).__name__}")
