"""The node-local logical plan form: plain frozen dataclasses, their output schemas, and JSON.

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
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields, is_dataclass
from typing import Any, Union

from wire.errors import HiFiError
from wire.windows import Window, WindowError

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


def _agg_type(spec: AggSpec, schema: dict[str, str]) -> str:
    if spec.fn not in AGGREGATES:
        raise PlanError(f"aggregate {spec.name}: unknown function {spec.fn!r}")
    if spec.fn in ("count", "count_distinct"):
        if spec.column is not None and spec.column not in schema:
            raise PlanError(f"aggregate {spec.name}: unknown column {spec.column!r}")
        return "long"
    if spec.column is None or spec.column not in schema:
        raise PlanError(f"aggregate {spec.name}: {spec.fn} needs an existing column (got {spec.column!r})")
    if spec.fn == "avg":
        return "double"
    if spec.fn == "collect_set":
        return f"array<{schema[spec.column]}>"
    if spec.fn == "union_sets" and not schema[spec.column].startswith("array<"):
        raise PlanError(f"aggregate {spec.name}: union_sets needs an array column (got {schema[spec.column]})")
    if spec.fn == "argmax" and (spec.by is None or spec.by not in schema):
        raise PlanError(f"aggregate {spec.name}: argmax needs an existing 'by' column (got {spec.by!r})")
    return schema[spec.column]


def output_columns(plan: Plan) -> tuple[Column, ...]:
    """The (name, type) columns a plan produces, checking every column reference on the way."""
    columns_of = _COLUMNS_OF.get(type(plan))
    if columns_of is None:
        raise PlanError(f"not a plan operator: {type(plan).__name__}")
    return columns_of(plan)


def _source_columns(plan: Source) -> tuple[Column, ...]:
    if plan.format not in ("rfid", "samples", "rows"):
        raise PlanError(f"source {plan.topics}: unknown format {plan.format!r}")
    if plan.event_time not in dict(plan.columns):
        raise PlanError(f"source {plan.topics}: event time column {plan.event_time!r} is not a column")
    if plan.sample_ms and (plan.format != "samples" or plan.sample_ms < 0):
        raise PlanError(f"source {plan.topics}: sample_ms {plan.sample_ms} (a positive period of raw samples)")
    return plan.columns


def _filter_columns(plan: Filter) -> tuple[Column, ...]:
    cols = output_columns(plan.child)
    if expr_type(plan.predicate, dict(cols)) != "boolean":
        raise PlanError("filter predicate is not a condition")
    return cols


def _project_columns(plan: Project) -> tuple[Column, ...]:
    schema = dict(output_columns(plan.child))
    return tuple((name, expr_type(expr, schema)) for name, expr in plan.outputs)


def _aggregate_columns(plan: Aggregate) -> tuple[Column, ...]:
    schema = dict(output_columns(plan.child))
    for key in plan.keys:
        if key not in schema:
            raise PlanError(f"GROUP BY: unknown column {key!r}")
    out: list[Column] = []
    if plan.window is not None:
        out += [("window_start", "timestamp"), ("window_end", "timestamp")]
    out += [(key, schema[key]) for key in plan.keys]
    out += [(spec.name, _agg_type(spec, schema)) for spec in plan.aggregates]
    if plan.annotate:
        if not plan.aggregates or plan.aggregates[0].fn not in ("count", "sum"):
            raise PlanError("an approximate aggregate's first aggregate is a count or a sum (its error bound "
                            "is on it)")
        out += list(TRIAGE_COLUMNS)
    if plan.having is not None and expr_type(plan.having, dict(out)) != "boolean":
        raise PlanError("HAVING is not a condition")
    return tuple(out)


def _lookup_join_columns(plan: LookupJoin) -> tuple[Column, ...]:
    cols = output_columns(plan.child)
    if plan.on not in dict(cols):
        raise PlanError(f"join with {plan.relation}: unknown column {plan.on!r}")
    return cols + tuple(plan.columns)


def _smooth_columns(plan: Smooth) -> tuple[Column, ...]:
    schema = dict(output_columns(plan.child))
    for name in ("receptor_id", "tag_id"):
        if schema.get(name) != "string":
            raise PlanError(f"adaptive smoothing needs a string column {name!r} (have {', '.join(schema)})")
    if event_time_column(plan.child) is None:
        raise PlanError("adaptive smoothing over an input without event time")
    if plan.epoch_ms <= 0 or not 0 < plan.delta < 1 or plan.max_window < 1:
        raise PlanError(f"adaptive smoothing: epoch {plan.epoch_ms} ms, delta {plan.delta}, "
                        f"max window {plan.max_window} (need a positive epoch, 0 < delta < 1, a window >= 1)")
    return SMOOTH_COLUMNS


def _qualify_columns(plan: Qualify) -> tuple[Column, ...]:
    schema = dict(output_columns(plan.child))
    needed = {"receptor_id": "string", "x": "double", "y": "double", **dict.fromkeys(SAMPLE_QUANTITIES, "double")}
    wrong = [name for name, kind in needed.items() if schema.get(name) != kind]
    if wrong:
        raise PlanError(f"mote quality needs {', '.join(f'{n} {needed[n]}' for n in wrong)} "
                        f"(have {', '.join(schema)})")
    if event_time_column(plan.child) is None or plan.period_ms <= 0:
        raise PlanError("mote quality needs an input with event time and a positive sampling period")
    return QUALITY_COLUMNS


def _match_columns(plan: Match) -> tuple[Column, ...]:
    schema = dict(output_columns(plan.child))
    if event_time_column(plan.child) is None:
        raise PlanError("event patterns need an input with event time")
    for key in plan.partition:
        if key not in schema:
            raise PlanError(f"PARTITION BY: unknown column {key!r}")
    if not plan.steps or plan.steps[0].negated:
        raise PlanError("an event pattern begins with a step that is not negated")
    named = {name for step in plan.steps for name in step.names}
    for step in plan.steps:
        if len(step.names) != len(step.conditions) or (step.negated and len(step.names) != 1):
            raise PlanError(f"pattern step {step.names}: one condition per name, one name when negated")
        for condition in step.conditions:
            if expr_type(condition, schema) != "boolean":
                raise PlanError(f"pattern step {step.names}: its condition is not a condition")
    out: list[Column] = []
    for name, step, column in plan.outputs:
        if step and step not in named or column not in schema or (not step and column not in plan.partition):
            raise PlanError(f"pattern output {name!r}: no column {column!r} of step {step!r}")
        out.append((name, schema[column]))
    return (*out, (EVENT_TIME, "timestamp"))


def _changes_columns(plan: Changes) -> tuple[Column, ...]:
    schema = dict(output_columns(plan.child))
    if "window_start" not in schema or "window_end" not in schema or plan.slide_ms <= 0:
        raise PlanError("changes need windowed rows (window_start, window_end, a positive slide)")
    for key in plan.keys:
        if key not in schema or key in ("window_start", "window_end"):
            raise PlanError(f"changes: key {key!r} is not a column of the rows (nor a window bound)")
    taken = [name for name, _ in CHANGE_COLUMNS if name in schema]
    if taken:
        raise PlanError(f"changes: the rows have a column {taken[0]!r} already")
    return (*output_columns(plan.child), *CHANGE_COLUMNS)


def _union_columns(plan: Union_) -> tuple[Column, ...]:
    shapes = {output_columns(child) for child in plan.children}
    if len(shapes) != 1:
        raise PlanError("union inputs have different columns")
    return shapes.pop()


def _join_columns(plan: WindowJoin) -> tuple[Column, ...]:
    if len(plan.children) != len(plan.aliases) or len(set(plan.aliases)) != len(plan.aliases) or \
            len(plan.aliases) < 2:
        raise PlanError(f"window join: one distinct alias per input, two inputs or more (got {plan.aliases})")
    out: list[Column] = []
    for alias, child in zip(plan.aliases, plan.children, strict=True):
        if event_time_column(child) is None:
            raise PlanError(f"window join: input {alias!r} has no event time")
        out += [(f"{alias}.{name}", kind) for name, kind in output_columns(child) if name != EVENT_TIME]
    schema = dict(out)
    for left, right in plan.keys:
        if left not in schema or right not in schema:
            raise PlanError(f"window join: key {left} = {right} names a column no input has")
    for bound in plan.bounds:
        if {bound.left, bound.right} - set(plan.aliases) or bound.left == bound.right:
            raise PlanError(f"window join: a bound between {bound.left!r} and {bound.right!r}, not two inputs")
    return (*out, (JOIN_OLDEST, "timestamp"), (JOIN_TIME, "timestamp"))


# each operator's columns, checked (output_columns)
_COLUMNS_OF: dict[type, Callable[[Any], tuple[Column, ...]]] = {
    Source: _source_columns, Filter: _filter_columns, Project: _project_columns, Aggregate: _aggregate_columns,
    LookupJoin: _lookup_join_columns, Smooth: _smooth_columns, Qualify: _qualify_columns, Match: _match_columns,
    WindowJoin: _join_columns, Union_: _union_columns, Changes: _changes_columns,
}


def event_time_column(plan: Plan) -> str | None:
    """The column carrying event time in a plan's output (window_end for windowed aggregates)."""
    if isinstance(plan, Source):
        return plan.event_time
    if isinstance(plan, Smooth | Qualify):
        return "window_start"
    if isinstance(plan, Match):
        return EVENT_TIME
    if isinstance(plan, WindowJoin):
        return JOIN_TIME
    if isinstance(plan, Aggregate):
        if plan.window is not None:
            return "window_end"
        inner = event_time_column(plan.child)
        return inner if inner in plan.keys else None
    if isinstance(plan, Project):
        inner = event_time_column(plan.child)
        return next((name for name, expr in plan.outputs if expr == Col(inner)), None) if inner else None
    if isinstance(plan, Union_):
        return event_time_column(plan.children[0])
    return event_time_column(plan.child)


