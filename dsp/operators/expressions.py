"""base.plan expressions and column types over Arrow tables (pyarrow.compute). Pure: no I/O.

The semantics are Spark's (non-ANSI), which the reference evaluator also follows: NULL in,
NULL out; AND/OR three-valued; `/` always gives a double and NULL for a zero divisor.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from base.plan import EPC_SCHEME, SGTIN_INDICATOR, BinOp, Col, Expr, Func, Lit
from base.tag_count import SEPARATOR, tag_count

ARROW_TYPES: dict[str, pa.DataType] = {
    "string": pa.string(), "int": pa.int32(), "long": pa.int64(), "double": pa.float64(),
    "timestamp": pa.timestamp("us", tz="UTC"), "boolean": pa.bool_(), "binary": pa.binary()}


def arrow_type(kind: str) -> pa.DataType:
    if kind.startswith("array<") and kind.endswith(">"):
        return pa.list_(arrow_type(kind[6:-1]))
    return ARROW_TYPES[kind]


def arrow_schema(columns: tuple[tuple[str, str], ...] | list[tuple[str, str]]) -> pa.Schema:
    return pa.schema([pa.field(name, arrow_type(kind)) for name, kind in columns])


def epoch_ms(values: Any) -> Any:
    """Epoch milliseconds of an Arrow timestamp array (int64; sub-millisecond parts truncated)."""
    return pc.cast(pc.cast(values, pa.timestamp("ms", tz="UTC"), safe=False), pa.int64())


def timestamps(ms: list[int] | pa.Array) -> pa.Array:
    """Epoch milliseconds as the plan's timestamp type."""
    return pc.cast(pc.cast(pa.array(ms, pa.int64()), pa.timestamp("ms", tz="UTC")), ARROW_TYPES["timestamp"])


_COMPARE = {"=": pc.equal, "!=": pc.not_equal, "<": pc.less, "<=": pc.less_equal, ">": pc.greater,
            ">=": pc.greater_equal, "AND": pc.and_kleene, "OR": pc.or_kleene, "+": pc.add, "-": pc.subtract,
            "*": pc.multiply}
# substring_index(tag, '.', 2): the text before the second '.', then without the EPC scheme
_PRODUCT_PREFIX = r"^([^.]*\.[^.]*)\..*$"


def _divide(left: Any, right: Any) -> Any:
    left, right = pc.cast(left, pa.float64()), pc.cast(right, pa.float64())
    return pc.if_else(pc.equal(right, 0.0), pa.scalar(None, pa.float64()), pc.divide(left, right))


_ESTIMATE_FIELD = {"tag_estimate": 0, "tag_estimate_low": 1, "tag_estimate_high": 2}


def _read_key(receptor: Any, cycle_ms: Any, tag: Any) -> Any:
    """base.tag_count.read_key over columns (NULL in, NULL out)."""
    return pc.binary_join_element_wise(receptor, pc.cast(cycle_ms, pa.string()), tag, SEPARATOR)


def _estimates(sets: Any, field: int) -> pa.Array:
    """base.tag_count.tag_count's `field` of each set of reads (NULL for a NULL set)."""
    values = sets.to_pylist() if not isinstance(sets, pa.Scalar) else [sets.as_py()]
    return pa.array([None if reads is None else tag_count(reads)[field] for reads in values], pa.float64())


def _function(name: str, args: list[Any]) -> Any:
    value = args[0]
    if name == "read_key":
        return _read_key(*args)
    if name in _ESTIMATE_FIELD:
        return _estimates(value, _ESTIMATE_FIELD[name])
    if name == "not":
        return pc.invert(value)
    if name == "size":
        return pc.cast(pc.list_value_length(value), pa.int64())
    if name == "double":
        return pc.cast(value, pa.float64())
    if name == "epoch_ms":
        return epoch_ms(value)
    if name == "product":
        return pc.replace_substring_regex(pc.replace_substring_regex(value, _PRODUCT_PREFIX, r"\1"), EPC_SCHEME, "")
    if name == "indicator":
        return pc.replace_substring_regex(value, SGTIN_INDICATOR, r"\1")
    raise ValueError(f"unknown function {name!r}")


def _aligned(left: Any, right: Any) -> tuple[Any, Any]:
    """An integer constant beside doubles as a double, as Spark casts it (Arrow refuses to cast one
    beyond 2^53, which a double cannot hold exactly: `read_strength < 9223372036854775807`)."""
    def as_double(value: Any, other: Any) -> Any:
        if isinstance(value, pa.Scalar) and pa.types.is_integer(value.type) and pa.types.is_floating(other.type):
            return pa.scalar(None if value.as_py() is None else float(value.as_py()), pa.float64())
        return value
    return as_double(left, right), as_double(right, left)


def evaluate(expr: Expr, table: pa.Table) -> Any:
    """The expression's values over the table's rows: an array, or a scalar for a constant."""
    if isinstance(expr, Col):
        return table[expr.name]
    if isinstance(expr, Lit):
        return pa.scalar(expr.value)
    if isinstance(expr, Func):
        return _function(expr.name, [evaluate(a, table) for a in expr.args])
    assert isinstance(expr, BinOp)
    left, right = _aligned(evaluate(expr.left, table), evaluate(expr.right, table))
    if expr.op == "/":
        return _divide(left, right)
    return _COMPARE[expr.op](left, right)


def column(expr: Expr, table: pa.Table, kind: str) -> pa.ChunkedArray | pa.Array:
    """The expression as a full column of the plan type `kind` (constants repeated)."""
    values = evaluate(expr, table)
    if isinstance(values, pa.Scalar):
        values = pa.repeat(values, table.num_rows)
    return pc.cast(values, arrow_type(kind))
