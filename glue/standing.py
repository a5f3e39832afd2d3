"""A topology's standing views, planned like any query. Pure.

Each SQL view of a topology (`sql: CREATE VIEW name AS ...`) is analyzed and distributed by the
same planner as a user's statement (glue.analyzer, glue.rewrite.distribute), rooted at the node
the topology places it at — every node of its tiers, or the nodes it lists — over what lies below
that node. Views are planned in the topology's order, each one seeing the exports of those before
it, so a chain (clean -> smooth -> arbitrate -> totals -> ...) gets pane partials pushed down to
the children and progress markers at every level, as a user's query does.

Every node computes the same plans from the topology alone and deploys the tasks that fall on it
(services.node): the children run the pane partials of their parent's view. Views SQL cannot say
(the mote-quality judge) are named operators (glue.operators), exported like the others so that a
later SQL view reads them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from base.part_spec import PartSpec
from base.plan import RAW_STREAMS, expr_type
from base.plan_schema import sources
from glue.analyzer import analyze
from glue.catalog import Catalog, ExportedView, NodeInfo, ReceptorInfo, Relation, exported_view
from glue.logical_query import LogicalQuery
from glue.operators import operator_parts
from glue.planner import plan_query
from glue.sql.lexer import SqlError
from glue.topology import Topology, TopologyError, ViewSpec
from wire.identity import SYSTEM


@dataclass(frozen=True)
class StandingView:
    view: ViewSpec
    node: str                        # where the view is exported
    reads: str                       # the stream or view it reads
    export: ExportedView             # what the catalog (and the MDR) learns of it
    tasks: tuple[PartSpec, ...]      # bottom up, the last one exports the view; () for a definition only


def topology_catalog(topology: Topology) -> Catalog:
    """What a standing view can name: the topology's nodes, receptors, relations and parameters."""
    relations = {r.name: Relation(r.name, r.columns, r.rows, r.replicas) for r in topology.relations}
    nodes = {n.id: NodeInfo(n.id, n.tier, n.parent) for n in topology.nodes.values()}
    receptors = [ReceptorInfo(r.id, r.node, r.location, r.area, r.kind) for r in topology.receptors]
    return Catalog({name: raw.columns for name, raw in RAW_STREAMS.items()}, [], relations, nodes, receptors,
                   dict(topology.parameters), dict(topology.stream_readers))


def standing_views(topology: Topology, catalog: Catalog | None = None) -> list[StandingView]:
    """Every SQL view of `topology` at every node it is placed at, in the topology's order."""
    catalog = catalog if catalog is not None else topology_catalog(topology)
    catalog = replace(catalog, views=list(catalog.views))   # the views planned here are added to a copy
    planned: list[StandingView] = []
    for view in topology.views:
        if view.operator:   # deployed by the nodes (glue.operators); a later SQL view may read it
            catalog.views.extend(exported_view(part, view.definition, view.readers) for node in topology.nodes
                                 for part in operator_parts(topology, node) if part.export_as == view.name)
            continue
        for node in (n for n in topology.nodes if view in topology.views_at(n)):
            try:
                standing = _plan(view, node, analyze(view.sql, catalog, SYSTEM), catalog)
            except SqlError as exc:
                raise TopologyError(f"view {view.name!r} at {node}: {exc}") from None
            catalog.views.extend(_exports(standing))
            planned.append(standing)
    return planned


def _plan(view: ViewSpec, node: str, query: LogicalQuery, catalog: Catalog) -> StandingView:
    if not view.materialize:
        if query.is_aggregate or query.joins:
            raise SqlError("a view exported as a definition only (materialize: false) is a plain selection", 1, 1)
        visible = dict(query.visible_columns)
        columns = tuple((name, expr_type(expr, visible)) for name, expr in query.outputs)
        return StandingView(view, node, query.source,
                            ExportedView(view.name, node, "", columns, None, view.sql, view.readers), ())
    plan = plan_query(query, catalog, f"view.{view.name}", at=node)
    export = exported_view(plan.tasks[-1], view.sql, view.readers)
    return StandingView(view, node, query.source, export, tuple(t for t in plan.tasks if not t.reused))


def standing_parts(standing: list[StandingView], node: str) -> list[PartSpec]:
    """The parts `node` runs for the topology's standing views: the last of a view's parts exports
    it (its readers, its definition); the others are internal partial streams."""
    return [replace(task, readers=s.view.readers, definition=s.view.definition, priority=s.view.priority)
            if task is s.tasks[-1] else replace(task, priority=s.view.priority)
            for s in standing for task in s.tasks if task.node == node]


def _exports(standing: StandingView) -> list[ExportedView]:
    """The view, and the partial streams its tasks export (a later view with an equal part reuses it)."""
    return [*(exported_view(t) for t in standing.tasks[:-1] if t.export_as), standing.export]


def crossing_topics(standing: list[StandingView]) -> dict[str, str]:
    """Topic -> the node writing it, for every topic a standing part reads from another node: what
    travels up the tree (a view read only where it is made stays on its node)."""
    writer = {t.topic: t.node for s in standing for t in s.tasks}
    return {topic: writer[topic] for s in standing for t in s.tasks for source in sources(t.plan)
            for topic in source.topics if writer.get(topic, t.node) != t.node}
