import os

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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
    assert [c for c, _ in exported[("region", "stock_alerts")].columns] == [   # its starts and ends (EMIT CHANGES)
        "window_start", "window_end", "location", "tags", "min_tags", "max_tags", "change", "since", "held_seconds"]
    assert [c for c, _ in exported[("hq", "location_trends")].columns] == [
        "window_start", "window_end", "location", "mean_tags", "fewest_tags", "most_tags", "windows"]
    # the dashboard shows these views' rows as events: each condition's starts and ends
    topology = load_topology(DEFAULT)
    assert {v.name: v.alert for v in topology.views if v.alert} == {
        "faulty_motes": "faulty", "fires": "fire", "danger_alerts": "person-in-danger", "weak_readers": "weak-reader",
        "stock_alerts": "alert"}
    assert all("EMIT CHANGES" in v.sql for v in topology.views if v.alert)
    # the warehouse's arbitration is pushed down: each door sends its pane partials up
    arbitrate = next(s for s in standing if s.view.name == "product_counts")
    assert [(t.node, t.role) for t in arbitrate.tasks] == [
        ("door1", "producer"), ("door2", "producer"), ("warehouse", "window"), ("warehouse", "final")]


def test_a_view_placed_at_an_unknown_node_is_refused():
    with pytest.raises(TopologyError, match="view 'v' placed at unknown node"):
        parse_topology(NODES_OK + "views:\n  - {sql: CREATE VIEW v AS SELECT tag_id FROM rfid_stream, "
                                  "nodes: [nowhere]}\n")


def test_a_view_that_names_no_readers_is_the_operators_and_one_that_names_them_is_theirs():
    def readers(given: str) -> tuple[str, ...]:
        topology = parse_topology(NODES_OK + "views:\n  - {sql: CREATE VIEW v AS SELECT tag_id FROM rfid_stream, "
                                  f"tiers: [edge]{given}}}\n")
        return topology.views[0].readers

    assert readers("") == ("role:operator",)   # leaving readers out never opens a view
    assert readers(", readers: ['*']") == ("*",)
    assert readers(", readers: [alice, role:user]") == ("alice", "role:user")


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


_KEYS = ["name", "nodes", "receptors", "relations", "views", "parameters", "stream_readers", "scenario", "id", "tier",
         "parent", "alternates", "listen", "metrics_port", "uplink", "latency_target", "kind", "node", "location",
         "area", "x", "y", "columns", "rows", "replicas", "sql", "tiers", "readers", "operator", "priority",
         "materialize", "definition", "alert", "rfid_stream"]
_SCALARS = (st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=True)
            | st.sampled_from(["core", "edge", "aggregation", "hq", "d1", "role:operator", "*", "10 seconds", "left",
                               "CREATE VIEW v AS SELECT tag_id FROM rfid_stream", "SELECT", "1 mb/s", "-1"])
            | st.text(max_size=12))
_VALUES = st.recursive(_SCALARS, lambda inner: st.lists(inner, max_size=4)
                       | st.dictionaries(st.sampled_from(_KEYS), inner, max_size=5), max_leaves=25)


@settings(max_examples=150, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(doc=st.dictionaries(st.sampled_from(_KEYS), _VALUES, max_size=6), seed_nodes=st.booleans())
def test_any_document_is_a_topology_or_one_line_naming_the_problem(doc, seed_nodes):
    """Fuzzed: every document (shapes a topology's keys take, values of every type) parses or is
    refused with a TopologyError of one line, never another exception."""
    if seed_nodes:   # often valid enough to reach the deeper checks
        doc = {"nodes": [{"id": "hq", "tier": "core"}, {"id": "d1", "tier": "edge", "parent": "hq"}], **doc}
    text = yaml.safe_dump(doc, allow_unicode=True)
    try:
        parse_topology(text, "fuzz.yaml")
    except TopologyError as exc:
        assert "\n" not in str(exc) and str(exc), str(exc)


_BASE = {"name": "t", "parameters": {"t1": "2 seconds"},
         "nodes": [{"id": "hq", "tier": "core"}, {"id": "d1", "tier": "edge", "parent": "hq", "alternates": []}],
         "receptors": [{"id": "r1", "kind": "rfid", "node": "d1", "location": "dock", "area": "n", "x": 0, "y": 1}],
         "relations": [{"name": "rel", "columns": [["a", "string"]], "rows": [["x"]], "replicas": ["*"]}],
         "views": [{"tiers": ["edge"], "readers": ["role:operator"], "priority": 0,
                    "sql": "CREATE VIEW v AS SELECT tag_id FROM rfid_stream"}],
         "stream_readers": {"rfid_stream": ["role:operator"]}}
_PATHS = [(top, i, key) for top, entries in _BASE.items() if isinstance(entries, list)
          for i, entry in enumerate(entries) for key in [*entry, "uplink", "latency_target", "metrics_port", "nodes"]]
_PATHS += [(top, None, None) for top in _BASE] + [("stream_readers", "rfid_stream", None), ("parameters", "t1", None)]


@settings(max_examples=200, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(path=st.sampled_from(_PATHS), value=_VALUES)
def test_a_valid_topology_with_any_one_value_changed_is_one_line_at_worst(path, value):
    """Fuzzed: the default-like topology with one value anywhere replaced by any value."""
    import copy

    doc = copy.deepcopy(_BASE)
    top, index, key = path
    if index is None:
        doc[top] = value
    elif key is None:
        doc[top][index] = value
    else:
        doc[top][index][key] = value
    try:
        parse_topology(yaml.safe_dump(doc, allow_unicode=True), "fuzz.yaml")
    except TopologyError as exc:
        assert "\n" not in str(exc) and str(exc), str(exc)


@settings(max_examples=100, deadline=None, derandomize=True, database=None)
@given(text=st.text(alphabet=st.sampled_from(list("{}[]:-,&*!|>'\"#\n \tabc1")), max_size=80))
def test_any_text_is_a_topology_or_one_line(text):
    try:
        parse_topology(text, "fuzz.yaml")
    except TopologyError as exc:
        assert "\n" not in str(exc), str(exc)


def test_files_that_once_crashed_are_one_line_each(tmp_path):
    cases = {"list.yaml": b"name: t\nnodes: [core]\n", "utf8.yaml": b"name: t\xff\xfe\nnodes: []\n",
             "deep.yaml": b"a: " + b"[" * 20_000 + b"]" * 20_000 + b"\n",
             "bomb.yaml": b"a: &a [x, x]\nb: &b [*a, *a]\nc: &c [*b, *b]\n",
             "x.yaml": b"nodes:\n  - {id: d, tier: edge}\nreceptors:\n  - {id: r, node: d, x: left}\n"}
    said = {}
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
        with pytest.raises(TopologyError) as refused:
            load_topology(str(tmp_path / name))
        said[name] = str(refused.value)
    assert "'nodes' is a list of mappings" in said["list.yaml"] and "not UTF-8" in said["utf8.yaml"]
    assert "nested more than" in said["deep.yaml"] and "aliases" in said["bomb.yaml"]
    assert "x is a number, not 'left'" in said["x.yaml"]