def carries_markers(columns: Sequence[str]) -> bool:
    """Whether a part's output goes out with progress markers (dsp.spark.progress): rows a reader orders
    by window_start, a selection's rows by their event time (an event pattern above waits for
    them), or a join's (a final part windows them)."""
    return "window_start" in columns or EVENT_TIME in columns or JOIN_OLDEST in columns


def window_of(plan: Plan) -> Window | None:
    """The window a plan's output rows stand for, if any: its outermost windowed aggregate's, or
    the one its source's rows carry (a selection or regrouping of a windowed view's rows)."""
    if isinstance(plan, Aggregate) and plan.window is not None:
        return plan.window
    if isinstance(plan, Smooth):
        return Window(plan.epoch_ms, plan.epoch_ms)
    if isinstance(plan, Qualify):
        return Window(plan.period_ms, plan.period_ms)
    if isinstance(plan, Source):
        return plan.window
    if isinstance(plan, Union_):
        return window_of(plan.children[0])
    if isinstance(plan, WindowJoin):
        return None
    return window_of(plan.child)


def _typed_null(kind: str) -> Expr:
    """NULL of a plan type (a literal NULL types as string; a double is cast)."""
    if kind not in ("string", "double"):
        raise PlanError(f"no NULL literal of type {kind}")
    return Lit(None) if kind == "string" else Func("double", (Lit(None),))


