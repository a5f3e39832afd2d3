"""Bind a parsed HiFi SQL statement to the catalog: names resolved, parameters substituted,
windows in milliseconds, aggregates collected. The result, a LogicalQuery, is what placement,
rewriting and the reference evaluator work on. Pure.

Reading of the language (DESIGN §6):
- A windowed source `[range by 'R', slide by 'S']` assigns each row to every window
  [s, s + R) with s a multiple of S (windows aligned to the epoch) that holds its event time;
  tumbling when the slide is omitted. The event time of a raw stream is `ts`; a row of a
  windowed view is stamped with its `window_start`.
- An aggregate query needs a window on its source (or a windowed view as its source, whose
  window it then keeps); its output rows carry `window_start` and `window_end`.
- A definition-only view (exported with no topic) is expanded into the query that names it.
- `[adaptive epoch 'E', delta D]` reads RFID readings (those WHERE keeps) through per-tag adaptive
  smoothing (base.smurf): the query then sees one row per receptor, tag and epoch in which the tag
  is present — window_start, window_end, receptor_id, tag_id, reads (in the tag's window) and
  epochs (its length) — and aggregates over it as over a view of 'E' windows.
- The arbitration form `HAVING count(*) >= ALL (SELECT count(*) FROM <same source> WHERE k =
  alias.k GROUP BY c)` assigns each k, per window, to the c with the most rows (ties: the
  smallest c); the select list is then computed per c over the k it won. So the paper's
  `product_counts` counts each tag once per window, at the receptor that read it most.
"""

from __future__ import annotations

from base.plan import (
    RAW_STREAMS,
    SMOOTH_COLUMNS,
    BinOp,
    Col,
    Expr,
    Func,
    Lit,
    MatchStep,
    Window,
    expr_type,
)
from glue.bind_sources import bind_joins, bind_source
from glue.binder import (
    Binder,
    Scope,
    agg_name,
    bind_unary,
    bound_operand_problem,
    contains_aggregate,
    output_types,
    sql_error,
    text_function,
    type_here,
)
from glue.catalog import INTERNAL_VIEW_NAME, Catalog
from glue.limits import Limits
from glue.logical_query import AggCall, Arbitration, EventPattern, LogicalQuery
from glue.sql import ast
from glue.sql.parser import SCALAR_FUNCTIONS, TAG_ESTIMATES, parse
from wire.identity import SYSTEM, Identity


def _bind_where(binder: Binder, scope: Scope) -> None:
    """WHERE, after an expanded view's own predicate (a stream join sorted it already)."""
    if scope.select.where is not None and scope.stream_join is None:
        where = binder.scalar(scope.select.where, scope.columns, scope.qualifiers)
        _condition(where, scope.columns, "WHERE", scope.select.where)
        scope.predicate = where if scope.predicate is None else BinOp("AND", scope.predicate, where)


def _bind_window(binder: Binder, scope: Scope) -> None:
    """The source's window, or adaptive smoothing: the rest of the query then sees the smoothed
    stream, one row per receptor, tag and epoch in which the tag is present (like a view's rows)."""
    select = scope.select
    scope.window = binder.window(select.source.window)
    clause = select.source.window
    if clause is not None and clause.sample is not None:
        assert clause.sample_pos is not None
        if scope.facts["source"] != "sensor_stream":
            raise sql_error(f"sample every is for sensor_stream (its motes sample on a period), not "
                       f"{select.source.name!r}", clause.sample_pos)
        sample_ms = binder.duration(clause.sample, clause.sample_pos)
        if sample_ms <= 0:
            raise sql_error("sample every needs a positive period", clause.sample_pos)
        scope.facts = {**scope.facts, "sample_ms": sample_ms}
    if clause is not None and clause.approximate_pos is not None:
        scope.facts = {**scope.facts, "approximate": True}
    if select.source.window is None or not select.source.window.adaptive:
        return
    if scope.facts["source_kind"] != "stream" or not {"receptor_id", "tag_id"} <= set(scope.columns):
        raise sql_error(f"adaptive smoothing reads RFID readings (rfid_stream, or a selection of it such as "
                   f"cleaned_rfid_stream), not {select.source.name!r}", select.source.window.pos)
    for join, clause in zip(scope.joins, select.joins, strict=True):
        if join.on not in dict(SMOOTH_COLUMNS):
            raise sql_error(f"after adaptive smoothing a join can use {', '.join(dict(SMOOTH_COLUMNS))}, "
                       f"not {join.on!r}", clause.pos)
    scope.smoothing = binder.smoothing(select.source.window)
    scope.columns = {**dict(SMOOTH_COLUMNS), **{name: kind for join in scope.joins for name, kind in join.columns}}
    scope.facts = {**scope.facts, "event_time": "window_start",
                   "source_window": Window(scope.smoothing.epoch_ms, scope.smoothing.epoch_ms)}


