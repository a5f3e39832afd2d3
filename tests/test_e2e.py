"""End to end: the default supply-chain topology on real Redis, broker and Spark, its standing
CSAVA views (clean and smooth at the doors, arbitrate at the warehouse, totals and validation at the
region, analysis at headquarters; HiFi SQL planned like queries) checked against the same SQL
evaluated centrally over the readings the agents published; plus the Node gRPC API and the hifi CLI against the running
hierarchy."""

import csv
import datetime as dt
import io
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import replace

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from base.plan import QUALITY_COLUMNS
from edge.truth import covered_windows, readings_per_node
from glue.topology import load_topology
from protos import hifi_pb2, hifi_pb2_grpc
from services.auth import open_channel
from services.part_signing import PartSigner
from services.paths import DEFAULT_TOPOLOGY
from tests.conftest import chromium, running_hierarchy, topic_rows, wait_for
from wire.codec import datetime_ms as _ms
from wire.windows import duration_ms

MIN_WINDOWS = 6


def tight_stock(topology, max_tags: int = 8):
    """The default topology with a dock expected to hold fewer tags than a pallet has: its stock
    alerts start and end with every pallet, so the checks on them are never empty."""
    relations = [replace(r, rows=tuple((location, low, max_tags) for location, low, _ in r.rows))
                 if r.name == "expected_stock" else r for r in topology.relations]
    return replace(topology, relations=relations)


@pytest.fixture(scope="module")
def hierarchy(servers, spark, tmp_path_factory):
    yield from running_hierarchy(tight_stock(load_topology(DEFAULT_TOPOLOGY)), servers,
                                 str(tmp_path_factory.mktemp("state")))


DOORS = ("inbound-dock", "outbound-door")
ARTIFACTS = os.environ.get("HIFI_TEST_ARTIFACTS",
                           os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "test-artifacts"))


def _rows(hierarchy, node: str, view: str) -> list[dict]:
    return topic_rows(hierarchy.bootstrap, f"hifi.view.{node}.{view}")


def _central(hierarchy, view: str, logged) -> list[dict]:
    """The topology's SQL of `view` evaluated centrally over every reading the agents published."""
    from glue.analyzer import analyze
    from glue.reference import Reference, rfid_readings
    from services.placement import load_catalog

    catalog = load_catalog(hierarchy.mdr)
    sql = next(v.sql for v in hierarchy.topology.views if v.name == view)
    return Reference(rfid_readings(logged), catalog).run(analyze(sql, catalog))


def _central_counts(hierarchy, logged) -> dict[tuple[int, str], int]:
    return {(r["window_start"], r["location"]): r["tags"] for r in _central(hierarchy, "location_counts", logged)}


def test_region_counts_per_location_equal_the_csava_chain_evaluated_centrally(hierarchy):
    """Clean and smooth at the doors, arbitrate at the warehouse, totals at the region."""
    from edge.agent import read_jsonl

    window_ms = duration_ms(hierarchy.topology.parameters["t1"])
    cycle_ms = hierarchy.agent.scenario.cycle_ms

    def scored_windows():
        rows = _rows(hierarchy, "region", "location_counts")
        logged = read_jsonl(hierarchy.readings_path)
        emitted = {_ms(r["window_start"]) for r in rows}
        covered = [w for w in covered_windows(logged, window_ms, cycle_ms) if w in emitted or
                   (emitted and min(emitted) < w < max(emitted))]
        return (rows, logged, covered) if len(covered) >= MIN_WINDOWS else None

    rows, logged, covered = wait_for(scored_windows, 240, f"{MIN_WINDOWS} closed windows at the region", 2)
    expected = _central_counts(hierarchy, logged)
    got = {(_ms(r["window_start"]), r["location"]): r["tags"] for r in rows}
    assert len(got) == len(rows), "a (window, location) was reported twice"
    for window in covered:
        for location in DOORS:
            want = expected.get((window, location), 0)
            assert got.get((window, location), 0) == want, (window, location, got.get((window, location)), want)
    assert sum(expected.get((w, loc), 0) for w in covered for loc in DOORS) > 0


