"""End to end: the default supply-chain topology on real Redis, broker and Spark, its standing
CSAVA views checked against the same chain evaluated centrally over the readings the agents
published; plus the Node gRPC API and the hifi CLI against the running hierarchy."""

import os
import subprocess
import sys
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from edge.truth import covered_windows, readings_per_node
from glue.topology import duration_ms, load_topology
from protos import hifi_pb2, hifi_pb2_grpc
from services.cli import DEFAULT_TOPOLOGY
from tests.conftest import running_hierarchy, topic_rows, wait_for

MIN_WINDOWS = 6


@pytest.fixture(scope="module")
def hierarchy(servers, spark, tmp_path_factory):
    yield from running_hierarchy(load_topology(DEFAULT_TOPOLOGY), servers, str(tmp_path_factory.mktemp("state")))


def _core_rows(hierarchy):
    return topic_rows(hierarchy.bootstrap, "hifi.view.hq.location_counts")


def test_core_counts_per_location_equal_the_csava_chain_evaluated_centrally(hierarchy):
    from edge.agent import read_jsonl
    from glue.reference import csava_location_counts, rfid_readings

    parameters = hierarchy.topology.parameters
    window_ms = duration_ms(parameters["t1"])
    cycle_ms = hierarchy.agent.scenario.cycle_ms
    doors = ("inbound-dock", "outbound-door")
    located = {r.id: r.location for r in hierarchy.topology.receptors}

    def scored_windows():
        rows = _core_rows(hierarchy)
        logged = read_jsonl(hierarchy.readings_path)
        emitted = {int(r["window_start"].timestamp() * 1000) for r in rows}
        covered = [w for w in covered_windows(logged, window_ms, cycle_ms) if w in emitted or
                   (emitted and min(emitted) < w < max(emitted))]
        return (rows, logged, covered) if len(covered) >= MIN_WINDOWS else None

    rows, logged, covered = wait_for(scored_windows, 240, f"{MIN_WINDOWS} closed windows at the core", 2)
    expected = csava_location_counts(rfid_readings(logged), float(parameters["strength_T"]),
                                     int(parameters["count_T"]), window_ms, located)
    got = {(int(r["window_start"].timestamp() * 1000), r["location"]): r["tags"] for r in rows}
    assert len(got) == len(rows), "a (window, location) was reported twice"
    for window in covered:
        for location in doors:
            want = expected.get((window, location), 0)
            assert got.get((window, location), 0) == want, (window, location, got.get((window, location)), want)
    assert sum(expected.get((w, loc), 0) for w in covered for loc in doors) > 0


def test_readings_produced_equal_consumed_plus_dead_lettered(hierarchy):
    from edge.agent import read_jsonl

    wait_for(lambda: hierarchy.mdr.stats("door1").get("rows_in", 0) > 0, 120, "door1 to consume readings")
    hierarchy.agent.stop()
    produced = readings_per_node(read_jsonl(hierarchy.readings_path))

    def balanced():
        stats = {n: hierarchy.mdr.stats(n) for n in produced}
        return all(s.get("rows_in", 0) + s.get("dead", 0) == produced[n] for n, s in stats.items())

    wait_for(balanced, 60, f"edge nodes to account for every produced reading {produced}")
    assert all(hierarchy.mdr.stats(n).get("dead", 0) == 0 for n in produced)


def test_node_grpc_api_health_and_reflection(hierarchy):
    address = hierarchy.nodes["door1"].address
    with grpc.insecure_channel(address) as channel:
        health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service="hifi.Node"))
        assert health.status == health_pb2.HealthCheckResponse.SERVING
        node = hifi_pb2_grpc.NodeStub(channel)
        status = node.Status(hifi_pb2.Empty())
        assert (status.node, status.tier, status.parent) == ("door1", "edge", "warehouse")
        assert status.rows_in > 0
        views = {v.name: v for v in node.ListViews(hifi_pb2.Empty()).views}
        assert views["smoothed_rfid_stream"].topic == "hifi.view.door1.smoothed_rfid_stream"
        assert views["smoothed_rfid_stream"].window == "tumbling 2s"
        assert views["cleaned_rfid_stream"].topic == ""
        queries = node.ListQueries(hifi_pb2.Empty()).queries
        assert [(q.query_id, q.status) for q in queries] == [("view.smoothed_rfid_stream", "running")]
        with pytest.raises(grpc.RpcError) as missing:
            node.Cancel(hifi_pb2.QueryRef(query_id="no-such-query"))
        assert missing.value.code() == grpc.StatusCode.NOT_FOUND
        with pytest.raises(grpc.RpcError) as bad:
            node.Deploy(hifi_pb2.DeployRequest(query_id="x", plan=hifi_pb2.Plan(format="hifi-plan/1", body="{")))
        assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "malformed plan" in bad.value.details()

        from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

        request = reflection_pb2.ServerReflectionRequest(list_services="")
        answer = next(reflection_pb2_grpc.ServerReflectionStub(channel).ServerReflectionInfo(iter([request])))
        names = {s.name for s in answer.list_services_response.service}
        assert {"hifi.Node", "grpc.health.v1.Health"} <= names


def _hifi(*args, env_extra=None):
    env = {**os.environ, **(env_extra or {})}
    hifi = os.path.join(os.path.dirname(sys.executable), "hifi")
    return subprocess.run([hifi, *args], capture_output=True, text=True, env=env, timeout=60)


def test_cli_tables_read_the_mdr(hierarchy):
    env = {"HIFI_REDIS_URL": hierarchy.redis_url}
    nodes = _hifi("nodes", env_extra=env)
    assert nodes.returncode == 0, nodes.stderr
    lines = {line.split()[0]: line.split() for line in nodes.stdout.splitlines()[2:]}
    assert set(lines) == {"door1", "door2", "warehouse", "hq"}
    assert lines["door1"][1:3] == ["edge", "warehouse"] and "alive" in lines["door1"]
    views = _hifi("views", env_extra=env)
    assert "hifi.view.warehouse.product_counts" in views.stdout and "(definition only)" in views.stdout
    status = _hifi("status", env_extra=env)
    door1 = next(line.split() for line in status.stdout.splitlines() if line.startswith("door1"))
    assert door1[2] == "alive" and int(door1[3]) > 0


def test_a_stopped_node_turns_dead(hierarchy):
    node = hierarchy.nodes["hq"]
    node._stop.set()  # stop heartbeating only: the MDR must notice by itself
    node._heartbeat.join(timeout=5)
    wait_for(lambda: not hierarchy.mdr.node("hq").alive, 15, "hq to turn dead after its heartbeat TTL")
    assert hierarchy.mdr.node("door1").alive


def test_bad_topology_is_refused_before_anything_starts(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("nodes:\n  - {id: a, tier: core}\n  - {id: b, tier: edge, parent: c}\n")
    started = time.monotonic()
    result = _hifi("up", "--topology", str(bad))
    assert result.returncode == 2
    assert "line 3: node 'b' names unknown parent 'c'" in result.stderr
    assert "Traceback" not in result.stderr
    assert time.monotonic() - started < 30