def _bind_pattern(binder: Binder, scope: Scope) -> None:
    """PATTERN ... DEFINE ...: the steps with their conditions over a row, the bound, the
    partition, and the select list as (step, column) of the matched rows."""
    select, clause = scope.select, scope.select.pattern
    if clause is None:
        return
    if select.group_by or select.having is not None or select.source.window is not None or \
            any(contains_aggregate(i.expr) for i in select.items):
        raise sql_error("an event pattern takes no window, aggregate, GROUP BY or HAVING: its matches are its rows "
                   "(a view over its matches can aggregate them)", clause.pos)
    defined: dict[str, Expr] = {}
    for define in clause.defines:
        if define.name in defined:
            raise sql_error(f"step {define.name!r} is defined twice", define.pos)
        condition = binder.scalar(define.condition, scope.columns, scope.qualifiers)
        if expr_type(condition, scope.columns) != "boolean":
            raise sql_error(f"DEFINE {define.name} AS <a condition on one row>", define.pos)
        defined[define.name] = condition
    used: list[str] = []
    steps = []
    for n, step in enumerate(clause.steps):
        for name in step.names:
            if name not in defined:
                raise sql_error(f"unknown step {name!r}: DEFINE {name} AS <condition>", step.pos)
            if name in used:
                raise sql_error(f"step {name!r} appears twice in the pattern", step.pos)
            used.append(name)
        if step.negated and n == 0:
            raise sql_error(f"a pattern cannot begin with NOT {step.names[0]}: nothing bounds what it forbids "
                       f"(begin with the step it follows)", step.pos)
        steps.append(MatchStep(step.names, tuple(defined[name] for name in step.names), step.negated))
    unused = [d for d in clause.defines if d.name not in used]
    if unused:
        raise sql_error(f"step {unused[0].name!r} is defined but not in the pattern", unused[0].pos)
    if clause.within is None and any(s.negated for s in steps):
        raise sql_error("a pattern with NOT needs WITHIN '<duration>': the time in which the negated step must not "
                   "happen", clause.pos)
    within_ms = binder.duration(clause.within, clause.within_pos or clause.pos) if clause.within else 0
    if clause.within is not None and within_ms <= 0:
        raise sql_error(f"WITHIN must be positive (got {within_ms} ms)", clause.within_pos or clause.pos)
    partition = tuple(binder.scalar(name, scope.columns, scope.qualifiers).name  # type: ignore[union-attr]
                      for name in clause.partition)
    outputs: list[tuple[str, str, str]] = []
    for item in select.items:
        node = item.expr
        if not isinstance(node, ast.Name) or (node.qualifier is None and node.name not in partition) or \
                (node.qualifier is not None and node.qualifier not in used):
            raise sql_error("an event pattern selects <step>.<column> (or a PARTITION BY column)", item.pos)
        if node.name not in scope.columns:
            raise sql_error(f"unknown column {node.name!r} (available: {', '.join(scope.columns)})", node.pos)
        if node.qualifier is not None and any(s.negated and node.qualifier in s.names for s in steps):
            raise sql_error(f"step {node.qualifier!r} is negated: no row of it is in a match", node.pos)
        name = item.alias or node.name
        if any(name == existing for existing, _, _ in outputs):
            raise sql_error(f"two output columns are named {name!r}; use AS to rename one", item.pos)
        outputs.append((name, node.qualifier or "", node.name))
    if not outputs:
        raise sql_error("an event pattern selects <step>.<column>, ... (not *)", select.pos)
    scope.pattern = EventPattern(tuple(steps), within_ms, partition, tuple(outputs))
    scope.outputs = tuple((name, Col(name)) for name, _, _ in outputs)


