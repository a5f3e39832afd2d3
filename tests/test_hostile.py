"""Hostile input against a live hierarchy (real Redis, broker and Spark): every malformed kind on
every input topic kind, 10 000 seeded-random corrupted records mixed into the agents' traffic,
replayed read cycles, an outlier timestamp, garbage on a dead-letter topic, and 500 malformed or
over-limit queries. Afterwards every record published to an edge is accounted for exactly
(accepted, dead-lettered or dropped as a duplicate), no query restarted, and the running query's
answers equal the reference over the agents' own readings."""

from __future__ import annotations

import datetime as dt
import math
import os
import random
import re
import socket
import subprocess
import sys
import time
from urllib.parse import urlsplit

import grpc
import pytest
from google.protobuf.message import DecodeError

from base.plan_schema import output_columns
from edge.agent import read_jsonl
from glue.topology import parse_topology
from protos import hifi_pb2
from tests.conftest import running_hierarchy, topic_records, wait_for
from tests.judge import assert_equal_to_reference
from wire.codec import RECORD_TYPE_HEADER, SENSOR_BATCH, Sample, encode_row_batch, encode_sensor_batch
from wire.kafka import offsets, producers
from wire.topics import dead_topic, raw_topic

# Node ids of its own: the suite's broker keeps every topic, and these get garbage.
TOPOLOGY = """
name: hostile
parameters: {strength_T: 0.2, count_T: 1, t1: 2 seconds, t2: 2 seconds, level_lateness: 2 seconds}
nodes:
  - {id: hx-core, tier: core}
  - {id: hx-a, tier: edge, parent: hx-core}
  - {id: hx-b, tier: edge, parent: hx-core}
receptors:
  - {id: hx-a-r1, kind: rfid, node: hx-a, location: inbound-dock, area: north, x: 0.0, y: 0.0}
  - {id: hx-b-r1, kind: rfid, node: hx-b, location: outbound-door, area: north, x: 10.0, y: 0.0}
  - {id: hx-b-r2, kind: rfid, node: hx-b, location: outbound-door, area: north, x: 12.0, y: 0.0}
relations:
  - {name: receptor_locations, columns: [[receptor_id, string], [location, string]], replicas: ["*"]}
scenario:
  name: hostile
  seed: 5
  cycle: 200 ms
  world: {pallets: 3, arrival_gap: 6 seconds, dwell: 8 seconds, repeat: true}
  readers:
    - {id: hx-a-r1, node: hx-a, location: inbound-dock, antennas: 2, ghost_rate: 0.05}
    - {id: hx-b-r1, node: hx-b, location: outbound-door, antennas: 2}
    - {id: hx-b-r2, node: hx-b, location: outbound-door, antennas: 2}
"""
EDGES = {"hx-a": ("hx-a-r1",), "hx-b": ("hx-b-r1", "hx-b-r2")}
QUERY = ("SELECT receptor_id, count(*) AS n, count(DISTINCT tag_id) AS tags, max(read_strength) / 0 AS nothing "
         "FROM rfid_stream [range by '2 seconds'] GROUP BY receptor_id")
RANDOM_RECORDS = 10_000
POSITION = re.compile(r"line \d+, column \d+: ")


@pytest.fixture(scope="module")
def hierarchy(servers, spark, tmp_path_factory):
    running = running_hierarchy(parse_topology(TOPOLOGY), servers, str(tmp_path_factory.mktemp("state")))
    hierarchy = next(running)
    hierarchy.start_dashboard()
    yield hierarchy
    next(running, None)


def _cycle(receptor: str, cycle: int, ts: int, reads=(("urn:epc:id:sgtin:0614141.812345.1", 1, 0.5),)) -> bytes:
    msg = hifi_pb2.RfidReadCycle(receptor_id=receptor, cycle=cycle, timestamp_ms=ts)
    for tag, antenna, strength in reads:
        msg.reads.add(tag_id=tag, antenna=antenna, read_strength=strength)
    return msg.SerializeToString()


