"""Rewrite rule: a query's scope and its root (DESIGN §7, placement). Pure.

The scope is the set of receptors a query can touch: top-level conjuncts of its predicate that
pin `receptor_id`, `location` or `area` to constants (=, IN) narrow it, through the receptors
of the catalog. Its producers are the nodes that hold its source for those receptors (the edge
nodes for a raw stream, the exporting nodes for a view); the root is their lowest common ancestor,
and only the root's subtree on the way to the producers does any work.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from base.plan import RAW_STREAMS, BinOp, Col, Expr, Lit, conjuncts
from glue.catalog import Catalog
from glue.logical_query import LogicalQuery
from glue.rewrite.join_inputs import input_query
from glue.sql.lexer import SqlError

SCOPE_COLUMNS = ("receptor_id", "location", "area")


@dataclass(frozen=True)
class Placement:
    root: str
    producers: tuple[str, ...]      # nodes that read the source
    receptors: tuple[str, ...]      # receptors in scope ("*" for a source not tied to receptors)

    def path_nodes(self, catalog: Catalog) -> set[str]:
        """Every node between the root and a producer (both included)."""
        nodes: set[str] = set()
        for producer in self.producers:
            for node in catalog.ancestors(producer):
                nodes.add(node)
                if node == self.root:
                    break
        return nodes


def _pinned(expr: Expr) -> tuple[str, set[str]] | None:
    """(column, values) when `expr` is column = constant, or an OR of those on one column."""
    if isinstance(expr, BinOp) and expr.op == "=":
        for col, lit in ((expr.left, expr.right), (expr.right, expr.left)):
            if isinstance(col, Col) and isinstance(lit, Lit) and col.name in SCOPE_COLUMNS:
                return col.name, {str(lit.value)}
    if isinstance(expr, BinOp) and expr.op == "OR":
        left, right = _pinned(expr.left), _pinned(expr.right)
        if left and right and left[0] == right[0]:
            return left[0], left[1] | right[1]
    return None


def scope_receptors(query: LogicalQuery, catalog: Catalog) -> list[str]:
    chosen = {r.id for r in catalog.receptors}
    if query.source_kind == "stream" and query.source in RAW_STREAMS:   # the receptors whose records it holds
        kind = RAW_STREAMS[query.source].receptor_kind
        chosen = {r.id for r in catalog.receptors if r.kind == kind or not kind}
    for conjunct in conjuncts(query.predicate):
        pinned = _pinned(conjunct)
        if pinned is not None:
            column, values = pinned
            chosen &= {r.id for r in catalog.receptors
                       if {"receptor_id": r.id, "location": r.location, "area": r.area}[column] in values}
    return sorted(chosen)


def place(query: LogicalQuery, catalog: Catalog, at: str | None = None) -> Placement:
    """Where `query` runs. `at` pins its root (a topology's standing view, placed by the operator):
    it then covers everything below that node, the lowest exports of its source there."""
    if at is not None:
        return _place_at(query, catalog, at)
    receptors = scope_receptors(query, catalog)
    node_of = {r.id: r.node for r in catalog.receptors}
    edges = sorted({node_of[r] for r in receptors if r in node_of})
    if query.source_kind == "stream":
        producers = edges
    else:
        exporters = {v.node for v in catalog.exports_of(query.source) if v.topic}
        in_scope = sorted(n for n in exporters if any(e in catalog.edges_below(n) for e in edges))
        # A view exported at several levels is read where it is lowest.
        producers = [n for n in in_scope if not any(n in catalog.ancestors(p)[1:] for p in in_scope)]
    if not producers:
        raise SqlError(f"no receptor or node matches the scope of this query over {query.source!r}")
    dead = [n for n in producers if not catalog.nodes[n].alive]
    if dead:
        raise SqlError(f"node(s) {', '.join(dead)} holding {query.source!r} are not alive")
    return Placement(catalog.lowest_common_ancestor(producers), tuple(producers), tuple(receptors))


def _place_at(query: LogicalQuery, catalog: Catalog, at: str) -> Placement:
    if at not in catalog.nodes:
        raise SqlError(f"no node {at!r} to place {query.view_name or 'this query'!r} at")
    if query.source_kind == "stream":
        producers = catalog.edges_below(at)
    else:
        subtree = [v.node for v in catalog.exports_of(query.source) if v.topic and at in catalog.ancestors(v.node)]
        producers = sorted(n for n in set(subtree) if not any(n in catalog.ancestors(p)[1:] for p in subtree))
    if not producers:
        raise SqlError(f"nothing at or below {at} exports {query.source!r}")
    return Placement(at, tuple(producers), ("*",))


def place_join(query: LogicalQuery, catalog: Catalog, at: str | None = None) -> tuple[Placement, list[Placement]]:
    """Where a stream join runs (the lowest common ancestor of every input's producers, or `at`),
    and where each input is read, up to that root."""
    assert query.stream_join is not None
    parts = [place(input_query(query, given), catalog, at) for given in query.stream_join.inputs]
    producers = sorted({node for part in parts for node in part.producers})
    root = at or catalog.lowest_common_ancestor(producers)
    receptors = tuple(sorted({r for part in parts for r in part.receptors}))
    return Placement(root, tuple(producers), receptors), [replace(part, root=root) for part in parts]
