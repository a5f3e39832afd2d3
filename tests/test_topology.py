import os

import pytest

from glue.csava import view_plans
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


def test_default_views_build_plans_at_every_tier():
    topology = load_topology(DEFAULT)
    exported = {}
    for spec in topology.bottom_up():
        def child_views(node, name):
            found = [exported[(c, name)] for c in topology.children(node) if (c, name) in exported]
            return tuple(t for t, _ in found), found[0][1]
        from dsp.plan import output_columns

        for vp in view_plans(topology, spec.id, child_views):
            exported[(spec.id, vp.view.name)] = (vp.topic, output_columns(vp.plan))
    assert exported[("region", "location_counts")][1] == (("window_start", "timestamp"), ("window_end", "timestamp"),
                                                          ("location", "string"), ("tags", "long"))
    assert exported[("door1", "smoothed_rfid_stream")][0] == "hifi.view.door1.smoothed_rfid_stream"
    # each CSAVA stage at its level: views placed by node, validation reading the region's own counts
    assert {node for node, _ in exported} == {"door1", "door2", "warehouse", "region", "hq"}
    assert {name for node, name in exported if node == "warehouse"} == {"product_counts"}
    assert [c for c, _ in exported[("region", "stock_alerts")][1]] == [
        "window_start", "window_end", "location", "tags", "min_tags", "max_tags"]
    assert [c for c, _ in exported[("hq", "location_trends")][1]] == [
        "window_start", "window_end", "location", "mean_tags", "fewest_tags", "most_tags", "windows"]


def test_a_view_placed_at_an_unknown_node_is_refused():
    with pytest.raises(TopologyError, match="view 'v' placed at unknown node"):
        parse_topology(NODES_OK + "views:\n  - {name: v, stage: totals, nodes: [nowhere]}\n")


@pytest.mark.parametrize("text, message", [
    (NODES_OK + "  - id: d1\n    tier: edge\n    parent: wh\n", r"line 11: duplicate node id 'd1' \(first at line 8\)"),
    (NODES_OK + "  - id: d2\n    tier: edge\n    parent: nowhere\n",
     "line 11: node 'd2' names unknown parent 'nowhere'"),
    ("nodes:\n  - {id: a, tier: core, parent: b}\n  - {id: b, tier: aggregation, parent: a}\n",
     "line 2: node 'a' is in a parent cycle: a -> b -> a"),
    ("nodes:\n  - {id: a, tier: cloud}\n", "line 2: node 'a' has unknown tier 'cloud'"),
    (NODES_OK + "receptors:\n  - {id: r1, node: wh}\n", "receptor 'r1' is attached to 'wh', which is not an edge node"),
    ("nodes: [", "not valid YAML"),
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
