"""What a query can name: the MDR's catalog as plain data, for the analyzer and planner. Pure.

The placement service fills a Catalog from the MDR and the topology; everything downstream of it
(analysis, placement, rewriting, the reference evaluator) works on this snapshot without I/O.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from base.part_spec import PartSpec
from base.plan import Column, Plan, Window
from base.plan_schema import output_columns, window_of
from wire.identity import Identity

# The names the planner gives the partial streams it exports (glue.rewrite.distribute: a part's
# role and its plan's hash; a query's smoothing after the query's id); a user's view may not take
# one (a later query would read it as its own).
INTERNAL_VIEW_NAME = re.compile(r"(smooth|producer|merge|window|final|join)_[0-9a-f]{12}|smooth_q[0-9a-f]{8}")


def internal_view(name: str) -> bool:
    """Whether `name` is one the planner gives the views it exports for its own plans (shared
    partials, smoothing, joins): not a user's, and hidden from users' listings unless asked.

    >>> internal_view("producer_94b52f472974"), internal_view("smooth_q1a2b3c4d"), internal_view("stock_alerts")
    (True, True, False)
    """
    return INTERNAL_VIEW_NAME.fullmatch(name) is not None


@dataclass(frozen=True)
class ExportedView:
    """One node's export of a view (the MDR's view record, as the planner needs it)."""

    name: str
    node: str
    topic: str                     # "" when only the definition is exported
    columns: tuple[Column, ...]
    window: Window | None          # the view's own window (its rows carry window_start/window_end)
    definition: str
    readers: tuple[str, ...] = ("*",)
    plan: Plan | None = None       # what computes it: a query whose part it subsumes may read it (rewrite.reuse)


def exported_view(part: PartSpec, definition: str = "", readers: tuple[str, ...] = ("*",)) -> ExportedView:
    """What the catalog learns of `part` once it runs (its output exported as a view)."""
    return ExportedView(part.export_as, part.node, part.topic, tuple(output_columns(part.plan)),
                        window_of(part.plan), definition, readers, part.plan)


@dataclass(frozen=True)
class Relation:
    name: str
    columns: tuple[Column, ...]
    rows: tuple[tuple, ...]
    replicas: tuple[str, ...]      # node ids, or "*"

    def replicated_at(self, node: str) -> bool:
        return "*" in self.replicas or node in self.replicas


@dataclass(frozen=True)
class NodeInfo:
    id: str
    tier: str
    parent: str
    alive: bool = True
    address: str = ""


@dataclass(frozen=True)
class ReceptorInfo:
    id: str
    node: str
    location: str
    area: str
    kind: str = "rfid"   # rfid | mote: which raw stream its records are (base.plan.RAW_STREAMS)


@dataclass
class Catalog:
    streams: dict[str, tuple[Column, ...]]
    views: list[ExportedView]
    relations: dict[str, Relation]
    nodes: dict[str, NodeInfo]
    receptors: list[ReceptorInfo]
    parameters: dict[str, Any] = field(default_factory=dict)
    # raw stream -> who may read it (principals, role:NAME, *); a stream not named: everyone
    stream_readers: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # (mote, quantity) -> its histogram of recent values (wire.histogram): selectivity estimates
    histograms: dict[tuple[str, str], list[int]] = field(default_factory=dict)
    # node -> rows per second it reads now (the MDR's statistics): a join's inputs' rate estimates
    node_rates: dict[str, float] = field(default_factory=dict)

    def parameter(self, name: str) -> Any | None:
        lowered = {k.lower(): v for k, v in self.parameters.items()}
        return lowered.get(name.lower())

    def exports_of(self, view: str) -> list[ExportedView]:
        return [v for v in self.views if v.name == view]

    def as_read_by(self, reader: Identity) -> Catalog:
        """The catalog `reader`'s queries are planned over: of a view exported at several nodes,
        only the exports it may read, so that one readable export of a name does not open the
        others (a name none of whose exports it may read stays, for the analyzer to refuse by
        name); the planner's own partial exports stay (reused by their plan, never named)."""
        readable = {id(v) for v in self.views if INTERNAL_VIEW_NAME.fullmatch(v.name) or reader.may_read(v.readers)}
        names = {v.name for v in self.views if id(v) in readable}
        return replace(self, views=[v for v in self.views if id(v) in readable or v.name not in names])

    def children(self, node: str) -> list[str]:
        return sorted(n.id for n in self.nodes.values() if n.parent == node)

    def ancestors(self, node: str) -> list[str]:
        """`node` and every node above it, bottom up."""
        chain = [node]
        while self.nodes[chain[-1]].parent:
            chain.append(self.nodes[chain[-1]].parent)
        return chain

    def edges_below(self, node: str) -> list[str]:
        if self.nodes[node].tier == "edge":
            return [node]
        return [e for child in self.children(node) for e in self.edges_below(child)]

    def lowest_common_ancestor(self, nodes: Sequence[str]) -> str:
        paths = [self.ancestors(n) for n in nodes]
        common = set(paths[0]).intersection(*map(set, paths[1:]))
        return next(n for n in paths[0] if n in common)
