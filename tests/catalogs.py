"""Catalogs for unit tests of pure logic: the supply-chain topology's, as the MDR would hold it."""

from __future__ import annotations

from dsp.plan import RAW_RFID_SOURCE_COLUMNS, Window
from glue.catalog import Catalog, ExportedView, NodeInfo, ReceptorInfo, Relation
from glue.topology import load_topology
from services.cli import DEFAULT_TOPOLOGY

SMOOTHED_COLUMNS = (("window_start", "timestamp"), ("window_end", "timestamp"), ("receptor_id", "string"),
                    ("tag_id", "string"), ("reads", "long"))


def supply_chain_catalog(extra_views: tuple[ExportedView, ...] = ()) -> Catalog:
    topology = load_topology(DEFAULT_TOPOLOGY)
    views = []
    by_name = {v.name: v for v in topology.views}
    for edge in ("door1", "door2"):
        views.append(ExportedView("cleaned_rfid_stream", edge, "", (), None, by_name["cleaned_rfid_stream"].definition))
        views.append(ExportedView("smoothed_rfid_stream", edge, f"hifi.view.{edge}.smoothed_rfid_stream",
                                  SMOOTHED_COLUMNS, Window(2000, 2000), by_name["smoothed_rfid_stream"].definition))
    receptors = [ReceptorInfo(r.id, r.node, r.location, r.area) for r in topology.receptors]
    relation = Relation("receptor_locations", (("receptor_id", "string"), ("location", "string")),
                        tuple((r.id, r.location) for r in receptors), ("*",))
    nodes = {n.id: NodeInfo(n.id, n.tier, n.parent) for n in topology.nodes.values()}
    return Catalog({"rfid_stream": RAW_RFID_SOURCE_COLUMNS}, views + list(extra_views),
                   {"receptor_locations": relation}, nodes, receptors, dict(topology.parameters))