def _bind_grouping(binder: Binder, scope: Scope) -> None:
    """GROUP BY (an alias of a scalar select item is a column computed from each row first), and
    the window an aggregate groups in: its own, or that of the windowed view it reads."""
    select = scope.select
    if scope.pattern is not None:
        return
    derived: list[tuple[str, Expr]] = []
    for name in select.group_by:
        item = next((i for i in select.items if i.alias == name.name and name.name not in scope.columns), None)
        if item is not None and not contains_aggregate(item.expr):
            expr = binder.scalar(item.expr, scope.columns, scope.qualifiers)
            derived.append((name.name, expr))
            scope.columns[name.name] = expr_type(expr, scope.columns)
    scope.derived = tuple(derived)
    scope.keys = tuple(binder.scalar(name, scope.columns, scope.qualifiers).name  # type: ignore[union-attr]
                       for name in select.group_by)
    scope.aggregate_query = bool(scope.keys) or any(contains_aggregate(i.expr) for i in select.items) or \
        select.having is not None
    source_window: Window | None = scope.facts["source_window"]
    if scope.aggregate_query and scope.window is None:
        if source_window is None and scope.stream_join is not None:
            raise sql_error(f"an aggregate over a join needs a window on its first source: {select.source.name} "
                       f"{select.source.alias or ''} [range by '5 seconds'] JOIN ...", select.source.pos)
        if source_window is None:
            raise sql_error(f"an aggregate over stream {select.source.name!r} needs a window: "
                       f"{select.source.name} [range by '5 seconds']", select.source.pos)
        scope.window = source_window
    window = scope.window
    if window is not None and source_window is not None and (
            window.range_ms % source_window.slide_ms or window.slide_ms % source_window.slide_ms):
        raise sql_error(f"window {window.describe()} cannot be derived from view {select.source.name!r}, whose "
                   f"rows are {source_window.describe()} windows (use multiples of "
                   f"{source_window.slide_ms / 1000:g}s)", select.source.window.pos if select.source.window
                   else select.source.pos)
    if not scope.aggregate_query:
        scope.window = None


def _bind_output(binder: Binder, scope: Scope, node: ast.Node) -> Expr:
    """An expression of an aggregate query's select list or HAVING: over keys and aggregates
    (each aggregate call collected once, by name)."""
    computed = next((alias for alias, expr in ((i.alias, i.expr) for i in scope.select.items
                                                 if i.alias in dict(scope.derived)) if expr == node), None)
    if computed is not None:
        return Col(computed)
    if isinstance(node, ast.Call) and node.name in SCALAR_FUNCTIONS and node.arg is not None:
        return text_function(node, _bind_output(binder, scope, node.arg), output_types(scope))
    if isinstance(node, ast.Call):
        column = None
        if node.arg is not None:
            if not isinstance(node.arg, ast.Name):
                raise sql_error(f"the argument of {node.name}() must be a column", node.pos)
            column = binder.scalar(node.arg, scope.columns, scope.qualifiers).name  # type: ignore[union-attr]
            if node.name in ("sum", "avg") and scope.columns[column] not in ("int", "long", "double"):
                raise sql_error(f"{node.name}({column}) needs a numeric column ({column} is {scope.columns[column]})",
                           node.pos)
        fn = "count_distinct" if node.distinct and node.name == "count" else node.name
        if node.distinct and node.name != "count":
            raise sql_error(f"DISTINCT is supported in count() only, not {node.name}()", node.pos)
        if fn in TAG_ESTIMATES:
            call = AggCall(agg_name(node, column), fn, _reads_of(scope, column, node))
            scope.aggregates.setdefault(call.name, call)
            return Col(call.name)
        call = AggCall(agg_name(node, column), fn, column)
        scope.aggregates.setdefault(call.name, call)
        return Col(call.name)
    if isinstance(node, ast.Name):
        bound = binder.scalar(node, scope.columns, scope.qualifiers)
        if isinstance(bound, Col) and bound.name not in scope.keys:
            raise sql_error(f"column {bound.name!r} must appear in GROUP BY or inside an aggregate", node.pos)
        return bound
    if isinstance(node, ast.Binary):
        made = BinOp(node.op, _bind_output(binder, scope, node.left), _bind_output(binder, scope, node.right))
        problem = bound_operand_problem(made, output_types(scope))
        if problem:
            raise sql_error(problem, node.pos)
        return made
    if isinstance(node, ast.Unary):
        return bind_unary(node, _bind_output(binder, scope, node.operand), output_types(scope))
    if isinstance(node, ast.Literal):
        return Lit(node.value)
    return binder.scalar(node, scope.columns, scope.qualifiers)


