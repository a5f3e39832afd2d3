"""MDR behaviour against a real Redis server."""

import time

from mdr.repository import ViewRecord, now_ms
from tests.conftest import wait_for
from wire.identity import readable_by


def test_node_liveness_expires_when_heartbeats_stop(mdr):
    mdr.register_node("door1", "edge", "warehouse", ["warehouse2"], "127.0.0.1:5001", {"views": ["v"]})
    mdr.heartbeat("door1", ttl_ms=600)
    node = mdr.node("door1")
    assert (node.tier, node.parent, node.alternates, node.alive) == ("edge", "warehouse", ("warehouse2",), True)
    assert node.capabilities == {"views": ["v"]}
    wait_for(lambda: not mdr.node("door1").alive, 5, "door1 to turn dead after its heartbeat TTL", 0.1)
    mdr.heartbeat("door1", ttl_ms=600)
    assert mdr.node("door1").alive


def test_a_node_started_again_counts_a_start_and_one_registering_again_does_not(mdr):
    mdr.register_node("door1", "edge", "warehouse", [], "a", started_ms=1_000)
    mdr.register_node("door1", "edge", "warehouse", [], "a", started_ms=1_000)   # the MDR lost it: again
    assert (mdr.node("door1").started_ms, mdr.node("door1").starts) == (1_000, 1)
    mdr.register_node("door1", "edge", "warehouse", [], "b", started_ms=2_000)   # a new process
    assert (mdr.node("door1").started_ms, mdr.node("door1").starts, mdr.node("door1").address) == (2_000, 2, "b")


def test_one_node_claims_a_dead_nodes_parts_and_the_adoption_ends_when_they_are_back(mdr):
    assert mdr.claim_adoption("w1", "w2", ["d1", "d2"])
    assert not mdr.claim_adoption("w1", "hq", ["d1", "d2"]), "a second claimant loses"
    mdr.update_adoption("w1", parts={"w1:view.x": 12_000})
    mdr.update_adoption("w1", handback_ms=30_000)
    found = mdr.adoptions()["w1"]
    assert (found.adopter, found.children, found.parts, found.handback_ms, found.drained_ms) == (
        "w2", ("d1", "d2"), {"w1:view.x": 12_000}, 30_000, None)
    mdr.update_adoption("w1", drained_ms=31_000)
    assert mdr.adoptions()["w1"].drained_ms == 31_000
    mdr.end_adoption("w1")
    assert mdr.adoptions() == {}
    assert mdr.claim_adoption("w1", "hq", ["d1"]), "a node that dies again can be adopted again"


def test_views_export_list_and_revoke(mdr):
    view = ViewRecord("smoothed", "door1", "hifi.view.door1.smoothed", "tumbling 2s", "SELECT ...", "{}",
                      (("tag_id", "string"),), ("warehouse",), now_ms())
    mdr.export_view(view)
    assert mdr.views() == [view]
    assert mdr.views("door2") == []
    assert readable_by(view.readers, "warehouse") and not readable_by(view.readers, "someone")
    assert mdr.revoke_view("door1", "smoothed")
    assert mdr.views() == []
    assert not mdr.revoke_view("door1", "smoothed")


def test_a_refused_record_counts_once_and_what_is_remembered_of_it_goes_two_hours_on(mdr):
    hour = 3_600_000
    at = 500 * hour + 10
    assert mdr.count_dead_letters("d1", ["t:0:1", "t:0:2"], at) == ["t:0:1", "t:0:2"]
    assert mdr.count_dead_letters("d1", ["t:0:2", "t:0:3"], at + 1) == ["t:0:3"]   # another reader met t:0:2
    assert mdr.count_dead_letters("d1", ["t:0:1"], at + hour) == []                # the next hour still knows it
    assert mdr.stats("d1")["dead"] == 3
    remembered = mdr.k("stats", "d1", "dead", "500")
    assert 0 < mdr.r.pttl(remembered) <= 2 * hour   # bounded: no set outlives two hours
    assert mdr.count_dead_letters("d1", ["t:0:1"], at + 2 * hour) == ["t:0:1"]


