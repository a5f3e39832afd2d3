"""What a plan outputs, checked: each operator's (name, type) columns with every column reference on
the way (the type check every part passes before it is deployed), the column its event time is,
whether its rows carry progress markers, its window, its sources, and a raw stream's plan."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from base.plan import (
    AGGREGATES,
    CHANGE_COLUMNS,
    EVENT_TIME,
    JOIN_OLDEST,
    JOIN_TIME,
    QUALITY_COLUMNS,
    RAW_STREAMS,
    SAMPLE_QUANTITIES,
    SMOOTH_COLUMNS,
    TRIAGE_COLUMNS,
    Aggregate,
    AggSpec,
    Changes,
    Col,
    Column,
    Expr,
    Filter,
    Func,
    Lit,
    LookupJoin,
    Match,
    Plan,
    PlanError,
    Project,
    Qualify,
    Smooth,
    Source,
    Union_,
    WindowJoin,
    expr_type,
)
from wire.windows import Window


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