def test_the_region_validates_counts_against_expected_stock_and_hq_analyzes_trends(hierarchy):
    """Validate: the alert stream holds exactly the region's counts outside the expected range.
    Analyze: hq's long windows hold the mean, fewest and most of the region's count windows."""
    from edge.agent import read_jsonl

    def closed_trends():
        trends = _rows(hierarchy, "hq", "location_trends")
        counts = _rows(hierarchy, "region", "location_counts")
        firsts = [_ms(r["window_start"]) for r in counts]
        # long windows whose every count window the region emitted after its first one
        whole = {_ms(t["window_start"]) for t in trends if firsts and _ms(t["window_start"]) > min(firsts)}
        return (trends, counts, whole) if whole else None

    trends, counts, whole = wait_for(closed_trends, 300, "a whole long window at hq", 3)
    region = {(_ms(r["window_start"]), r["location"]): r["tags"] for r in counts}
    logged = read_jsonl(hierarchy.readings_path)
    want_trends = {(t["window_start"], t["location"]): (t["mean_tags"], t["fewest_tags"], t["most_tags"], t["windows"])
                   for t in _central(hierarchy, "location_trends", logged)}
    for t in trends:
        key = (_ms(t["window_start"]), t["location"])
        if key[0] in whole:
            assert (t["mean_tags"], t["fewest_tags"], t["most_tags"], t["windows"]) == pytest.approx(want_trends[key])
    assert any(t["windows"] > 1 for t in trends if _ms(t["window_start"]) in whole)

    upto = max(w for w, _ in region) - 4000      # the alert query reads the region's counts a hop later
    want_alerts = {(a["window_start"], a["location"], a["tags"], a["change"])
                   for a in _central(hierarchy, "stock_alerts", logged) if a["window_start"] <= upto}
    assert {a[-1] for a in want_alerts} == {"start", "end"}, "every pallet should overflow the tight docks"

    def alerts_so_far():
        alerts = {(_ms(a["window_start"]), a["location"], a["tags"], a["change"])
                  for a in _rows(hierarchy, "region", "stock_alerts")}
        return {a for a in alerts if a[0] <= upto} == want_alerts or None

    wait_for(alerts_so_far, 60, f"the region's alerts to be {sorted(want_alerts)[:4]}...", 2)
    central = _central_counts(hierarchy, logged)   # and the region's counts are the central chain's
    differ = {key: (tags, central.get(key)) for key, tags in region.items()
              if key[0] <= upto - 4000 and central.get(key) != tags}
    assert not differ, f"(window, location): (region, central) differ: {sorted(differ.items())[:6]}"