def raw_stream_plan(name: str, topic: str, lateness_ms: int) -> Plan:
    """How a raw stream is read from an edge node's raw topic: one source, or for a union the
    rows of each of its streams with the union's columns (NULL where that stream has none)."""
    raw = RAW_STREAMS[name]
    if not raw.union_of:
        return Source((topic,), raw.format, raw.columns, "ts", lateness_ms)
    parts: list[Plan] = []
    for part in raw.union_of:
        read = raw_stream_plan(part, topic, lateness_ms)
        has = dict(output_columns(read))
        parts.append(Project(read, tuple((column, Col(column) if column in has else _typed_null(kind))
                                         for column, kind in raw.columns)))
    return Union_(tuple(parts))


def sources(plan: Plan) -> list[Source]:
    if isinstance(plan, Source):
        return [plan]
    if isinstance(plan, Union_ | WindowJoin):
        return [s for child in plan.children for s in sources(child)]
    return sources(plan.child)


# ---------------------------------------------------------------- JSON

_OPERATORS = {cls.__name__.rstrip("_"): cls for cls in (Source, Filter, Project, Aggregate, LookupJoin, Union_,
                                                         Smooth, Qualify, Match, WindowJoin, Changes)}


def _encode(value: Any) -> Any:
    """The JSON form of a plan value, by its type (a plan's view name hashes it: a 1 000-node plan
    encodes thousands of parts, so each type goes straight to its encoder). The parts of one query
    share their expressions and column lists (the same objects), so those are encoded once."""
    kind = type(value)
    if kind in _PLAIN:
        return value
    if kind in _SHARED:
        found = _ENCODED.get(id(value))
        if found is not None and found[0] is value:
            return found[1]
        if len(_ENCODED) >= _ENCODED_MAX:
            _ENCODED.clear()
        encoded = _ENCODERS[kind](value)
        _ENCODED[id(value)] = (value, encoded)   # the value kept: its id cannot name another meanwhile
        return encoded
    encoder = _ENCODERS.get(kind)
    if encoder is not None:
        return encoder(value)
    if isinstance(value, tuple | list):
        return [_encode(v) for v in value]
    if is_dataclass(value):
        return _encode_operator(value)
    return value


_PLAIN = (str, int, float, bool, type(None))
_SHARED = (BinOp, Func, tuple)   # immutable, and shared by the parts of a query: encoded once (to_json
_ENCODED: dict[int, tuple[Any, Any]] = {}   # reads the encodings, never changes them)
_ENCODED_MAX = 50_000