def _reads_of(scope: Scope, tag: str | None, node: ast.Call) -> str:
    """The column of each row's read (base.tag_count.read_key: receptor, cycle, tag) a tag
    estimate counts, computed from each row beside the grouping columns (the partials are sets of
    reads, combined across children as count(DISTINCT) is)."""
    time = scope.facts["event_time"]
    if tag is None or scope.columns[tag] != "string":
        raise sql_error(f"{node.name}() counts tags: give it the tag column (tag_id)", node.pos)
    if scope.columns.get("receptor_id") != "string" or time == "window_start":
        raise sql_error(f"{node.name}() estimates from each reader's read cycles: it reads readings with their "
                   "receptor_id and time (rfid_stream, or a view of its rows), not windows", node.pos)
    name = f"__reads_{tag.replace('.', '_')}"
    if name not in dict(scope.derived):
        scope.derived += ((name, Func("read_key", (Col("receptor_id"), Func("epoch_ms", (Col(time),)), Col(tag)))),)
        scope.columns[name] = "string"
    return name


def _bind_select_list(binder: Binder, scope: Scope) -> None:
    """The select list (`*` when empty), each item named."""
    select = scope.select
    if scope.pattern is not None:
        return
    outputs: list[tuple[str, Expr]] = []
    if scope.stream_join is not None and not select.items:
        raise sql_error("a join selects its columns by name (a.column, b.column ...): * would name columns twice",
                   select.pos)
    items = select.items or tuple(ast.SelectItem(ast.Name(n, None, select.pos), None, select.pos)
                                  for n in scope.columns
                                  if n not in ("window_start", "window_end") or not scope.aggregate_query)
    for item in items:
        expr = _bind_output(binder, scope, item.expr) if scope.aggregate_query else \
            binder.scalar(item.expr, scope.columns, scope.qualifiers)
        name = item.alias or (expr.name.split(".")[-1] if isinstance(expr, Col) else None)   # a.x is named x
        if name is None:
            raise sql_error("give this expression a name: <expression> AS name", item.pos)
        if any(name == existing for existing, _ in outputs):
            raise sql_error(f"two output columns are named {name!r}; use AS to rename one", item.pos)
        if scope.aggregate_query and name in ("window_start", "window_end") and expr != Col(name):
            raise sql_error(f"{name} is a column every window's row has already; name this one otherwise", item.pos)
        outputs.append((name, expr))
    scope.outputs = tuple(outputs)


def _bind_having(binder: Binder, scope: Scope) -> None:
    """HAVING: a condition over keys and aggregates, or the arbitration form (ALL subquery)."""
    select = scope.select
    if select.having is None:
        return
    if isinstance(select.having, ast.CompareAll):
        scope.arbitration = _arbitration(select, select.having, scope.keys, binder, scope.columns, scope.qualifiers)
        scope.keys = tuple(k for k in scope.keys if k != scope.arbitration.by)
    else:
        scope.having = _bind_output(binder, scope, select.having)
        _condition(scope.having, output_types(scope), "HAVING", select.having)


def _condition(expr: Expr, columns: dict[str, str], clause: str, node: ast.Node) -> None:
    """A WHERE or HAVING is true or false for each row: refused here, with its position, when it is not."""
    kind = type_here(expr, columns)
    if kind not in (None, "boolean"):
        raise sql_error(f"{clause} needs a condition (true or false); this is of type {kind}", node.pos)


