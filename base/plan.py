"""The node-local logical plan form: plain frozen dataclasses (their output schemas are
base.plan_schema's, their JSON base.plan_json's).

A plan is a tree of operators ending in the rows a node's query emits:

  Source(topics, format, columns, event_time, watermark_ms, markers, window, sample_ms)
                                                              Kafka topics read as one stream; with
                                                              `markers`, each topic is its own input
                                                              whose progress markers advance its
                                                              own watermark (the global one is
                                                              their minimum: per-child progress)
  Filter(child, predicate)                                    keep rows where predicate holds
  Project(child, outputs)                                     name := expression
  Aggregate(child, keys, aggregates, having, window)          GROUP BY (+ tumbling/sliding window)
  LookupJoin(child, relation, on, columns)                    stream-static equi-join (left outer)
  Union(children)                                             rows of several inputs
  Smooth(child, epoch_ms, delta, max_window, from_ms)         adaptive per-tag smoothing (base.smurf), per
                                                              receptor and epoch
  Qualify(child, period_ms, from_ms)                          faulty-mote detection (base.mote_quality), per
                                                              sampling period
  Changes(child, keys, slide_ms)                              a windowed input's rows as each key's
                                                              starts and ends (EMIT CHANGES)

Windowed aggregates add `window_start` and `window_end` (TIMESTAMP) to their keys. An Aggregate
without a window over an already-windowed stream groups by those columns like any key; its input
must then have its event time among the keys so state is bounded by the watermark.

JSON form ("hifi-plan/1"): every node is {"op": <class name>, ...fields}, expressions are
{"col": name} | {"lit": value} | {"op": symbol, "left": e, "right": e} | {"fn": name, "args": [e]}.
Column types are those of COLUMN_TYPES or "array<T>" (partial distinct sets). Pure: no I/O here.
The classes stay in this module: a node's checkpoint pickles the plans its parts evaluate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Union

from wire.errors import HiFiError
from wire.windows import Window

PLAN_FORMAT = "hifi-plan/1"

# A progress marker's flag in a view reader's rows (dsp.spark.kafka_source: the marker's time in the
# event-time columns, every other column null).
PROGRESS_COLUMN = "__progress"
EVENT_TIME = "__ts"          # the event time carried by a selection's rows up the tree

COLUMN_TYPES = ("string", "int", "long", "double", "timestamp", "boolean", "binary")
Column = tuple[str, str]  # (name, type)

# The columns a plan sees of a raw topic's mote samples (one row per sample; see wire.codec).
SAMPLE_QUANTITIES = ("temperature", "humidity", "light", "sound", "voltage", "gas")   # gas: ppm
RAW_SAMPLE_SOURCE_COLUMNS: tuple[Column, ...] = (("receptor_id", "string"),
                                                 *((q, "double") for q in SAMPLE_QUANTITIES), ("ts", "timestamp"))
# The columns a plan sees of a raw RFID topic (one row per tag read; see wire.codec).
RAW_RFID_SOURCE_COLUMNS: tuple[Column, ...] = (("receptor_id", "string"), ("tag_id", "string"), ("antenna", "int"),
                                               ("read_strength", "double"), ("ts", "timestamp"))


@dataclass(frozen=True)
class RawStream:
    """A stream every edge node receives on its raw topic: what a query names, how the topic is
    read for it, and which receptors feed it."""

    format: str                        # the Source format reading it from the raw topic ("": a union)
    columns: tuple[Column, ...]
    receptor_kind: str                 # the receptors (topology `kind`) whose records it holds ("": all)
    union_of: tuple[str, ...] = ()     # a union: the raw streams whose rows it holds, padded with NULLs


# receptor_stream: every record of every receptor, an RFID read or a mote sample, with the columns
# of both (NULL where its kind has none): what an event pattern over readings and samples together
# reads (the UNION ALL a Flink or Oracle user writes before MATCH_RECOGNIZE). No antenna: it is the
# one column of a kind that is not a string or a double.
RECEPTOR_STREAM_COLUMNS: tuple[Column, ...] = (
    ("receptor_id", "string"), ("tag_id", "string"), ("read_strength", "double"),
    *((q, "double") for q in SAMPLE_QUANTITIES), ("ts", "timestamp"))

RAW_STREAMS: dict[str, RawStream] = {
    "rfid_stream": RawStream("rfid", RAW_RFID_SOURCE_COLUMNS, "rfid"),
    "sensor_stream": RawStream("samples", RAW_SAMPLE_SOURCE_COLUMNS, "mote"),
    "receptor_stream": RawStream("", RECEPTOR_STREAM_COLUMNS, "", ("rfid_stream", "sensor_stream")),
}


class PlanError(HiFiError):
    """A plan that cannot be typed or compiled; the message names the operator and the problem."""


# ---------------------------------------------------------------- expressions

@dataclass(frozen=True)
class Col:
    name: str


@dataclass(frozen=True)
class Lit:
    value: Any


@dataclass(frozen=True)
class BinOp:
    op: str
    left: Expr
    right: Expr


@dataclass(frozen=True)
class Func:
    """A scalar function: not(b), size(array), double(x) (a cast), epoch_ms(timestamp),
    product(tag) (an EPC's product identity), indicator(tag) (an SGTIN's packaging level)."""

    name: str
    args: tuple[Expr, ...]


Expr = Union[Col, Lit, BinOp, Func]  # noqa: UP007 - a runtime alias used by isinstance-free dispatch
FUNCTIONS = {"not": "boolean", "size": "long", "double": "double", "epoch_ms": "long", "product": "string",
             "indicator": "string", "read_key": "string",
             "tag_estimate": "double", "tag_estimate_low": "double", "tag_estimate_high": "double"}
# read_key(receptor, epoch ms, tag): one read as base.tag_count.read_key spells it; tag_estimate(set
# of reads) and its interval's ends _low and _high: base.tag_count.tag_count over the set
# product(tag): the product identity of a pure-identity EPC URI, its company prefix and item
# reference ("urn:epc:id:sgtin:0614141.812345.6789" -> "0614141.812345"): the URI up to its second
# '.', without the scheme
EPC_SCHEME = "^urn:epc:id:[a-z0-9]+:"
# indicator(tag): an SGTIN's indicator digit, GS1's packaging level, the first digit after the
# company prefix ("urn:epc:id:sgtin:0614141.212345.6" -> "2"; in the emulated world 0 an item,
# 1 a case, 2 a pallet, 8 a staff badge); any other text is returned as it is
SGTIN_INDICATOR = r"^urn:epc:id:sgtin:[^.]*\.([0-9])[^.]*\.[^.]*$"
COMPARISONS = ("=", "!=", "<", "<=", ">", ">=")
LOGICAL = ("AND", "OR")
ARITHMETIC = ("+", "-", "*", "/")


def conjuncts(expr: Expr | None) -> list[Expr]:
    """The terms of a conjunction (AND), top level; [] for no condition."""
    if expr is None:
        return []
    if isinstance(expr, BinOp) and expr.op == "AND":
        return conjuncts(expr.left) + conjuncts(expr.right)
    return [expr]


_FLIPPED = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "=": "=", "!=": "!="}


def plain_comparison(expr: Expr) -> tuple[Col | Lit, str, Col | Lit] | None:
    """A comparison of plain operands (a column or a constant, seen through casts to double), a
    column on the left when there is one (`5 < x` is `x > 5`); None for anything else."""
    if not isinstance(expr, BinOp) or expr.op not in _FLIPPED:
        return None
    left, right = _uncast(expr.left), _uncast(expr.right)
    if not isinstance(left, Col | Lit) or not isinstance(right, Col | Lit):
        return None
    return (right, _FLIPPED[expr.op], left) if isinstance(left, Lit) and isinstance(right, Col) else \
        (left, expr.op, right)


def _uncast(expr: Expr) -> Expr:
    while isinstance(expr, Func) and expr.name == "double":
        expr = expr.args[0]
    return expr


def expr_columns(expr: Expr) -> set[str]:
    """The columns an expression reads."""
    if isinstance(expr, Col):
        return {expr.name}
    if isinstance(expr, BinOp):
        return expr_columns(expr.left) | expr_columns(expr.right)
    if isinstance(expr, Func):
        return set().union(*(expr_columns(a) for a in expr.args))
    return set()


NUMBERS = ("int", "long", "double")


def operand_problem(op: str, left: str, right: str) -> str | None:
    """Why `left op right` cannot be evaluated (operand types), or None: arithmetic on numbers,
    comparisons of numbers or of one type, AND/OR of booleans.

    >>> operand_problem("+", "string", "long")
    "'+' needs numbers, not string + long"
    >>> operand_problem(">", "string", "long"), operand_problem(">", "int", "double")
    ('cannot compare string > long', None)
    """
    if op in ARITHMETIC and not (left in NUMBERS and right in NUMBERS):
        return f"{op!r} needs numbers, not {left} {op} {right}"
    if op in COMPARISONS and left != right and not (left in NUMBERS and right in NUMBERS):
        return f"cannot compare {left} {op} {right}"
    if op in LOGICAL and (left, right) != ("boolean", "boolean"):
        return f"{op} needs true/false on both sides, not {left} {op} {right}"
    return None


def expr_type(expr: Expr, schema: dict[str, str]) -> str:
    if isinstance(expr, Col):
        if expr.name not in schema:
            raise PlanError(f"unknown column {expr.name!r} (have {', '.join(schema)})")
        return schema[expr.name]
    if isinstance(expr, Lit):
        value = expr.value
        if isinstance(value, bool):
            return "boolean"
        if isinstance(value, int):
            return "long"
        if isinstance(value, float):
            return "double"
        return "string"
    if isinstance(expr, Func):
        if expr.name not in FUNCTIONS:
            raise PlanError(f"unknown function {expr.name!r}")
        for arg in expr.args:
            expr_type(arg, schema)
        return FUNCTIONS[expr.name]
    left, right = expr_type(expr.left, schema), expr_type(expr.right, schema)
    problem = operand_problem(expr.op, left, right)
    if problem:
        raise PlanError(problem)
    if expr.op in COMPARISONS or expr.op in LOGICAL:
        return "boolean"
    if expr.op in ARITHMETIC:
        return "double" if "double" in (left, right) or expr.op == "/" else "long"
    raise PlanError(f"unknown operator {expr.op!r}")


# ---------------------------------------------------------------- operators

@dataclass(frozen=True)
class Source:
    topics: tuple[str, ...]
    format: str                     # "rfid" (raw readings) or "rows" (a view's rows)
    columns: tuple[Column, ...]
    event_time: str
    watermark_ms: int
    markers: bool = False
    window: Window | None = None     # the window a view's rows stand for (their window_start, window_end)
    sample_ms: int = 0               # raw samples: only those whose time is a multiple of it (`sample every`)


@dataclass(frozen=True)
class Filter:
    child: Plan
    predicate: Expr


@dataclass(frozen=True)
class Project:
    child: Plan
    outputs: tuple[tuple[str, Expr], ...]


AGGREGATES = ("count", "count_distinct", "sum", "min", "max", "avg", "argmax", "collect_set", "union_sets")


@dataclass(frozen=True)
class AggSpec:
    """`name := fn(column)`; count with column None is count(*).

    argmax(column, by): the `column` value of the row with the largest `by`, ties going to the
    smallest `column` value, so the choice is deterministic (the paper's arbitration).
    collect_set(column): the set of distinct values (a partial for count DISTINCT);
    union_sets(column): the union of such sets.
    """

    name: str
    fn: str
    column: str | None = None
    by: str | None = None


@dataclass(frozen=True)
class Aggregate:
    child: Plan
    keys: tuple[str, ...]
    aggregates: tuple[AggSpec, ...]
    having: Expr | None = None
    window: Window | None = None
    # `approximate`: each group also says whether Data Triage sampled its input (TRIAGED) and
    # how far its first aggregate (a count or sum) may be from the exact answer (ERROR_BOUND)
    annotate: bool = False


# The columns an annotated Aggregate adds (see dsp.operators, Data Triage).
TRIAGED, ERROR_BOUND = "triaged", "error_bound"
TRIAGE_COLUMNS: tuple[tuple[str, str], ...] = ((TRIAGED, "boolean"), (ERROR_BOUND, "double"))


@dataclass(frozen=True)
class LookupJoin:
    child: Plan
    relation: str
    on: str
    columns: tuple[Column, ...]     # columns taken from the relation (besides `on`)


@dataclass(frozen=True)
class Union_:
    children: tuple[Plan, ...]


@dataclass(frozen=True)
class Smooth:
    """Adaptive per-tag smoothing (base.smurf.ReaderSmoother) of raw reads: per receptor, epoch by
    epoch, a row for every tag reported present, with the reads in its window and the window's
    length in epochs. The child must give receptor_id, tag_id and an event time. Rows are stamped
    with their epoch's window_start, as a windowed view's are."""

    child: Plan
    epoch_ms: int
    delta: float = 0.25
    max_window: int = 50
    from_ms: int = 0        # epochs starting before this are left out (a query answers from its start)


@dataclass(frozen=True)
class Qualify:
    """Faulty-mote detection (base.mote_quality.MoteQuality) over mote samples: per sampling
    period, every mote seen so far with its values (the period's mean), whether it is faulty, why,
    and a confidence in [0, 1] — the data stream with its quality beside it. The child must give
    receptor_id, x, y (a join with the motes' positions), the quantities and an event time."""

    child: Plan
    period_ms: int
    from_ms: int = 0        # periods starting before this are left out


@dataclass(frozen=True)
class MatchStep:
    """A step of an event pattern: one named condition, or several met in any order (AND); a
    negated step is one no row may meet between its neighbours (or, last, within the bound)."""

    names: tuple[str, ...]
    conditions: tuple[Expr, ...]     # one per name
    negated: bool = False


@dataclass(frozen=True)
class Match:
    """Event patterns (base.events): per partition, the rows in event-time order against `steps`,
    all within `within_ms` of the first (0: unbounded). A match is emitted once, at its last row
    (a pattern ending in a negated step: once its bound has passed without one), as the
    `outputs` (name, step, column; step "" for a partition column) and its end time in
    EVENT_TIME; matching resumes after it."""

    child: Plan
    partition: tuple[str, ...]
    steps: tuple[MatchStep, ...]
    within_ms: int
    outputs: tuple[tuple[str, str, str], ...]


@dataclass(frozen=True)
class JoinBound:
    """How far apart in event time two inputs' rows of one joined row may be:
    `low_ms <= time(right) - time(left) <= high_ms` (None: no bound on that side)."""

    left: str
    right: str
    low_ms: int | None
    high_ms: int | None


# The event time of a joined row (WindowJoin): the newest of its inputs' rows' times.
JOIN_TIME = "ts"
# ... and the oldest: a query reading a join another query started keeps the rows it would have
# joined itself, those whose every row is from its own start on (glue.rewrite.distribute)
JOIN_OLDEST = "__oldest_ts"


@dataclass(frozen=True)
class WindowJoin:
    """A window join of several inputs (STEAM's W-join; base.window_join): every combination of one
    row per input whose `keys` are equal (qualified column pairs) and whose times meet `bounds`
    (between aliases). A joined row holds each input's columns as `<alias>.<column>` (all but its
    event time column EVENT_TIME), JOIN_OLDEST, the oldest of its rows' times, and JOIN_TIME, the
    newest."""

    children: tuple[Plan, ...]
    aliases: tuple[str, ...]
    keys: tuple[tuple[str, str], ...]
    bounds: tuple[JoinBound, ...]
    from_ms: int = 0     # rows before this join nothing (a query joins what came from its start on)


QUALITY_COLUMNS: tuple[Column, ...] = (("window_start", "timestamp"), ("window_end", "timestamp"),
                                       ("receptor_id", "string"), ("faulty", "boolean"), ("reasons", "string"),
                                       ("confidence", "double"), *((q, "double") for q in SAMPLE_QUANTITIES))

SMOOTH_COLUMNS: tuple[Column, ...] = (("window_start", "timestamp"), ("window_end", "timestamp"),
                                      ("receptor_id", "string"), ("tag_id", "string"), ("reads", "long"),
                                      ("epochs", "long"))

@dataclass(frozen=True)
class Changes:
    """A windowed input's rows as changes per key (`EMIT CHANGES`): a `start` row in the first
    window a key has a row in, an `end` row in the first window after it without one, with
    `since`, the start of its first window, and `held_seconds`, from there to the end of its last.
    The other columns are those of the row that started it, or of its last row."""

    child: Plan
    keys: tuple[str, ...]
    slide_ms: int              # the input's windows follow each other this far apart


# What EMIT CHANGES adds to its input's columns.
CHANGE_COLUMNS: tuple[Column, ...] = (("change", "string"), ("since", "timestamp"), ("held_seconds", "double"))

Plan = Union[Source, Filter, Project, Aggregate, LookupJoin, Union_, Smooth, Qualify, Match, WindowJoin,  # noqa: UP007
             Changes]


# ---------------------------------------------------------------- JSON


