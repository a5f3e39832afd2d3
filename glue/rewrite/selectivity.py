"""Predicate order by selectivity (SENSABLE): the terms of a sensor query's WHERE, the most
selective first, each estimated from its motes' own histograms of recent values (wire.histogram,
in the catalog from the MDR). Pure.

The shared runtime evaluates a filter term by term on the rows the earlier terms kept
(dsp.operators.rowwise.FilterOp), so the most selective first does the least work; the answer is the same
in any order. A term the histograms cannot estimate keeps its written place after the estimated ones.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

from base.plan import SAMPLE_QUANTITIES, BinOp, Col, Expr, Func, Lit, conjuncts, expr_columns, plain_comparison
from glue.catalog import Catalog
from glue.logical_query import LogicalQuery
from glue.reference import evaluate_expr
from wire import histogram


@dataclass(frozen=True)
class Estimate:
    term: Expr
    share: float | None   # of the motes' recent samples it keeps; None: not estimable

    def describe(self) -> str:
        return f"{expr_sql(self.term)} ~{self.share:.2f}" if self.share is not None else \
            f"{expr_sql(self.term)} (no estimate)"


def order_terms(query: LogicalQuery, catalog: Catalog) -> tuple[LogicalQuery, list[Estimate]]:
    """`query` with its WHERE's terms in the order to evaluate them, and each term's estimate (a
    query not over sensor_stream, without terms, or with none estimable, as it is)."""
    terms = conjuncts(query.predicate)
    if query.source != "sensor_stream" or not terms:
        return query, []
    motes = [r.id for r in catalog.receptors if r.kind == "mote" and all(
        evaluate_expr(t, {"receptor_id": r.id}) is True for t in terms if expr_columns(t) == {"receptor_id"})]
    estimates = [Estimate(term, estimate(term, catalog, motes)) for term in terms]
    if all(e.share is None for e in estimates):   # no history yet: as written, nothing to explain
        return query, []
    ordered = sorted(estimates, key=lambda e: (e.share is None, e.share or 0.0))   # stable: ties as written
    predicate = functools.reduce(lambda a, b: BinOp("AND", a, b), (e.term for e in ordered))
    return replace(query, predicate=predicate), ordered


def estimate(term: Expr, catalog: Catalog, motes: list[str]) -> float | None:
    """The share of the motes' recent samples `term` keeps, by their histograms (each mote weighed
    by its samples); terms of terms assumed independent."""
    if isinstance(term, Func) and term.name == "not":
        inner = estimate(term.args[0], catalog, motes)
        return None if inner is None else 1.0 - inner
    if isinstance(term, BinOp) and term.op in ("AND", "OR"):
        left, right = estimate(term.left, catalog, motes), estimate(term.right, catalog, motes)
        if left is None or right is None:
            return None
        return left * right if term.op == "AND" else left + right - left * right
    comparison = plain_comparison(term)
    if comparison is None or not isinstance(comparison[0], Col) or not isinstance(comparison[2], Lit):
        return None
    left, op, right = comparison
    if left.name == "receptor_id":
        return sum(evaluate_expr(term, {"receptor_id": m}) is True for m in motes) / len(motes) if motes else None
    if left.name not in SAMPLE_QUANTITIES or not isinstance(right.value, int | float) or isinstance(right.value, bool):
        return None
    kept = total = 0.0
    for mote in motes:
        counts = catalog.histograms.get((mote, left.name))
        share = histogram.fraction(counts, left.name, op, float(right.value)) if counts else None
        if share is not None:
            kept, total = kept + share * sum(counts), total + sum(counts)
    return kept / total if total else None


def expr_sql(expr: Expr) -> str:
    """An expression as HiFi SQL (for explanations)."""
    if isinstance(expr, Col):
        return expr.name
    if isinstance(expr, Lit):
        value = expr.value
        if value is None:
            return "NULL"
        return repr(value) if isinstance(value, str) else f"{value:g}" if isinstance(value, float) else str(value)
    if isinstance(expr, Func):
        if expr.name == "not":
            return f"NOT ({expr_sql(expr.args[0])})"
        return f"{expr.name}({', '.join(expr_sql(a) for a in expr.args)})"
    inner = f"{expr_sql(expr.left)} {expr.op} {expr_sql(expr.right)}"
    return f"({inner})" if expr.op in ("AND", "OR") else inner