def _bind_changes(binder: Binder, scope: Scope) -> None:
    """EMIT CHANGES [BY col, ...]: over windowed rows only (a pattern's matches are events each).
    The key is the BY columns, else the GROUP BY keys, else the select list's text columns."""
    clause = scope.select.changes
    if clause is None:
        return
    windowed = scope.window is not None or scope.smoothing is not None or scope.facts.get("source_window")
    if scope.pattern is not None or not windowed:
        raise sql_error("EMIT CHANGES is for windowed rows (a windowed aggregate, or a view's windows): a pattern's "
                   "or a selection's rows are events each", clause.pos)
    if not scope.aggregate_query:   # a key's windows are what change: its rows carry them
        bounds = tuple((name, Col(name)) for name in ("window_start", "window_end")
                       if name not in dict(scope.outputs) and name in scope.columns)
        scope.outputs = (*bounds, *scope.outputs)
    names = [name for name, _ in scope.outputs]
    for by in clause.by:
        if by.qualifier is not None or by.name not in names or by.name in ("window_start", "window_end"):
            raise sql_error(f"EMIT CHANGES BY {by.name}: not a column of the select list (window bounds are not keys)",
                       by.pos)
    if clause.by:
        scope.changes = tuple(by.name for by in clause.by)
    elif scope.aggregate_query:
        missing = [key for key in scope.keys if key not in names]
        if missing:
            raise sql_error(f"EMIT CHANGES: GROUP BY {missing[0]} is not selected; select it or say EMIT CHANGES BY",
                       clause.pos)
        scope.changes = scope.keys
    else:
        scope.changes = tuple(name for name, expr in scope.outputs if name not in ("window_start", "window_end")
                              and expr_type(expr, scope.columns) == "string")


# The binding passes, in order: each one reads what the earlier ones bound.
PASSES = (bind_joins, _bind_where, _bind_window, _bind_pattern, _bind_grouping, _bind_select_list, _bind_having,
          _bind_changes)


def analyze_statement(statement: ast.Statement, catalog: Catalog, principal: str | Identity = SYSTEM,
                      text: str = "") -> LogicalQuery:
    view_name = statement.name if isinstance(statement, ast.CreateView) else None
    select = statement.select if isinstance(statement, ast.CreateView) else statement
    binder = Binder(catalog, principal, analyze_statement)
    scope = bind_source(binder, select)
    for bind in PASSES:
        bind(binder, scope)
    if scope.facts.get("approximate"):
        _check_approximate(scope)
    return LogicalQuery(text=text, window=scope.window, joins=scope.joins, predicate=scope.predicate,
                        keys=scope.keys, aggregates=tuple(scope.aggregates.values()), having=scope.having,
                        outputs=scope.outputs, arbitration=scope.arbitration, view_name=view_name,
                        smoothing=scope.smoothing, derived=scope.derived, pattern=scope.pattern,
                        stream_join=scope.stream_join, changes=scope.changes, **scope.facts)


def _check_approximate(scope: Scope) -> None:
    """`approximate` annotates windows of counts and sums (dsp.operators, Data Triage)."""
    clause = scope.select.source.window
    assert clause is not None and clause.approximate_pos is not None
    first = next(iter(scope.aggregates.values()), None)
    if not scope.aggregate_query or scope.pattern is not None or scope.arbitration is not None:
        raise sql_error("approximate is for windowed aggregates (their windows say whether they were triaged)",
                   clause.approximate_pos)
    if first is None or first.fn not in ("count", "sum"):
        raise sql_error(f"approximate bounds the error of the first aggregate, which must be a count or a sum "
                   f"(not {first.fn if first else 'none'})", clause.approximate_pos)


