"""Rewrite rule: answer a producer's pane partials from a running view that subsumes them. Pure.

A producer computes partial aggregates per pane over its node's selection of a source:

    Aggregate(Filter(<source, joined>, p1 AND p2 AND ...), keys, partials, pane)

A view already running on that node, `Aggregate(Filter(<the same source and joins>, q1 AND ...),
keys', partials', pane')`, holds everything the producer needs when

- its conjuncts are among the producer's (the producer keeps a subset of its rows), and the
  producer's other conjuncts read only the view's grouping columns (they can be applied to it);
- its grouping is finer (keys ⊆ keys') and its panes divide the producer's (both aligned to the
  epoch, so each of its panes lies in one of the producer's);
- every partial the producer needs is one of its partials (the same function of the same column),
  which rolls up: counts and sums by sum, min by min, max by max, sets by union.

The producer then reads the view's rows instead of the source: a filter and a rollup over partials
already computed, instead of evaluating its aggregates over every row again. An equal plan is
reused as it is (glue.rewrite.distribute names views by plan hash); this rule covers the rest.
"""

from __future__ import annotations

from collections.abc import Iterable

from base.plan import Aggregate, AggSpec, BinOp, Expr, Filter, Plan, Source, conjuncts, expr_columns
from base.plan_schema import output_columns
from glue.catalog import ExportedView

ROLLUP = {"count": "sum", "sum": "sum", "min": "min", "max": "max", "collect_set": "union_sets"}


def _selection(plan: Plan) -> tuple[Plan, list[Expr]]:
    """(the joined source, the conjuncts of the filter above it) of a producer's input."""
    if isinstance(plan, Filter):
        return plan.child, conjuncts(plan.predicate)
    return plan, []


def _and(exprs: list[Expr]) -> Expr | None:
    result: Expr | None = None
    for expr in exprs:
        result = expr if result is None else BinOp("AND", result, expr)
    return result


def rollup_from(wanted: Aggregate, view: ExportedView) -> Aggregate | None:
    """`wanted` computed from `view`'s rows, or None when the view does not subsume it."""
    running = view.plan
    if not (isinstance(running, Aggregate) and running.having is None and running.window is not None
            and wanted.having is None and wanted.window is not None and view.topic):
        return None
    base, wanted_terms = _selection(wanted.child)
    running_base, running_terms = _selection(running.child)
    if base != running_base or any(term not in wanted_terms for term in running_terms):
        return None
    residual = [term for term in wanted_terms if term not in running_terms]
    grouping = set(running.keys)
    if not set(wanted.keys) <= grouping or any(not expr_columns(term) <= grouping for term in residual):
        return None
    pane, running_pane = wanted.window, running.window
    if pane.range_ms != pane.slide_ms or running_pane.range_ms != running_pane.slide_ms \
            or pane.range_ms % running_pane.range_ms:
        return None
    held = {(spec.fn, spec.column, spec.by): spec.name for spec in running.aggregates}
    rollups = []
    for spec in wanted.aggregates:
        name = held.get((spec.fn, spec.column, spec.by))
        if name is None or spec.fn not in ROLLUP:
            return None
        rollups.append(AggSpec(spec.name, ROLLUP[spec.fn], name))
    rows: Plan = Source((view.topic,), "rows", tuple(output_columns(running)), "window_start", 0, True, running_pane)
    kept = _and(residual)
    if kept is not None:
        rows = Filter(rows, kept)
    return Aggregate(rows, wanted.keys, tuple(rollups), None, pane)


def subsuming(wanted: Plan, node: str, views: Iterable[ExportedView]) -> tuple[Aggregate, ExportedView] | None:
    """The first running view on `node` that subsumes the producer plan `wanted`, with the plan
    that reads it (coarsest panes first: the fewest rows to roll up)."""
    if not isinstance(wanted, Aggregate):
        return None
    candidates = sorted((v for v in views if v.node == node and v.plan is not None),
                        key=lambda v: -(v.plan.window.range_ms if isinstance(v.plan, Aggregate) and v.plan.window
                                        else 0))
    for view in candidates:
        plan = rollup_from(wanted, view)
        if plan is not None:
            return plan, view
    return None
