"""Catalogs for unit tests of pure logic: the supply-chain topology's, as the MDR would hold it."""

from __future__ import annotations

from dsp.plan import RAW_RFID_SOURCE_COLUMNS, Window
from glue.catalog import Catalog, ExportedView, NodeInfo, ReceptorInfo, Relation
from glue.topology import load_topology
from services.cli import DEFAULT_TOPOLOGY

SMOOTHED_COLUMNS = (("window_start", "timestamp"), ("window_end", "timestamp"), ("receptor_id", "string"),
                    ("tag_id", "string"), ("reads", "long"))


def supply_chain_catalog(extra_views: tuple[ExportedView, ...] = ()) -> Catalog:
    return topology_catalog(DEFAULT_TOPOLOGY, extra_views)


def topology_catalog(path: str, extra_views: tuple[ExportedView, ...] = ()) -> Catalog:
    """The catalog of a topology file: its edge views exported at every edge node."""
    topology = load_topology(path)
    views = []
    for edge in topology.edge_nodes():
        for view in topology.views_at(edge):
            if view.materialize:
                views.append(ExportedView(view.name, edge, f"hifi.view.{edge}.{view.name}", SMOOTHED_COLUMNS,
                                          Window(2000, 2000), view.definition))
            else:
                views.append(ExportedView(view.name, edge, "", (), None, view.definition))
    receptors = [ReceptorInfo(r.id, r.node, r.location, r.area) for r in topology.receptors]
    relation = Relation("receptor_locations", (("receptor_id", "string"), ("location", "string")),
                        tuple((r.id, r.location) for r in receptors), ("*",))
    nodes = {n.id: NodeInfo(n.id, n.tier, n.parent) for n in topology.nodes.values()}
    return Catalog({"rfid_stream": RAW_RFID_SOURCE_COLUMNS}, views + list(extra_views),
                   {"receptor_locations": relation}, nodes, receptors, dict(topology.parameters))