def _malformed_raw(edge: str, other_edge_receptor: str, now: int, serial: int) -> list[tuple[bytes | None, list, str]]:
    """(value, headers, the reason's words) of one record of every malformed kind on a raw topic."""
    own = EDGES[edge][0]
    garbage_batch = b"\xff\xfe not a sensor batch"
    _, unknown_mote = encode_sensor_batch(edge, 1, [Sample("no-such-mote", 1, now, {"temperature": 20.0})])
    sensor = [(RECORD_TYPE_HEADER, SENSOR_BATCH)]
    base = 10**8 + serial * 100
    return [
        (None, [], "tombstone"),
        (b"\xff\xfe\xfd garbage", [], "undecodable"),
        (_cycle("no-such-reader", base, now), [], "not registered"),
        (_cycle(other_edge_receptor, base + 1, now), [], "belongs to edge node"),
        (_cycle(own, base + 2, now + 55_000), [], "ahead of the record's arrival"),   # the outlier
        (_cycle(own, base + 3, now - 7_200_000), [], "older than the record's arrival"),
        (_cycle(own, base + 4, now, (("t", 1, math.nan),)), [], "read_strength is nan"),
        (_cycle(own, base + 5, now, (("t", 1, -0.5),)), [], "negative read_strength"),
        (_cycle(own, base + 6, now, (("", 1, 0.5),)), [], "missing tag_id"),
        (_cycle("", base + 7, now), [], "missing receptor_id"),
        (_cycle(own, base + 8, 0), [], "non-positive timestamp_ms"),
        (garbage_batch, sensor, "undecodable SensorBatch"),
        (unknown_mote, sensor, "not registered"),
    ]


def _random_corrupt(rng: random.Random, edge: str, now: int, n: int) -> bytes | None:
    """One record every reader must refuse, of a kind drawn at random."""
    own = EDGES[edge][rng.randrange(len(EDGES[edge]))]
    kind = rng.randrange(6)
    if kind == 0:
        while True:   # random bytes that do not parse as a read cycle (checked with protobuf itself)
            value = rng.randbytes(rng.randrange(1, 120))
            try:
                hifi_pb2.RfidReadCycle().ParseFromString(value)
            except DecodeError:
                return value
    if kind == 1:
        return _cycle(f"fuzz-{rng.randrange(10**6)}", n, now)
    if kind == 2:
        return _cycle(own, 10**9 + n, now + rng.choice((-1, 1)) * rng.randrange(3_600_000, 10 * 86_400_000))
    if kind == 3:
        strength = rng.choice((math.nan, math.inf, -math.inf, -rng.random() - 0.01))
        return _cycle(own, 10**9 + n, now, (("urn:epc:id:sgtin:1.2.3", 1, 0.5), ("t", 2, strength)))
    if kind == 4:
        return _cycle(own, 10**9 + n, now, (("", rng.randrange(4), 0.5),))
    return None


def _bad_view_records(columns: list[tuple[str, str]], now: int) -> list[bytes | None]:
    """Records a child's view topic must not carry: every one is refused by its reader."""
    names = [name for name, _ in columns]
    future = dt.datetime.fromtimestamp(now / 1000 + 3600, tz=dt.UTC)
    typed = {"timestamp": future, "string": "x", "long": 1, "int": 1, "double": 1.0, "boolean": True}

    def value(kind: str):
        return ["x"] if kind.startswith("array") else typed[kind]

    wrong = ["not a time" if kind == "timestamp" else value(kind) for _, kind in columns]
    return [
        None,
        b"\x00\xff not a row batch",
        encode_row_batch("evil", "v", names, [wrong], 1, now),                     # a string where a timestamp goes
        encode_row_batch("evil", "v", names[1:], [[value(k) for _, k in columns[1:]]], 2, now),   # a column missing
        encode_row_batch("evil", "v", names, [[value(k) for _, k in columns]], 3, now),   # window an hour ahead
        encode_row_batch("evil", "v", [], [], 4, now, watermark_ms=now + 3_600_000),       # a marker an hour ahead
    ]