def test_retired_topics_are_listed_by_age_and_remembered_a_day(mdr):
    from mdr.control import RETIRED_KEPT_MS

    mdr.retire_topics(["hifi.rqs.d1.a", "hifi.results.hq.q1"], 1_000)
    mdr.retire_topics(["hifi.rqs.d1.b"], 2_000)
    assert mdr.retired_topics(1_000) == [] and mdr.retired_topics(2_000) == ["hifi.results.hq.q1", "hifi.rqs.d1.a"]
    mdr.forget_retired(["hifi.rqs.d1.a"])
    mdr.retire_topics(["hifi.rqs.d1.c"], 2_000 + RETIRED_KEPT_MS)   # the first two are a day old by then
    assert mdr.retired_topics(3_000 + RETIRED_KEPT_MS) == ["hifi.rqs.d1.b", "hifi.rqs.d1.c"]


def test_every_change_is_announced_on_the_change_stream(mdr):
    mdr.register_node("hq", "core", "", [], "x")
    mdr.define_stream("rfid_stream", [("tag_id", "string")])
    mdr.put_relation("receptor_locations", [("receptor_id", "string"), ("location", "string")], [("r1", "d1")], ["*"])
    changes = [(c["kind"], c["op"], c["id"]) for _, c in mdr.changes()]
    assert changes == [("node", "register", "hq"), ("stream", "define", "rfid_stream"),
                       ("relation", "put", "receptor_locations")]
    assert mdr.streams() == {"rfid_stream": [("tag_id", "string")]}
    assert mdr.relations_at("anywhere") == {"receptor_locations": [("r1", "d1")]}


def test_batch_counts_are_added_once_per_batch_id(mdr):
    assert mdr.add_counts("n", "q1", 0, {"rows_out": 5})
    assert not mdr.add_counts("n", "q1", 0, {"rows_out": 5})   # a replay of batch 0
    assert mdr.add_counts("n", "q1", 1, {"rows_out": 2})
    assert mdr.add_counts("n", "q2", 0, {"rows_out": 1})       # another query's batch 0
    assert mdr.stats("n")["rows_out"] == 8


def test_a_nodes_round_of_statistics_is_its_parts_states_gauges_and_a_history_sample_at_once(mdr):
    mdr.put_part_states("n", {"old": {"status": "failed"}})
    mdr.put_round("n", {"q": {"status": "failed", "error": "boom"}}, {"input_rate": 2.5, "lag_ms": 40},
                  {"rows_in": 7, "input_rate": 2.5})
    mdr.put_round("n", {}, {"input_rate": 3.0}, {"rows_in": 9, "input_rate": 3.0})
    assert mdr.part_states(["n"]) == {"n": {}}   # replaced each round, the old state too
    stats = mdr.stats("n")
    assert (stats["input_rate"], stats["lag_ms"]) == (3.0, 40) and stats["updated_ms"] > 0
    assert [(s["rows_in"], s["input_rate"]) for s in mdr.history("n")] == [(7, 2.5), (9, 3.0)]


def test_raw_offset_ranges_are_counted_once(mdr):
    assert mdr.add_range_counts("n", "hifi.raw.n", 0, 0, 10, 1000, {"rows_in": 30, "dead": 1})
    assert not mdr.add_range_counts("n", "hifi.raw.n", 0, 0, 10, 1000, {"rows_in": 30, "dead": 1})
    assert mdr.add_range_counts("n", "hifi.raw.n", 1, 0, 4, 900, {"rows_in": 3})
    # a batch's ranges of one partition, counted as their tasks finish: the later one first
    assert mdr.add_range_counts("n", "hifi.raw.n", 0, 20, 30, 2000, {"rows_in": 6})
    assert mdr.add_range_counts("n", "hifi.raw.n", 0, 10, 20, 1500, {"rows_in": 5})
    assert not mdr.add_range_counts("n", "hifi.raw.n", 0, 10, 20, 1500, {"rows_in": 5})
    stats = mdr.stats("n")
    assert (stats["rows_in"], stats["dead"], stats["max_event_ms"]) == (44, 1, 2000)


