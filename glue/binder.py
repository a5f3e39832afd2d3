"""What binding a statement needs at every step: the catalog as its principal reads it (sources,
durations, parameters), expressions bound and typed over a scope of columns, the errors with
their positions (an AccessError for what the principal may not read)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from base.plan import (
    EVENT_TIME,
    RAW_STREAMS,
    BinOp,
    Col,
    Expr,
    Func,
    Lit,
    PlanError,
    Window,
    expr_type,
    operand_problem,
)
from base.smurf import DEFAULT_DELTA
from glue.catalog import Catalog, ExportedView
from glue.limits import Limits
from glue.logical_query import AggCall, Arbitration, EventPattern, LogicalQuery, RelationJoin, Smoothing
from glue.sql import ast
from glue.sql.lexer import Pos, SqlError
from glue.sql.parser import SCALAR_FUNCTIONS, TAG_ESTIMATES, parse
from glue.stream_join import BOUND_FORM, StreamJoin
from wire.errors import HiFiError
from wire.identity import SYSTEM, Identity
from wire.windows import duration_ms


def sql_error(message: str, pos: Pos) -> SqlError:
    return SqlError(message, pos.line, pos.column)


class AccessError(SqlError):
    """A query naming a stream or view its principal may not read (the API answers it as
    PERMISSION_DENIED, not as a malformed query)."""


def access_error(message: str, pos: Pos) -> AccessError:
    return AccessError(message, pos.line, pos.column)


class Binder:
    def __init__(self, catalog: Catalog, principal: str | Identity,
                 bind_view: Callable[[ast.Statement, Catalog, Identity, str], LogicalQuery]) -> None:
        self.catalog = catalog
        self.bind_view = bind_view   # how a definition-only view's text is bound (the analyzer's own)
        # a bare name has no roles: it reads what is exported to it by name or to everyone
        self.reader = principal if isinstance(principal, Identity) else Identity(principal, frozenset())
        self.principal = self.reader.principal

    # ------------------------------------------------------------ sources

    def duration(self, text: str, pos: Pos) -> int:
        value = self.catalog.parameter(text)
        try:
            return duration_ms(value if value is not None else text)
        except HiFiError:
            raise sql_error(f"cannot read duration {text!r} (e.g. '5 seconds', or a parameter name)", pos) from None

    def window(self, clause: ast.WindowClause | None) -> Window | None:
        if clause is None or clause.adaptive:
            return None
        range_ms = self.duration(clause.range, clause.range_pos)
        slide_ms = self.duration(clause.slide, clause.slide_pos or clause.pos) if clause.slide else range_ms
        if range_ms <= 0 or slide_ms <= 0 or slide_ms > range_ms:
            raise sql_error(f"window needs 0 < slide <= range (got range {range_ms} ms, slide {slide_ms} ms)",
                            clause.pos)
        Limits.from_parameters(self.catalog.parameters).check_window(range_ms, slide_ms, clause.pos)
        return Window(range_ms, slide_ms)

    def smoothing(self, clause: ast.WindowClause) -> Smoothing:
        epoch_ms = self.duration(clause.range, clause.range_pos)
        if epoch_ms <= 0:
            raise sql_error(f"an adaptive epoch must be positive (got {epoch_ms} ms)", clause.range_pos)
        Limits.from_parameters(self.catalog.parameters).check_window(epoch_ms, epoch_ms, clause.range_pos)
        delta = DEFAULT_DELTA if clause.delta is None else clause.delta
        if not 0 < delta < 1:
            raise sql_error(f"delta is the chance of missing a present tag: 0 < delta < 1 (got {delta:g})",
                       clause.delta_pos or clause.pos)
        return Smoothing(epoch_ms, delta)

    def is_stream_or_view(self, name: str) -> bool:
        return name in RAW_STREAMS or name in self.catalog.streams or bool(self.catalog.exports_of(name))

    def readable_exports(self, ref: ast.SourceRef) -> list[ExportedView]:
        """The exports of the view `ref` names that the reader may read. A view none of whose
        exports it may read is answered as a missing one (`_unknown`): the answer says nothing of
        whether it exists."""
        exports = self.catalog.exports_of(ref.name)
        readable = [v for v in exports if self.reader.may_read(v.readers)]
        if exports and not readable:
            raise self._unknown(ref)
        return readable

    def _unknown(self, ref: ast.SourceRef) -> SqlError:
        if self.principal in ("", "*", SYSTEM.principal):
            return sql_error(f"unknown stream or view {ref.name!r}", ref.pos)
        return sql_error(f"unknown stream or view {ref.name!r} (or a view not exported to {self.principal!r})", ref.pos)

    def source(self, ref: ast.SourceRef) -> tuple[dict[str, Any], Expr | None, tuple[str, ...] | None]:
        """(source facts, predicate of an expanded definition-only view, columns it exposes)."""
        streams = {**{name: raw.columns for name, raw in RAW_STREAMS.items()}, **self.catalog.streams}
        if ref.name in streams:
            readers = self.catalog.stream_readers.get(ref.name)
            if readers is not None and not self.reader.may_read(readers):
                raise access_error(f"stream {ref.name!r} is not readable by {self.principal!r} (its readers: "
                           f"{', '.join(readers)})", ref.pos)
            columns = tuple(tuple(c) for c in streams[ref.name])
            return {"source": ref.name, "source_kind": "stream", "source_columns": columns, "event_time": "ts",
                    "source_window": None}, None, None
        exports = self.readable_exports(ref)
        materialized = [v for v in exports if v.topic]
        if materialized:
            first = materialized[0]
            # a windowed view's rows are read by their window's start; an event view's (its
            # matches, without a window) by their end time
            event_time = EVENT_TIME if first.window is None and EVENT_TIME in dict(first.columns) else "window_start"
            return {"source": ref.name, "source_kind": "view", "source_columns": first.columns,
                    "event_time": event_time, "source_window": first.window}, None, None
        if exports:
            inner = self.bind_view(parse(exports[0].definition), self.catalog, self.reader, exports[0].definition)
            if inner.is_aggregate or inner.joins:
                raise sql_error(f"view {ref.name!r} is exported as a definition only and is not a plain selection",
                                ref.pos)
            facts = {"source": inner.source, "source_kind": inner.source_kind, "source_columns": inner.source_columns,
                     "event_time": inner.event_time, "source_window": inner.source_window}
            exposed = tuple(name for name, _ in inner.outputs) + (inner.event_time,)
            return facts, inner.predicate, exposed
        if ref.name in self.catalog.relations:
            raise sql_error(f"{ref.name!r} is a static relation; join it to a stream (JOIN {ref.name} USING (...))",
                       ref.pos)
        raise self._unknown(ref)

    # ------------------------------------------------------------ expressions

    def scalar(self, node: ast.Node, columns: dict[str, str], qualifiers: set[str],
               outer: dict[str, str] | None = None) -> Expr:
        if isinstance(node, ast.Literal):
            return Lit(node.value)
        if isinstance(node, ast.Name):
            qualified = f"{node.qualifier}.{node.name}"
            if qualified in columns:   # a joined input's column
                return Col(qualified)
            if node.qualifier is None and node.name not in columns:
                found = [name for name in columns if name.endswith("." + node.name)]
                if len(found) > 1:
                    raise sql_error(f"column {node.name!r} is ambiguous (in {', '.join(found)}): qualify it", node.pos)
                if found:
                    return Col(found[0])
            elif node.qualifier in qualifiers and any("." in name for name in columns):
                raise sql_error(f"unknown column {qualified!r}", node.pos)
            if node.qualifier is not None and node.qualifier not in qualifiers:
                if outer is not None and node.qualifier in outer:
                    return Col("__outer." + node.name)
                raise sql_error(f"unknown table or alias {node.qualifier!r}", node.pos)
            if node.name in columns:
                return Col(node.name)
            value = self.catalog.parameter(node.name) if node.qualifier is None else None
            if value is not None:
                return Lit(value)
            raise sql_error(f"unknown column {node.name!r} (available: {', '.join(columns)})", node.pos)
        if isinstance(node, ast.Binary):
            made = BinOp(node.op, self.scalar(node.left, columns, qualifiers, outer),
                         self.scalar(node.right, columns, qualifiers, outer))
            problem = bound_operand_problem(made, columns)
            if problem:
                raise sql_error(problem, node.pos)
            return made
        if isinstance(node, ast.Unary):
            return bind_unary(node, self.scalar(node.operand, columns, qualifiers, outer), columns)
        if isinstance(node, ast.InList):
            operand = self.scalar(node.operand, columns, qualifiers, outer)
            result: Expr | None = None
            for value in node.values:
                test = BinOp("=", operand, self.scalar(value, columns, qualifiers, outer))
                problem = bound_operand_problem(test, columns)
                if problem:
                    raise sql_error(f"IN: {problem}", getattr(value, "pos", node.pos))
                result = test if result is None else BinOp("OR", result, test)
            assert result is not None
            return Func("not", (result,)) if node.negated else result
        if isinstance(node, ast.Call) and node.name in SCALAR_FUNCTIONS and node.arg is not None:
            return text_function(node, self.scalar(node.arg, columns, qualifiers, outer), columns)
        if isinstance(node, ast.Call):
            raise sql_error(f"aggregate {node.name}() is not allowed here", node.pos)
        if isinstance(node, ast.Interval):
            raise sql_error(f"INTERVAL bounds the time between two joined inputs ({BOUND_FORM}), nothing else",
                       node.pos)
        raise sql_error("ALL (subquery) is only allowed in HAVING", node.pos)


def bind_unary(node: ast.Unary, operand: Expr, types: dict[str, str]) -> Expr:
    """NOT of a condition, or minus of a number: refused here, with its position, otherwise."""
    if node.op == "NOT":
        kind = type_here(operand, types)
        if kind not in (None, "boolean"):
            raise sql_error(f"NOT needs a condition (true or false); this is of type {kind}", node.pos)
        return Func("not", (operand,))
    made = BinOp("-", Lit(0), operand)
    problem = bound_operand_problem(made, types)
    if problem:
        raise sql_error(problem.replace("long - ", "-", 1), node.pos)
    return made


def text_function(node: ast.Call, arg: Expr, types: dict[str, str]) -> Func:
    """product() or indicator() of a text (an EPC URI): refused here, with its position, otherwise."""
    kind = type_here(arg, types)
    if kind not in (None, "string"):
        raise sql_error(f"{node.name}() reads a tag's text (an EPC URI); this is of type {kind}", node.pos)
    return Func(node.name, (arg,))


def output_types(scope: Scope) -> dict[str, str]:
    """The types of what an aggregate query's outputs are made of: its columns and its aggregates'
    values (as the final part computes them)."""
    types = dict(scope.columns)
    for call in scope.aggregates.values():
        column = scope.columns.get(call.column or "", "")
        types[call.name] = ("long" if call.fn in ("count", "count_distinct") else
                            "double" if call.fn == "avg" or call.fn in TAG_ESTIMATES else
                            ("long" if column == "int" else column) if call.fn == "sum" else column)
    return types


def bound_operand_problem(made: BinOp, columns: dict[str, str]) -> str | None:
    """Why a node could not evaluate `made` (base.plan.operand_problem), refused here with its
    position rather than by the part that runs it; None also when a side's type is not known
    here (a correlated subquery's outer column)."""
    try:
        return operand_problem(made.op, expr_type(made.left, columns), expr_type(made.right, columns))
    except PlanError:
        return None


def contains_aggregate(node: ast.Node) -> bool:
    if isinstance(node, ast.Call):
        return node.name not in SCALAR_FUNCTIONS or (node.arg is not None and contains_aggregate(node.arg))
    if isinstance(node, ast.Binary):
        return contains_aggregate(node.left) or contains_aggregate(node.right)
    if isinstance(node, ast.Unary):
        return contains_aggregate(node.operand)
    return isinstance(node, ast.CompareAll)


def agg_name(call: ast.Call, column: str | None) -> str:
    if call.name == "count" and column is None:
        return "count"
    column = column.replace(".", "_") if column else column   # a joined input's column: a.x -> a_x
    return f"{call.name}_distinct_{column}" if call.distinct else f"{call.name}_{column}"


@dataclass
class Scope:
    """What binding has learned so far: each pass reads it and adds its part."""

    select: ast.Select
    facts: dict[str, Any]                       # source, source_kind, source_columns, event_time, source_window
    columns: dict[str, str]                     # the names a row has at this point, with their types
    qualifiers: set[str]
    predicate: Expr | None = None
    joins: tuple[RelationJoin, ...] = ()
    window: Window | None = None
    smoothing: Smoothing | None = None
    derived: tuple[tuple[str, Expr], ...] = ()
    keys: tuple[str, ...] = ()
    aggregate_query: bool = False
    aggregates: dict[str, AggCall] = field(default_factory=dict)
    outputs: tuple[tuple[str, Expr], ...] = ()
    having: Expr | None = None
    arbitration: Arbitration | None = None
    pattern: EventPattern | None = None
    stream_join: StreamJoin | None = None
    changes: tuple[str, ...] | None = None


def type_here(expr: Expr, columns: dict[str, str]) -> str | None:
    """`expr`'s type, or None when a part of it is not known here (a correlated subquery's outer column)."""
    try:
        return expr_type(expr, columns)
    except PlanError:
        return None