def _arbitration(select: ast.Select, having: ast.CompareAll, keys: tuple[str, ...], binder: Binder,
                 columns: dict[str, str], qualifiers: set[str]) -> Arbitration:
    sub = having.subquery
    shape = ("HAVING count(*) >= ALL (SELECT count(*) FROM <the same source> WHERE <column> = <alias>.<column> "
             "GROUP BY <column>), or sum(<numeric column>) on both sides")
    measure = having.left
    if not (having.op == ">=" and isinstance(measure, ast.Call) and not measure.distinct
            and (measure.name, measure.arg is None) in (("count", True), ("sum", False))
            and sub.source.name == select.source.name and len(sub.group_by) == 1
            and isinstance(sub.where, ast.Binary) and sub.where.op == "="):
        raise sql_error(f"the only ALL form supported is the arbitration form: {shape}", having.pos)
    sub_measure = sub.items[0].expr if len(sub.items) == 1 else None
    if not (isinstance(sub_measure, ast.Call) and sub_measure.name == measure.name
            and _column_name(sub_measure.arg) == _column_name(measure.arg)):
        raise sql_error(f"the arbitration subquery must select the same measure as HAVING: {shape}", sub.pos)
    weight = _column_name(measure.arg)
    if weight is not None and columns.get(weight) not in ("int", "long", "double"):
        raise sql_error(f"arbitration weighs rows by a numeric column ({weight!r} is {columns.get(weight, 'unknown')})",
                   measure.pos)
    sub_qualifiers = {sub.source.name, *([sub.source.alias] if sub.source.alias else [])}
    outer_names = {q: "" for q in qualifiers}
    sides = [binder.scalar(side, columns, sub_qualifiers, outer_names) for side in (sub.where.left, sub.where.right)]
    inner = [s for s in sides if isinstance(s, Col) and not s.name.startswith("__outer.")]
    outer = [s for s in sides if isinstance(s, Col) and s.name.startswith("__outer.")]
    if len(inner) != 1 or len(outer) != 1 or inner[0].name != outer[0].name.removeprefix("__outer."):
        raise sql_error(f"the arbitration subquery must correlate one column with the outer query: {shape}", sub.pos)
    by = inner[0].name
    winner = binder.scalar(sub.group_by[0], columns, sub_qualifiers).name  # type: ignore[union-attr]
    if set(keys) != {by, winner}:
        raise sql_error(f"arbitration groups by ({winner}, {by}); GROUP BY must name exactly those", select.pos)
    if binder.window(sub.source.window) != binder.window(select.source.window):
        raise sql_error("the arbitration subquery must use the outer query's window", sub.source.pos)
    return Arbitration(by, winner, weight)


def _column_name(node: ast.Node | None) -> str | None:
    return node.name if isinstance(node, ast.Name) else None


def refuse_taken_view_name(statement: ast.Statement, catalog: Catalog, reader: Identity | None = None) -> None:
    """A new view (CREATE VIEW) may not take a name in use: a view exported anywhere (whoever may
    read it: a view open to all must not shadow a protected one), a stream or a static relation.
    Where a taken name's views are exported is said only to a `reader` who may read one of them."""
    if not isinstance(statement, ast.CreateView):
        return
    name, pos = statement.name, statement.name_pos or statement.pos
    exports = catalog.exports_of(name)
    if exports and (reader is None or any(reader.may_read(v.readers) for v in exports)):
        holders = sorted({v.node for v in exports})
        raise sql_error(f"a view named {name!r} already exists (exported at {', '.join(holders)}); view names are "
                   f"unique, so choose another", pos)
    if exports:
        raise sql_error(f"the view name {name!r} is taken; view names are unique, so choose another", pos)
    if INTERNAL_VIEW_NAME.fullmatch(name):
        raise sql_error(f"{name!r} is a name of the form the planner gives the partial streams it exports; "
                   f"choose another view name", pos)
    if name in RAW_STREAMS or name in catalog.streams or name in catalog.relations:
        raise sql_error(f"{name!r} is the name of a {'static relation' if name in catalog.relations else 'stream'}; "
                   f"choose another view name", pos)


def analyze(text: str, catalog: Catalog, principal: str | Identity = SYSTEM) -> LogicalQuery:
    """Parse and bind one statement as `principal` reads (a name, or an identity with roles: it
    reads only the streams and views whose readers admit it; by default the deployment itself,
    which reads everything: the API passes its caller); SqlError names the position and the
    problem, also for a query over the admission limits (glue.limits) of the catalog's parameters."""
    return analyze_statement(parse(text, Limits.from_parameters(catalog.parameters)), catalog, principal, text)