def _encode_operator(value: Any) -> dict[str, Any]:
    names = _FIELD_NAMES.get(type(value))
    if names is None:
        names = _FIELD_NAMES[type(value)] = tuple(f.name for f in fields(value))
    body = {name: _leaf_or_encoded(getattr(value, name)) for name in names}
    if isinstance(value, Source) and not value.sample_ms:
        del body["sample_ms"]   # a plan without it keeps the JSON (and the view names) it had
    if isinstance(value, Aggregate) and not value.annotate:
        del body["annotate"]    # likewise
    return {"op": type(value).__name__.rstrip("_"), **body}


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}
_ENCODERS: dict[type, Callable[[Any], Any]] = {
    Col: lambda v: {"col": v.name},
    Lit: lambda v: {"lit": v.value},
    BinOp: lambda v: {"op": v.op, "left": _encode(v.left), "right": _encode(v.right)},
    Func: lambda v: {"fn": v.name, "args": [_encode(a) for a in v.args]},
    Window: lambda v: {"range_ms": v.range_ms, "slide_ms": v.slide_ms},
    AggSpec: lambda v: {f.name: getattr(v, f.name) for f in fields(v)},
    tuple: lambda v: [_leaf_or_encoded(x) for x in v],
    list: lambda v: [_leaf_or_encoded(x) for x in v],
}


def _leaf_or_encoded(value: Any) -> Any:
    return value if type(value) in _PLAIN else _encode(value)


def _decode_expr(data: Any) -> Expr:
    if "col" in data:
        return Col(data["col"])
    if "lit" in data:
        return Lit(data["lit"])
    if "fn" in data:
        return Func(data["fn"], tuple(_decode_expr(a) for a in data["args"]))
    return BinOp(data["op"], _decode_expr(data["left"]), _decode_expr(data["right"]))


def _decode(data: dict) -> Plan:
    op = data.get("op")
    if op not in _OPERATORS:
        raise PlanError(f"unknown plan operator {op!r}")
    if op == "Source":
        return Source(tuple(data["topics"]), data["format"], tuple(tuple(c) for c in data["columns"]),
                      data["event_time"], int(data["watermark_ms"]), bool(data.get("markers", False)),
                      Window(**data["window"]) if data.get("window") else None, int(data.get("sample_ms", 0)))
    if op == "Filter":
        return Filter(_decode(data["child"]), _decode_expr(data["predicate"]))
    if op == "Project":
        return Project(_decode(data["child"]), tuple((n, _decode_expr(e)) for n, e in data["outputs"]))
    if op == "Aggregate":
        window = data.get("window")
        return Aggregate(_decode(data["child"]), tuple(data["keys"]),
                         tuple(AggSpec(**spec) for spec in data["aggregates"]),
                         _decode_expr(data["having"]) if data.get("having") else None,
                         Window(**window) if window else None, bool(data.get("annotate", False)))
    if op == "LookupJoin":
        return LookupJoin(_decode(data["child"]), data["relation"], data["on"],
                          tuple(tuple(c) for c in data["columns"]))
    if op == "Qualify":
        return Qualify(_decode(data["child"]), int(data["period_ms"]), int(data.get("from_ms", 0)))
    if op == "Smooth":
        return Smooth(_decode(data["child"]), int(data["epoch_ms"]), float(data["delta"]), int(data["max_window"]),
                      int(data.get("from_ms", 0)))
    if op == "Match":
        steps = tuple(MatchStep(tuple(s["names"]), tuple(_decode_expr(c) for c in s["conditions"]), bool(s["negated"]))
                      for s in data["steps"])
        return Match(_decode(data["child"]), tuple(data["partition"]), steps, int(data["within_ms"]),
                     tuple(tuple(o) for o in data["outputs"]))
    if op == "WindowJoin":
        return WindowJoin(tuple(_decode(child) for child in data["children"]), tuple(data["aliases"]),
                          tuple((left, right) for left, right in data["keys"]),
                          tuple(JoinBound(b["left"], b["right"], b["low_ms"], b["high_ms"]) for b in data["bounds"]),
                          int(data.get("from_ms", 0)))
    if op == "Changes":
        return Changes(_decode(data["child"]), tuple(data["keys"]), int(data["slide_ms"]))
    return Union_(tuple(_decode(child) for child in data["children"]))


def to_json(plan: Plan) -> str:
    return json.dumps(_encode(plan), sort_keys=True)


def from_json(text: str) -> Plan:
    try:
        return _decode(json.loads(text))
    except (AttributeError, KeyError, TypeError, ValueError) as exc:   # not JSON, or not a plan's fields
        raise PlanError(f"malformed plan JSON: {exc}") from exc
    except WindowError as exc:
        raise PlanError(str(exc)) from exc