def test_the_dock_motes_quality_equals_the_central_judgement_and_finds_the_dying_mote(hierarchy):
    """Values corrected by each mote's calibration offsets; dock-m3's battery starts failing 45 s into the
    scenario (deploy/scenarios/supply-chain.yaml)."""
    from edge.agent import read_jsonl
    from glue.reference import mote_quality_rows
    from services.emulation import receptors_for

    agent_start = hierarchy.agent.stats.started_ms
    dying_from = agent_start + 45_000

    def judged():
        rows = _rows(hierarchy, "door1", "mote_quality")
        late = [r for r in rows if _ms(r["window_start"]) > dying_from + 5000]
        return rows if late else None

    rows = wait_for(judged, 240, "mote quality 50 s into the run", 3)
    positions = {r.id: (r.x, r.y) for r in receptors_for(hierarchy.topology, hierarchy.agent.scenario)
                 if r.kind == "mote"}
    offsets = {m.receptor_id: dict(m.offset) for m in hierarchy.agent.scenario.motes}   # calibration, per the MDR
    columns = tuple(name for name, _ in QUALITY_COLUMNS[2:])   # receptor_id, faulty, ..., every quantity
    upto = max(_ms(r["window_start"]) for r in rows) - 2000
    got = sorted((_ms(r["window_start"]), *(r[c] for c in columns)) for r in rows if _ms(r["window_start"]) <= upto)
    logged = read_jsonl(hierarchy.readings_path)
    want = sorted((_ms(row[0]), *row[2:]) for row in mote_quality_rows(logged, 1000, positions, offsets)
                  if _ms(row[0]) <= upto)
    assert got == want and len(got) > 100
    raw = {(s["timestamp_ms"] // 1000 * 1000, s["receptor_id"]): s["values"]["temperature"]
           for line in logged for s in line.get("samples", ())}
    corrected = [(t, mote, temperature) for t, mote, _, _, _, temperature, *_ in got if temperature is not None]
    assert any(raw[(t, mote)] != temperature for t, mote, temperature in corrected)
    verdicts = {(t, mote): faulty for t, mote, faulty, *_ in got}
    assert any(faulty for (t, mote), faulty in verdicts.items() if mote == "dock-m3" and t >= dying_from)
    healthy = [faulty for (t, mote), faulty in verdicts.items() if mote != "dock-m3"]
    assert sum(healthy) <= 0.05 * len(healthy)


def test_alerts_appear_in_hifi_query_results(hierarchy):
    plan = hierarchy.placement.submit("SELECT window_start, location, tags, max_tags FROM stock_alerts")
    try:
        assert plan.placement.root == "region", plan.explain()
        rows = wait_for(lambda: topic_rows(hierarchy.bootstrap, plan.result_topic) or None, 180,
                        "alerts in the query's results", 2)
        assert all(r["tags"] > r["max_tags"] for r in rows)
        published = {(_ms(a["window_start"]), a["location"]) for a in _rows(hierarchy, "region", "stock_alerts")}
        assert {(_ms(r["window_start"]), r["location"]) for r in rows} <= published
    finally:
        hierarchy.placement.cancel(plan.query_id)


def test_the_dashboard_of_the_default_topology_in_chromium(hierarchy):
    """What `make run`'s dashboard shows, as an operator's browser draws it: every node of the
    supply chain alive on the tree, the users' views listed (the planner's own not), the region's
    alerts among the events; its screenshot (docs/images/dashboard.png is one) in the artifacts."""
    url = hierarchy.start_dashboard("127.0.0.1:0")
    browser = chromium("1500,1600")
    try:
        browser.get(f"{url}#token={hierarchy.admin_token}")
        states = wait_for(lambda: browser.execute_script(
            "return Object.fromEntries([...document.querySelectorAll('#tree g.node')]"
            ".map(g => [g.dataset.node, g.dataset.state]))") or None, 60, "the tree drawn")
        assert states == dict.fromkeys(("door1", "door2", "warehouse", "region", "hq"), "alive")
        views = browser.execute_script("return [...document.querySelectorAll('#views li')].map(li => li.dataset.view)")
        assert "region.stock_alerts" in views and not [v for v in views if re.search(r"\.(producer|smooth_q)", v)]
        wait_for(lambda: browser.execute_script("return document.querySelectorAll('#events li[data-kind=alert]')"
                                                ".length"), 120, "the region's alerts among the events")
        os.makedirs(ARTIFACTS, exist_ok=True)
        browser.save_screenshot(os.path.join(ARTIFACTS, "dashboard-supply-chain.png"))
    finally:
        browser.quit()


def test_readings_produced_equal_consumed_plus_dead_lettered(hierarchy):
    from edge.agent import read_jsonl

    wait_for(lambda: hierarchy.mdr.stats("door1").get("rows_in", 0) > 0, 120, "door1 to consume readings")
    hierarchy.agent.stop()
    produced = readings_per_node(read_jsonl(hierarchy.readings_path))

    def balanced():
        stats = {n: hierarchy.mdr.stats(n) for n in produced}
        return all(s.get("rows_in", 0) + s.get("dead", 0) == produced[n] for n, s in stats.items())

    wait_for(balanced, 120, lambda: f"edge nodes to account for every produced reading {produced}: "
                               f"{ {n: hierarchy.mdr.stats(n) for n in produced} }")
    assert all(hierarchy.mdr.stats(n).get("dead", 0) == 0 for n in produced)


def test_node_grpc_api_health_and_reflection(hierarchy):
    address = hierarchy.nodes["door1"].address
    with open_channel(address, hierarchy.security) as channel:
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
        # its views, and the door's share of the warehouse's arbitration (its pane partials)
        from glue.standing import standing_views

        parts = [t.query_id for s in standing_views(hierarchy.topology) for t in s.tasks if t.node == "door1"]
        assert sorted((q.query_id, q.status) for q in queries) == sorted(
            (query_id, "running") for query_id in ["view.mote_quality", *parts])
        assert "view.smoothed_rfid_stream" in parts and any(p.startswith("view.producer_") for p in parts)
        with pytest.raises(grpc.RpcError) as missing:
            issued = int(time.time() * 1000)
            signature = PartSigner(hierarchy.security.tls_dir).sign_cancel("door1", "no-such-query", issued)
            node.Cancel(hifi_pb2.CancelRequest(query_id="no-such-query", issued_ms=issued, signature=signature))
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
    assert set(lines) == {"door1", "door2", "warehouse", "region", "hq"}
    assert lines["door1"][1:3] == ["edge", "warehouse"] and "alive" in lines["door1"]
    views = _hifi("views", env_extra=env)
    assert "hifi.view.warehouse.product_counts" in views.stdout and "(definition only)" in views.stdout
    status = _hifi("status", env_extra=env)
    door1 = next(line.split() for line in status.stdout.splitlines() if line.startswith("door1"))
    assert door1[2] == "alive" and int(door1[3]) > 0


def test_every_listing_command_prints_json_and_csv_for_programs(hierarchy):
    """`--format json` (a JSON object a line; status: one object of its tables) and `--format csv`
    on every listing command: the same rows as the table, times in ISO 8601 with their offset."""
    env = {"HIFI_REDIS_URL": hierarchy.redis_url}

    def listed(*args: str) -> str:
        done = _hifi(*args, env_extra=env)
        assert done.returncode == 0, done.stderr
        return done.stdout

    nodes = [json.loads(line) for line in listed("nodes", "--format", "json").splitlines()]
    assert {n["node"] for n in nodes} == {"door1", "door2", "warehouse", "region", "hq"}
    door1 = next(n for n in nodes if n["node"] == "door1")
    assert door1["parent"] == "warehouse" and door1["state"] == "alive" and door1["starts"] >= 1
    assert dt.datetime.fromisoformat(door1["up_since"]).tzinfo is not None
    views = [json.loads(line) for line in listed("views", "--format", "json").splitlines()]
    assert any(v["view"] == "product_counts" and v["node"] == "warehouse" for v in views)
    rows = list(csv.DictReader(io.StringIO(listed("views", "--format", "csv"))))
    assert sorted((r["view"], r["node"]) for r in rows) == sorted((v["view"], v["node"]) for v in views)
    assert list(csv.reader(io.StringIO(listed("nodes", "--format", "csv"))))[0][:3] == ["node", "tier", "parent"]
    status = json.loads(listed("status", "--format", "json"))
    assert {n["node"] for n in status["nodes"]} == {n["node"] for n in nodes} and "problems" in status
    # narrowed, as on a large hierarchy: the edges and their receptors; one door and a line for the rest
    edges = json.loads(listed("status", "--tier", "edge", "--format", "json"))
    assert {n["node"] for n in edges["nodes"]} == {"door1", "door2"} and edges["receptors"]
    assert {r["node"] for r in edges["receptors"]} <= {"door1", "door2"} and not edges["queries"]
    doors = listed("nodes", "--node", "door*", "--limit", "1").splitlines()
    assert len(doors) == 4 and doors[-1].startswith("… 1 more nodes"), doors   # header, rule, a door, the line
    for command in (("queries",), ("users", "list"), ("motes",)):
        for line in listed(*command, "--format", "json").splitlines():
            json.loads(line)

    # a user with only a token (no MDR URL) lists through the placement service: every node, and
    # the views it may read
    from services.auth import mint_token
    from wire.identity import Identity

    token = mint_token(hierarchy.mdr, "lister", ("user",), 0)
    env = {"HIFI_REDIS_URL": "", "HIFI_PLACEMENT": hierarchy.placement_address, "HIFI_TOKEN": token,
           "HIFI_TLS_DIR": hierarchy.tls_dir}
    remote = [json.loads(line) for line in listed("nodes", "--format", "json").splitlines()]
    assert {n["node"] for n in remote} == {n["node"] for n in nodes}
    lister = Identity("lister", frozenset({"user"}))
    readable = {(v.name, v.node) for v in hierarchy.mdr.views() if lister.may_read(v.readers)}
    shown = {(v["view"], v["node"]) for v in map(json.loads, listed("views", "--format", "json").splitlines())}
    assert shown == readable and shown != {(v.name, v.node) for v in hierarchy.mdr.views()}
    assert "door1" in listed("status")


def test_the_python_client_submits_explains_lists_reads_and_cancels(hierarchy):
    """hifi.Client against the live hierarchy: a windowed count read as dicts, Arrow batches and a
    pandas DataFrame, each row a real window of the doors' readers (replayed from the sources'
    beginning: an earlier test stopped the agents); the query listed while it runs and gone once
    cancelled; a bad statement and a bad token each one line, no traceback."""
    from hifi import Client, ClientError

    sql = "SELECT receptor_id, count(*) AS n FROM rfid_stream [range by '2 seconds'] GROUP BY receptor_id"
    with Client.connect(hierarchy.placement_address, hierarchy.tls_dir, hierarchy.admin_token) as hifi:
        assert hifi.explain(sql).startswith("query ") and "root warehouse" in hifi.explain(sql)
        query = hifi.submit(sql, replay=True)
        assert query.columns == ("window_start", "window_end", "receptor_id", "n")
        assert query.id in {q["query_id"] for q in hifi.queries()}
        rows = list(hifi.results(query, limit=4, timeout=60))
        assert len(rows) == 4 and all(r["n"] > 0 and isinstance(r["window_start"], dt.datetime) for r in rows)
        batches = list(hifi.batches(query, rows_per_batch=2, limit=4, timeout=60))
        assert [b.num_rows for b in batches] == [2, 2] and batches[0].schema.names == list(query.columns)
        hifi.cancel(query)
        assert query.id not in {q["query_id"] for q in hifi.queries()}
        frame = hifi.frame(sql, limit=3, timeout=60, replay=True)
        assert list(frame.columns) == list(query.columns) and len(frame) == 3 and (frame["n"] > 0).all()
        with pytest.raises(ClientError, match=r"INVALID_ARGUMENT: .*line 1, column \d+"):
            hifi.submit("SELECT nothing FROM nowhere")
        nodes = hifi.listing("nodes")["nodes"]
        assert {n["node"] for n in nodes} == {"door1", "door2", "warehouse", "region", "hq"}
        assert all(isinstance(n["up since"], dt.datetime) for n in nodes)
        assert {"nodes", "receptors", "queries"} <= set(hifi.listing("status"))
    with Client(hierarchy.placement_address, hierarchy.tls_dir, "hifi_not-a-token") as stranger, \
            pytest.raises(ClientError, match="UNAUTHENTICATED"):
        stranger.queries()


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