def _send(producer, topic: str, records, key: bytes = b"hostile") -> int:
    for value, headers in records:
        producer.send(topic, key=key, value=value, headers=headers or None)
    return len(records)


def _hifi(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    hifi = os.path.join(os.path.dirname(sys.executable), "hifi")
    return subprocess.run([hifi, *args], capture_output=True, text=True, timeout=120, input=stdin,
                          env={**os.environ, "HIFI_PLACEMENT": "", "HIFI_REDIS_URL": ""})


def test_a_failing_part_shows_as_failed_everywhere_and_ends_its_results_stream(hierarchy, tmp_path):
    """A part that keeps dying (here its sink's hook raises, as a full disk would) is FAILED with
    its cause in `hifi queries`, `hifi status` and the placement's List, and the results stream of
    its query ends with an error instead of waiting forever."""
    hierarchy.write_run_file()
    plan = hierarchy.placement.submit("SELECT receptor_id, count(*) AS n FROM rfid_stream [range by '2 seconds'] "
                                      "GROUP BY receptor_id")
    task = next(t for t in plan.tasks if t.role == "producer" and t.node == "hx-a")
    def broken(report) -> None:
        raise RuntimeError("disk full (injected)")

    hierarchy.nodes["hx-a"].dsp.part(task.query_id).on_batch = broken
    stub = hierarchy.placement_stub()
    try:
        with pytest.raises(grpc.RpcError) as error:
            for _ in stub.Results(hifi_pb2.QueryRef(query_id=plan.query_id), timeout=150):
                pass
        assert error.value.code() == grpc.StatusCode.ABORTED, error.value.details()
        assert f"hx-a/{task.query_id}" in error.value.details() and "disk full" in error.value.details()
        listed = {q.query_id: q for q in stub.List(hifi_pb2.Empty()).queries}
        assert listed[plan.query_id].status == "FAILED" and "disk full" in listed[plan.query_id].error
        queries = _hifi("queries")
        assert queries.returncode == 0 and "FAILED" in queries.stdout and "disk full" in queries.stdout
        status = _hifi("status")
        assert re.search(r"^hx-a\s+edge\s+FAILED", status.stdout, re.MULTILINE), status.stdout
    finally:
        hierarchy.placement.cancel(plan.query_id)

    # the statement from a file or standard input; a bad one gets its position, no stack trace
    explained = _hifi("query", "--explain", "--file", "-", stdin=QUERY)
    assert explained.returncode == 0 and "root hx-core" in explained.stdout, explained.stderr
    bad = tmp_path / "bad.sql"
    bad.write_text("SELECT receptor_id\nFROM rfid_stream [range by '2 seconds', slide by '1 ms']\nGROUP BY receptor_id")
    refused = _hifi("query", "--file", str(bad))
    assert refused.returncode == 2 and "line 2, column" in refused.stderr and "Traceback" not in refused.stderr
    assert "limit_windows_per_row" in refused.stderr

    # the dashboard answers a malformed request at once instead of blocking a thread on it
    host, port = urlsplit(hierarchy.dashboard.url).netloc.split(":")
    for length in ("-1", "banana", str(10**9)):
        with socket.create_connection((host, int(port)), timeout=5) as conn:
            conn.sendall(f"POST /api/explain HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Length: {length}\r\n"
                         f"Authorization: Bearer {hierarchy.admin_token}\r\n\r\n".encode())
            answer = conn.recv(200).decode()
        assert answer.startswith(("HTTP/1.1 400", "HTTP/1.1 413")), (length, answer)


def test_hostile_input_is_refused_counted_and_harmless(hierarchy, servers):
    bootstrap = servers.bootstrap
    plan = hierarchy.placement.submit(QUERY)
    producer_parts = [t for t in plan.tasks if t.role == "producer"]
    assert plan.placement.root == "hx-core" and len(producer_parts) == 2, plan.explain()
    producer = producers.make_producer(bootstrap)
    refused = {edge: 0 for edge in EDGES}
    duplicates = {edge: 0 for edge in EDGES}
    now = int(time.time() * 1000)

    # one of every malformed kind on each raw topic, with the reasons they must be refused for
    expected_reasons: dict[str, list[str]] = {}
    for serial, edge in enumerate(EDGES):
        other = next(r for e, rs in EDGES.items() if e != edge for r in rs)
        cases = _malformed_raw(edge, other, now, serial)
        expected_reasons[edge] = [reason for _, _, reason in cases]
        refused[edge] += _send(producer, raw_topic(edge), [(v, h) for v, h, _ in cases])
    # children's view topics (the producers' pane partials, markers among them) and a dead-letter topic
    view_refusals = 0
    for task in producer_parts:
        view_refusals += _send(producer, task.topic, [(v, None) for v in _bad_view_records(
            list(output_columns(task.plan)), now)])
    _send(producer, dead_topic("hx-a"), [(b"\xff not a dead letter", None), (None, None)])
    producer.flush()

    # read cycles the agents sent, sent again four times each: duplicates
    for edge in EDGES:
        recent = [r for r in topic_records(bootstrap, raw_topic(edge)) if r.key != b"hostile"][-15:]
        for record in recent:
            for _ in range(4):
                producer.send(raw_topic(edge), key=record.key, value=record.value)
        duplicates[edge] += 4 * len(recent)

    # 10 000 seeded-random corrupted records mixed into the traffic, 500 a second
    rng = random.Random(16)
    for n in range(RANDOM_RECORDS):
        edge = rng.choice(list(EDGES))
        producer.send(raw_topic(edge), key=b"hostile", value=_random_corrupt(rng, edge, int(time.time() * 1000), n))
        refused[edge] += 1
        if n % 500 == 499:
            producer.flush()
            time.sleep(1.0)
    producer.flush()

    # 500 malformed or over-limit queries while it runs: each refused with a position within 1 s
    stub = hierarchy.placement_stub()
    for sql in _bad_queries(random.Random(9), 500):
        started = time.monotonic()
        with pytest.raises(grpc.RpcError) as error:
            stub.Submit(hifi_pb2.SubmitRequest(sql=sql), timeout=10)
        took = time.monotonic() - started
        assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT, (sql[:200], error.value.details())
        assert POSITION.match(error.value.details()), (sql[:200], error.value.details())
        assert took < 1.0, (sql[:200], took)

    # the running query's answers equal the reference over the agents' readings (none was lost to
    # the outlier, none doubled by a replayed cycle); max(...) / 0 is NULL, not a failure
    assert_equal_to_reference(hierarchy, plan)
    rows = [r for r in hierarchy.mdr.queries() if r.id == plan.query_id]
    assert rows and rows[0].status == "running"

    hierarchy.agent.stop()
    readings = read_jsonl(hierarchy.readings_path)
    for edge, receptors in EDGES.items():
        cycles = [c for c in readings if c.get("receptor") in receptors and "reads" in c]
        published = offsets.current_ends(bootstrap, [raw_topic(edge)])[offsets.offset_key(raw_topic(edge), 0)]
        assert published == len(cycles) + refused[edge] + duplicates[edge]
        stats = wait_for(lambda e=edge, p=published: (s := hierarchy.mdr.stats(e)) and
                         s.get("cycles_in", 0) + s.get("dead", 0) + s.get("duplicates", 0) == p and s, 90,
                         f"{edge}'s listener to account for every record")
        assert (stats["cycles_in"], stats["dead"], stats["duplicates"]) == (len(cycles), refused[edge],
                                                                           duplicates[edge])
        assert stats["rows_in"] == sum(len(c["reads"]) for c in cycles)
        letters = [hifi_pb2.DeadLetter.FromString(r.value) for r in topic_records(bootstrap, dead_topic(edge))
                   if r.key != b"hostile"]
        assert len(letters) == refused[edge]
        for reason in expected_reasons[edge]:
            assert any(reason in letter.reason for letter in letters), reason
    core = wait_for(lambda: (s := hierarchy.mdr.stats("hx-core")).get("dead") == view_refusals and s, 60,
                    "the core to dead-letter each refused view record once")
    assert core["dead"] == view_refusals
    core_letters = [r for r in topic_records(bootstrap, dead_topic("hx-core"))]
    assert len(core_letters) == view_refusals

    restarted = [(node.id, q.query_id, q.restarts, q.status) for node in hierarchy.nodes.values()
                 for q in node.dsp.queries() if q.restarts or q.status != "running"]
    assert not restarted
    # the dashboard passed over the garbage on the dead-letter topic and counts every real letter
    total = sum(int(hierarchy.mdr.stats(n).get("dead", 0)) for n in hierarchy.nodes)
    wait_for(lambda: hierarchy.dashboard.events.recent()[1].get("dead") == total, 60,
             "the dashboard to count every dead letter")
    hierarchy.placement.cancel(plan.query_id)


def _bad_queries(rng: random.Random, count: int) -> list[str]:
    """Malformed or over-limit statements of many kinds, drawn at random."""
    good = ("SELECT receptor_id, count(*) AS n FROM rfid_stream [range by '2 seconds'] "
            "WHERE read_strength > 0.2 GROUP BY receptor_id")
    makers = [
        lambda: good[:rng.randrange(1, len(good) - 20)] + " )",                          # cut short
        lambda: good.replace("receptor_id", f"col_{rng.randrange(999)}", 1),             # unknown column
        lambda: good.replace("rfid_stream", f"stream_{rng.randrange(999)}"),             # unknown stream
        lambda: good.replace("'2 seconds'", f"'{rng.randrange(2, 24)} hours', slide by '{rng.randrange(1, 50)} ms'"),
        lambda: good.replace("'2 seconds'", f"'{rng.randrange(10, 90)} ms'"),             # panes too small
        lambda: good.replace("read_strength > 0.2",
                             "(" * (d := rng.randrange(40, 400)) + "read_strength > 0.2" + ")" * d),
        lambda: good.replace("read_strength > 0.2", "NOT " * rng.randrange(40, 2000) + "read_strength > 0.2"),
        lambda: good.replace("read_strength > 0.2", " + ".join(["read_strength"] * rng.randrange(200, 3000)) + " > 1"),
        lambda: good + " " + "-- padding\n" * rng.randrange(6000, 9000),                # text too long
        lambda: f"CREATE VIEW \"{rng.choice(['../../evil name', 'a b', 'x/y', 'dots.in.it'])}\" AS ({good})",
        lambda: good.replace("GROUP BY", rng.choice(["GROUP", "BY GROUP", "HAVING BY", ", GROUP BY"])),
        lambda: good.replace("count(*)", rng.choice(["count(**)", "median(read_strength)", "sum(*)"])),
    ]
    return [rng.choice(makers)() for _ in range(count)]


def test_a_submitted_query_is_planned_once(hierarchy, monkeypatch):
    """The service plans a live query without its start, reads its inputs' ends and applies the
    start to that plan (glue.planner.start_from): one planner run per Submit (issue 69: two)."""
    import services.placement

    runs = []
    planner = services.placement.plan_query
    monkeypatch.setattr(services.placement, "plan_query", lambda *a, **k: runs.append(a[2]) or planner(*a, **k))
    plan = hierarchy.placement.submit("SELECT receptor_id, count(*) AS n FROM rfid_stream [range by '2 seconds'] "
                                      "GROUP BY receptor_id")
    try:
        assert runs == [plan.query_id] and plan.start_ms is not None and plan.start_ms <= time.time() * 1000
        assert f"{plan.start_ms}" in repr(plan.tasks[-1].plan), "the root answers from its start"
    finally:
        hierarchy.placement.cancel(plan.query_id)
