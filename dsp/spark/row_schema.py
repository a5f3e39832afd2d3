"""A Spark schema's rows in Arrow and in the plan's types, and a progress marker's row."""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructType,
    TimestampType,
)

from base.plan import PROGRESS_COLUMN
from wire.codec import ms_to_datetime

_ARROW_TYPES: dict[type[DataType], pa.DataType] = {
    StringType: pa.string(), IntegerType: pa.int32(), LongType: pa.int64(), DoubleType: pa.float64(),
    BooleanType: pa.bool_(), BinaryType: pa.binary(), TimestampType: pa.timestamp("us", tz="UTC"),
}


_PLAN_TYPES = {StringType: "string", IntegerType: "int", LongType: "long", DoubleType: "double",
               BooleanType: "boolean", BinaryType: "binary", TimestampType: "timestamp"}


def plan_type(kind: DataType) -> str:
    """base.plan's name of a Spark type (what wire.intake checks values against)."""
    if isinstance(kind, ArrayType):
        return f"array<{plan_type(kind.elementType)}>"
    return _PLAN_TYPES[type(kind)]


def _arrow_type(kind: DataType) -> pa.DataType:
    if isinstance(kind, ArrayType):   # named as Spark's own Arrow batches name it
        return pa.list_(pa.field("element", _arrow_type(kind.elementType)))
    return _ARROW_TYPES[type(kind)]


def arrow_schema(schema: StructType) -> pa.Schema:
    return pa.schema([pa.field(f.name, _arrow_type(f.dataType)) for f in schema.fields])


def marker_row(schema: StructType, watermark_ms: int) -> tuple:
    """The row a progress marker becomes: its time in every timestamp column, the flag set."""
    at = ms_to_datetime(watermark_ms)
    return tuple(True if f.name == PROGRESS_COLUMN else at if isinstance(f.dataType, TimestampType) else None
                 for f in schema.fields)
