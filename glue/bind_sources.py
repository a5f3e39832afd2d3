"""The FROM clause bound to the catalog: a query's source (a stream or a view, a definition-only
view expanded), its lookup joins with relations, and a join of streams (its inputs, keys and time
bounds: glue.stream_join)."""

from __future__ import annotations

from dataclasses import replace

from base.plan import JOIN_TIME, BinOp, Col, Expr, Func, JoinBound, expr_columns, expr_type
from glue.binder import Binder, Scope, sql_error
from glue.logical_query import RelationJoin
from glue.sql import ast
from glue.stream_join import BOUND_FORM, JoinInput, StreamJoin, check_bounded, conjuncts_of, intervals_in, time_bound


def bind_source(binder: Binder, select: ast.Select) -> Scope:
    """The stream or view read (a definition-only view expanded: its predicate, its columns)."""
    facts, inner_predicate, exposed = binder.source(select.source)
    columns = dict(facts["source_columns"])
    if exposed is not None:
        columns = {name: kind for name, kind in columns.items() if name in exposed}
    qualifiers = {select.source.name, *([select.source.alias] if select.source.alias else [])}
    return Scope(select, facts, columns, qualifiers, inner_predicate)


def bind_joins(binder: Binder, scope: Scope) -> None:
    """JOIN <static relation> USING (column): the relation's other columns join each row; a join
    of streams or views (_bind_stream_join) otherwise."""
    if any(binder.is_stream_or_view(join.source.name) for join in scope.select.joins):
        _bind_stream_join(binder, scope)
        return
    joins = []
    for join in scope.select.joins:
        relation = binder.catalog.relations.get(join.source.name)
        if relation is None:
            raise sql_error(f"unknown static relation {join.source.name!r} (a join names a static relation, a stream "
                       f"or a view)", join.source.pos)
        if len(join.using) != 1:
            raise sql_error("a join with a static relation needs USING (one column)", join.pos)
        on = join.using[0]
        rel_columns = dict(relation.columns)
        if on not in scope.columns or on not in rel_columns:
            raise sql_error(f"join column {on!r} must be in both {scope.select.source.name!r} and {relation.name!r}",
                       join.pos)
        taken = tuple((n, k) for n, k in relation.columns if n != on and n not in scope.columns)
        joins.append(RelationJoin(relation.name, on, taken))
        scope.columns.update(dict(taken))
        scope.qualifiers |= {join.source.name, *([join.source.alias] if join.source.alias else [])}
    scope.joins = tuple(joins)


def _bind_stream_join(binder: Binder, scope: Scope) -> None:
    """FROM s a JOIN t b ON ... [WHERE ...]: the inputs, and their ON and WHERE conditions sorted
    (glue.stream_join) into each input's own, equal keys, time bounds and the rest, which the
    joined rows are filtered by. Joined rows have each input's columns as `<alias>.<column>` and
    `ts`, the newest of their rows' times; a window on the first source windows them."""
    select = scope.select
    refs = (select.source, *(join.source for join in select.joins))
    for join in select.joins:
        if join.source.name in binder.catalog.relations or join.using:
            raise sql_error("a join of streams takes no static relation or USING: join the relation in a view of "
                       "one input first, then join that view", join.pos)
        if join.source.window is not None:
            raise sql_error("the window of a join goes on its first source: it windows the joined rows",
                       join.source.window.pos)
    clause = select.source.window
    if clause is not None and (clause.adaptive or clause.sample or clause.approximate_pos):
        raise sql_error("a join's window is a plain [range by ..., slide by ...] over the joined rows", clause.pos)
    if select.pattern is not None:
        raise sql_error("an event pattern over joined streams is not supported: pattern over a view of the join",
                   select.pattern.pos)
    inputs, positions = [], {}
    for ref in refs:
        facts, inner_predicate, exposed = binder.source(ref)
        alias = ref.alias or ref.name
        if alias in positions:
            raise sql_error(f"{alias!r} names two inputs of the join: give each its own alias", ref.pos)
        columns = tuple(c for c in facts["source_columns"] if exposed is None or c[0] in exposed)
        inputs.append(JoinInput(alias, facts["source"], facts["source_kind"], columns, facts["event_time"],
                                facts["source_window"], inner_predicate))
        positions[alias] = ref.pos
    scope.columns = {f"{i.alias}.{name}": kind for i in inputs for name, kind in i.source_columns}
    scope.columns[JOIN_TIME] = "timestamp"
    scope.qualifiers = set(positions)
    own: dict[str, list[Expr]] = {alias: [] for alias in positions}
    keys: list[tuple[str, str]] = []
    bounds: list[JoinBound] = []
    rest: list[Expr] = []
    first_bound_pos = None
    times = {i.alias: i.event_time for i in inputs}
    for condition in [c for join in select.joins for c in conjuncts_of(join.on)] + conjuncts_of(select.where):
        bound = time_bound(condition, times, binder.duration)
        if bound is not None:
            bounds.append(bound)
            first_bound_pos = first_bound_pos or condition.pos   # type: ignore[union-attr]
            continue
        interval = next(intervals_in(condition), None)
        if interval is not None:
            raise sql_error(f"INTERVAL bounds the time between two joined inputs' times ({BOUND_FORM})", interval.pos)
        expr = binder.scalar(condition, scope.columns, scope.qualifiers)
        if expr_type(expr, scope.columns) != "boolean":
            raise sql_error("a join condition must be true or false", condition.pos)   # type: ignore[union-attr]
        used = {name.split(".", 1)[0] if "." in name else "" for name in expr_columns(expr)}
        if len(used) == 1 and "" not in used:
            own[used.pop()].append(_unqualified(expr))
        elif isinstance(expr, BinOp) and expr.op == "=" and isinstance(expr.left, Col) and \
                isinstance(expr.right, Col) and len(used) == 2 and "" not in used:
            keys.append((expr.left.name, expr.right.name))
        else:
            rest.append(expr)
    check_bounded(tuple(positions), tuple(bounds), positions, first_bound_pos)
    inputs = [replace(i, predicate=and_all(([i.predicate] if i.predicate else []) + own[i.alias]))
              for i in inputs]
    scope.stream_join = StreamJoin(tuple(inputs), tuple(keys), tuple(bounds))
    scope.predicate = and_all(rest)
    scope.facts = {"source": inputs[0].source, "source_kind": "join", "source_columns": tuple(scope.columns.items()),
                   "event_time": JOIN_TIME, "source_window": None}


def _unqualified(expr: Expr) -> Expr:
    """`expr` over one input's columns, named as that input names them."""
    if isinstance(expr, Col):
        return Col(expr.name.split(".", 1)[1]) if "." in expr.name else expr
    if isinstance(expr, BinOp):
        return BinOp(expr.op, _unqualified(expr.left), _unqualified(expr.right))
    if isinstance(expr, Func):
        return Func(expr.name, tuple(_unqualified(a) for a in expr.args))
    return expr


def and_all(terms: list[Expr]) -> Expr | None:
    result: Expr | None = None
    for term in terms:
        result = term if result is None else BinOp("AND", result, term)
    return result
