import os

import pytest

from glue.standing import standing_views
from glue.topology import TopologyError, load_topology, parse_topology
from wire.windows import DurationError, duration_ms

DEFAULT = os.path.join(os.path.dirname(__file__), "..", "deploy", "topologies", "supply-chain.yaml")

NODES_OK = """
nodes:
  - id: hq
    tier: core
  - id: wh
    tier: aggregation
    parent: hq
  - id: d1
    tier: edge
    parent: wh
"""


def test_default_topology_loads_and_orders_children_first():
    topology = load_topology(DEFAULT)
    assert topology.root == "hq"
    order = [n.id for n in topology.bottom_up()]
    assert order.index("door1") < order.index("warehouse") < order.index("region") < order.index("hq")
    assert topology.children("warehouse") == ["door1", "door2"]
    assert {r.node for r in topology.receptors} == {"door1", "door2"}


def test_default_views_are_planned_as_queries_at_every_tier():
    standing = standing_views(load_topology(DEFAULT))
    exported = {(s.node, s.view.name): s.export for s in standing}
    assert exported[("region", "location_counts")].columns == (
        ("window_start", "timestamp"), ("window_end", "timestamp"), ("location", "string"), ("tags", "long"))
    assert exported[("door1", "smoothed_rfid_stream")].topic == "hifi.view.door1.smoothed_rfid_stream"
    assert exported[("door1", "cleaned_rfid_stream")].topic == ""     # a definition only
    # each CSAVA view at its level; validation reads the region's own counts
    assert {node for node, _ in exported} == {"door1", "door2", "warehouse", "region", "hq"}
    assert {name for node, name in exported if node == "warehouse"} == {"product_counts"}
    assert [c for c, _ in exported[("region", "stock_alerts")].columns] == [
        "window_start", "window_end", "location", "tags", "min_tags", "max_tags"]
    assert [c for c, _ in exported[("hq", "location_trends")].columns] == [
        "window_start", "window_end", "location", "mean_tags", "fewest_tags", "most_tags", "windows"]
    # the dashboard shows these views' rows as events
    topology = load_topology(DEFAULT)
    assert {v.name: v.alert for v in topology.views if v.alert} == {
        "mote_quality": "faulty", "stock_alerts": "alert", "people_in_danger": "person-in-danger"}
    # the warehouse's arbitration is pushed down: each door sends its pane partials up
    arbitrate = next(s for s in standing if s.view.name == "product_counts")
    assert [(t.node, t.role) for t in arbitrate.tasks] == [
        ("door1", "producer"), ("door2", "producer"), ("warehouse", "window"), ("warehouse", "final")]


def test_a_view_placed_at_an_unknown_node_is_refused():
    with pytest.raises(TopologyError, match="view 'v' placed at unknown node"):
        parse_topology(NODES_OK + "views:\n  - {sql: CREATE VIEW v AS SELECT tag_id FROM rfid_stream, "
                                  "nodes: [nowhere]}\n")


@pytest.mark.parametrize("view, message", [
    ("{name: v, stage: totals, tiers: [edge]}", r"line 12: view 'v' needs `sql: CREATE VIEW v AS \.\.\.`"),
    ("{sql: SELECT tag_id FROM rfid_stream, tiers: [edge]}", "a view's sql is a CREATE VIEW <name> AS SELECT"),
    ("{sql: CREATE VIEW v AS SELECT FROM, tiers: [edge]}", "line 12: view SQL: line 1, column"),
    ("{name: w, sql: CREATE VIEW v AS SELECT tag_id FROM rfid_stream, tiers: [edge]}", "its SQL creates 'v'"),
])
def test_bad_views_are_refused_with_the_line(view, message):
    with pytest.raises(TopologyError, match=message):
        parse_topology(NODES_OK + "views:\n  - " + view + "\n")


def test_a_view_the_planner_refuses_names_the_view_and_node():
    topology = parse_topology(NODES_OK + "views:\n  - {sql: CREATE VIEW v AS SELECT nothing FROM rfid_stream, "
                              "tiers: [edge]}\n")
    with pytest.raises(TopologyError, match="view 'v' at d1: .*unknown column 'nothing'"):
        standing_views(topology)


@pytest.mark.parametrize("text, message", [
    (NODES_OK + "  - id: d1\n    tier: edge\n    parent: wh\n", r"line 11: duplicate node id 'd1' \(first at line 8\)"),
    (NODES_OK + "  - id: d2\n    tier: edge\n    parent: nowhere\n",
     "line 11: node 'd2' names unknown parent 'nowhere'"),
    ("nodes:\n  - {id: a, tier: core, parent: b}\n  - {id: b, tier: aggregation, parent: a}\n",
     "line 2: node 'a' is in a parent cycle: a -> b -> a"),
    ("nodes:\n  - {id: a, tier: cloud}\n", "line 2: node 'a' has unknown tier 'cloud'"),
    (NODES_OK + "receptors:\n  - {id: r1, node: wh}\n", "receptor 'r1' is attached to 'wh', which is not an edge node"),
    ("nodes: [", "not valid YAML"),
    ("nodes:\n  - {id: a, tier: core}\n  - {id: b, tier: edge, parent: a, uplink: fast}\n",
     "line 3: node 'b': uplink 'fast' is not a byte rate"),
    ("nodes:\n  - {id: a, tier: core, latency_target: 2 seconds}\n",
     "line 2: node 'a': latency_target is for edge nodes"),
    ("nodes:\n  - {id: a, tier: core}\n  - {id: b, tier: edge, parent: a, latency_target: soon}\n",
     "line 3: node 'b': latency_target 'soon' is not a positive duration"),
    (NODES_OK + "views:\n  - {sql: CREATE VIEW v AS SELECT tag_id FROM rfid_stream, tiers: [edge], priority: high}\n",
     "line 12: view 'v': priority 'high' is not a whole number"),
])
def test_bad_topologies_are_refused_with_the_line(text, message):
    with pytest.raises(TopologyError, match=message):
        parse_topology(text)


def test_durations():
    assert duration_ms("5 seconds") == 5000
    assert duration_ms("500 ms") == 500
    assert duration_ms("2 minutes") == 120_000
    assert duration_ms("1 hour") == 3_600_000
    assert duration_ms(3) == 3000
    with pytest.raises(DurationError, match="not a duration"):
        duration_ms("soon")


def test_an_uplink_is_a_byte_rate_and_a_view_has_a_priority():
    topology = parse_topology(NODES_OK.replace("    parent: wh\n", "    parent: wh\n    uplink: 20 KB/s\n")
                              + "views:\n  - {sql: CREATE VIEW v AS SELECT tag_id FROM rfid_stream, tiers: [edge], "
                                "priority: 10}\n")
    assert [topology.nodes[n].uplink_bytes_per_s for n in ("hq", "wh", "d1")] == [0, 0, 20_000]
    assert topology.views[0].priority == 10


def test_an_edge_has_a_latency_target():
    topology = parse_topology(NODES_OK.replace("    parent: wh\n", "    parent: wh\n    latency_target: 1 second\n"))
    assert [topology.nodes[n].latency_target_ms for n in ("hq", "wh", "d1")] == [0, 0, 1000]
