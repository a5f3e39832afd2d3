"""The compose deployment's Kafka rights (services.kafka_acls), checked by evaluating the rendered
ACLs as the broker's authorizer does (deny unless allowed): each service reads and writes only its
own topics, and a principal a view names reads that view's topic and nothing else."""

from __future__ import annotations

from glue.topology import parse_topology
from services.kafka_acls import acls, allowed, password_variable, setup_script, users
from services.paths import DEFAULT_TOPOLOGY
from wire.topics import control_topic, dead_topic, raw_topic, results_topic, rqs_topic, view_topic


def _topology():
    """The default topology, with the region's location_counts also readable by `analyst`."""
    with open(DEFAULT_TOPOLOGY) as fh:
        text = fh.read()
    marked = "  - nodes: [region]\n    readers: [role:user]\n    sql: |\n      CREATE VIEW location_counts AS"
    assert marked in text
    return parse_topology(text.replace(marked, marked.replace("[role:user]", "[analyst, role:user]")),
                          DEFAULT_TOPOLOGY)


def test_a_principal_named_by_one_view_reads_its_topic_and_nothing_else():
    topology = _topology()
    rules = acls(topology)
    assert "analyst" in users(topology)
    assert allowed(rules, "analyst", "Read", view_topic("region", "location_counts"))
    refused = [raw_topic("door1"), raw_topic("door2"), view_topic("door1", "smoothed_rfid_stream"),
               view_topic("door1", "people_in_danger"), view_topic("warehouse", "product_counts"),
               view_topic("region", "stock_alerts"), rqs_topic("q1", "door1"), results_topic("q1", "region"),
               dead_topic("door1")]
    assert [t for t in refused if allowed(rules, "analyst", "Read", t)] == []
    assert not allowed(rules, "analyst", "Write", view_topic("region", "location_counts"))
    # a role grants nothing on the broker: someone with only role:user reads no topic
    assert not allowed(rules, "someone", "Read", view_topic("region", "location_counts"))


def test_each_node_reads_what_is_below_it_and_writes_only_its_own():
    rules = acls(_topology())
    door1, warehouse, hq = "node-door1", "node-warehouse", "node-hq"
    assert allowed(rules, door1, "Read", raw_topic("door1")) and not allowed(rules, door1, "Read", raw_topic("door2"))
    assert allowed(rules, door1, "Write", view_topic("door1", "smoothed_rfid_stream"))
    assert not allowed(rules, door1, "Write", view_topic("door2", "smoothed_rfid_stream"))
    assert not allowed(rules, door1, "Read", view_topic("door2", "smoothed_rfid_stream"))
    assert not allowed(rules, door1, "Read", rqs_topic("q1", "door2"))   # an edge reads no partials
    assert allowed(rules, door1, "Write", rqs_topic("q1", "door1"))
    # one node forges no other node's partials or results (a query's results are its final node's)
    assert not allowed(rules, door1, "Write", rqs_topic("q1", "door2"))
    assert allowed(rules, door1, "Write", results_topic("q1", "door1"))
    assert not allowed(rules, door1, "Write", results_topic("q1", "region"))
    assert not allowed(rules, warehouse, "Write", rqs_topic("q1", "region"))
    assert not allowed(rules, warehouse, "Read", results_topic("q1", "warehouse"))
    assert allowed(rules, door1, "Write", dead_topic("door1"))
    assert allowed(rules, warehouse, "Read", view_topic("door1", "smoothed_rfid_stream"))
    assert allowed(rules, warehouse, "Read", rqs_topic("q1", "door2"))
    assert not allowed(rules, warehouse, "Read", raw_topic("door1"))
    assert not allowed(rules, warehouse, "Read", view_topic("region", "location_counts"))   # above it
    # the core may run any dead node's parts meanwhile (re-parenting): it writes their views too
    assert allowed(rules, hq, "Write", view_topic("door1", "smoothed_rfid_stream"))
    assert allowed(rules, hq, "Write", results_topic("q1", "region"))


def test_the_services_and_the_operator_have_their_own_rights():
    rules = acls(_topology())
    assert allowed(rules, "agents", "Write", raw_topic("door2")) and not allowed(rules, "agents", "Read",
                                                                                  raw_topic("door2"))
    assert not allowed(rules, "agents", "Write", view_topic("door1", "smoothed_rfid_stream"))
    assert allowed(rules, "agents", "Read", control_topic("door1")) and \
        not allowed(rules, "agents", "Write", control_topic("door1"))
    assert allowed(rules, "node-door1", "Write", control_topic("door1")) and \
        not allowed(rules, "node-door1", "Write", control_topic("door2"))
    assert allowed(rules, "placement", "Read", results_topic("q1", "door1"))
    assert allowed(rules, "placement", "Describe", raw_topic("door1"))
    assert not allowed(rules, "placement", "Read", raw_topic("door1"))
    # a cancel's topics, deleted later: what queries made, never a raw, control or dead-letter topic
    assert all(allowed(rules, "placement", "Delete", topic) for topic in (
        results_topic("q1", "door1"), rqs_topic("q1", "door1"), view_topic("region", "stock_alerts")))
    assert not any(allowed(rules, "placement", "Delete", topic) for topic in (
        raw_topic("door1"), control_topic("door1"), dead_topic("door1")))
    assert allowed(rules, "dashboard", "Read", view_topic("region", "stock_alerts"))
    assert allowed(rules, "dashboard", "Read", dead_topic("door1"))
    assert not allowed(rules, "dashboard", "Read", raw_topic("door1"))
    assert allowed(rules, "operator", "Read", raw_topic("door1"))
    assert not allowed(rules, "operator", "Write", raw_topic("door1"))


def test_the_setup_script_makes_every_user_and_adds_every_acl():
    topology = _topology()
    script = setup_script(topology)
    for user in users(topology):
        assert f"--entity-name {user} --add-config \"SCRAM-SHA-512=[password=$${password_variable(user)}]\"" in script
    for rule in acls(topology):
        assert rule.command("127.0.0.1:9094") in script
    assert password_variable("node-door1") == "HIFI_KAFKA_PASSWORD_NODE_DOOR1"