def test_a_prepare_waits_until_a_partitions_batches_obey_the_settings_and_not_for_silent_motes(mdr, monkeypatch):
    from services import sensor_proxy

    proxy = sensor_proxy.SensorProxy("n", "", mdr)
    monkeypatch.setattr(sensor_proxy, "OBEY_TIMEOUT_S", 0.5)
    assert mdr.obeyed("n") == (0, 0) and proxy.wait_obeyed(7)   # no sample batch ever read: nothing to wait for
    mdr.put_obeyed("n", 0, 6)
    started = time.monotonic()
    assert not proxy.wait_obeyed(7) and time.monotonic() - started >= 0.5   # the motes still obey version 6
    mdr.put_obeyed("n", 1, 7)   # batches of another partition of the raw topic obey 7
    assert mdr.obeyed("n")[0] == 7 and proxy.wait_obeyed(7)


def test_queries_are_stored_and_dropped(mdr):
    from mdr.repository import QueryRecord

    record = QueryRecord("q1", "SELECT 1", "hq", {"door1": ["q1.door1"]}, "running", int(time.time() * 1000))
    mdr.put_query(record)
    assert mdr.queries() == [record]
    mdr.drop_query("q1")
    assert mdr.queries() == []


def test_receptors_parameters_and_queries_round_trip_and_are_announced(mdr):
    from mdr.repository import QueryRecord

    mdr.put_receptors({"door1-r1": {"kind": "rfid", "node": "door1", "location": "inbound-dock", "area": "in"}})
    mdr.put_parameters({"strength_T": 0.2, "t1": "2 seconds"})
    assert mdr.receptors()["door1-r1"]["node"] == "door1"
    assert mdr.parameters() == {"strength_T": 0.2, "t1": "2 seconds"}
    mdr.put_parameters({"t1": "4 seconds"})  # a put replaces the whole set
    assert mdr.parameters() == {"t1": "4 seconds"}
    query = QueryRecord("q1", "SELECT ...", "warehouse", {"door1": ["view.producer_x"], "warehouse": ["q1"]},
                        "running", now_ms(), "hifi.results.q1", "query q1: root warehouse", ("tag_id", "n"))
    mdr.put_query(query)
    assert mdr.queries() == [query]
    kinds = [(fields["kind"], fields["op"]) for _, fields in mdr.changes()]
    assert kinds == [("receptors", "put"), ("parameters", "put"), ("parameters", "put"), ("query", "put")]
    mdr.drop_query("q1")
    assert mdr.queries() == []



def test_the_embedded_mdr_refuses_a_client_without_its_password(tmp_path):
    from urllib.parse import urlsplit

    import pytest
    import redis

    from services.embedded import redacted_url, start_redis

    shown, proc = start_redis(str(tmp_path))
    try:
        url = urlsplit(shown)
        assert url.hostname == "127.0.0.1" and len(url.password or "") >= 24
        assert url.password not in " ".join(map(str, proc.args)), "the password is not on the command line"
        with pytest.raises(redis.AuthenticationError):
            redis.Redis(host=url.hostname, port=url.port, socket_timeout=5).get("hifi:nodes")
        with pytest.raises(redis.AuthenticationError):
            redis.Redis(host=url.hostname, port=url.port, password="guess", socket_timeout=5).ping()
        assert redis.Redis.from_url(shown, socket_timeout=5).ping()
        assert url.password not in redacted_url(shown) and ":***@127.0.0.1:" in redacted_url(shown)
    finally:
        proc.kill()
        proc.wait(timeout=5)
