"""HiFi SQL through the real hierarchy (Redis, broker, Spark), judged by the reference evaluator.

Each query is submitted to the placement service of a running supply-chain hierarchy; its
results topic is compared, window by window and key by key, with the centralized evaluation of
the same query over the readings the agents really emitted. A query answers from its submission
on, so every window it emitted is compared (the reference computes them from all readings).
"""

from __future__ import annotations

import datetime as dt
import os
import re
import subprocess
import sys
import time

import grpc
import pytest

from glue.topology import load_topology
from protos import hifi_pb2
from services.judge import as_ms
from services.paths import DEFAULT_TOPOLOGY
from tests import independent
from tests.conftest import running_hierarchy, topic_names, topic_rows, wait_for
from tests.judge import assert_equal_to_reference


@pytest.fixture(scope="module")
def hierarchy(servers, spark, tmp_path_factory):
    # Only the edges' CSAVA views (the queries below read smoothed_rfid_stream), not the views placed
    # at named nodes (the dock's mote quality and people in danger): the suite runs lean, and no
    # standing view reads the dock's motes, so the sensor proxy's effect shows.
    topology = load_topology(DEFAULT_TOPOLOGY)
    topology.views = [v for v in topology.views if v.tiers == ("edge",) and not v.nodes]
    yield from running_hierarchy(topology, servers, str(tmp_path_factory.mktemp("state")))


QUERIES = {
    "sliding, range a multiple of slide": (
        "SELECT tag_id, count(*) AS n FROM rfid_stream [range by '4 seconds', slide by '2 seconds'] GROUP BY tag_id",
        "warehouse"),
    "static-relation join at the edge": (
        "SELECT location, count(DISTINCT tag_id) AS tags FROM rfid_stream [range by '2 seconds'] "
        "JOIN receptor_locations USING (receptor_id) GROUP BY location", "warehouse"),
    "scope of one receptor: root at its edge": (
        "SELECT tag_id, count(*) AS n FROM rfid_stream [range by '2 seconds'] WHERE receptor_id = 'door1-r1' "
        "GROUP BY tag_id", "door1"),
    "the paper's product_counts over the edges' smoothed view": (
        "CREATE VIEW product_counts_sql AS (SELECT receptor_id, count (distinct tag_id) FROM smoothed_rfid_stream rs "
        "[range by 't1', slide by 't2'] GROUP BY receptor_id, tag_id HAVING count(*) >= ALL (SELECT count(*) "
        "FROM smoothed_rfid_stream [range by 't1', slide by 't2'] WHERE tag_id = rs.tag_id GROUP BY receptor_id))",
        "warehouse"),
    "a view as source, a coarser window": (
        "SELECT receptor_id, count(*) AS seen FROM smoothed_rfid_stream [range by '4 seconds'] GROUP BY receptor_id",
        "warehouse"),
    "scope by location through the join: root at that door": (
        "SELECT location, min(read_strength) AS weakest FROM rfid_stream [range by '4 seconds', slide by '2 seconds'] "
        "JOIN receptor_locations USING (receptor_id) WHERE location = 'outbound-door' GROUP BY location", "door2"),
    "the paper's smoothed view as CREATE VIEW over the definition-only cleaned view": (
        "CREATE VIEW smoothed_sql AS (SELECT receptor_id, tag_id FROM cleaned_rfid_stream [range by 't1', "
        "slide by 't2'] GROUP BY receptor_id, tag_id HAVING count(*) >= count_T)", "warehouse"),
    "selection and projection only": (
        "SELECT receptor_id, tag_id, read_strength, ts FROM rfid_stream WHERE read_strength > 0.75", "warehouse"),
    "selection with arithmetic, NOT and a scope of one receptor": (
        "SELECT tag_id, read_strength * 100 AS pct, ts FROM rfid_stream WHERE receptor_id = 'door2-r1' "
        "AND NOT antenna = 2", "door2"),
    "scope by IN across doors: root at their ancestor": (
        "SELECT tag_id, count(*) AS n FROM rfid_stream [range by '2 seconds'] "
        "WHERE receptor_id IN ('door1-r2', 'door2-r1') GROUP BY tag_id", "warehouse"),
    "a view as source, sliding over its tumbling windows": (
        "SELECT tag_id, count(*) AS receptors FROM smoothed_rfid_stream [range by '6 seconds', slide by '2 seconds'] "
        "GROUP BY tag_id", "warehouse"),
    "a view as source scoped to one receptor: root at its edge": (
        "SELECT tag_id, count(*) AS windows FROM smoothed_rfid_stream [range by '4 seconds'] "
        "WHERE receptor_id = 'door1-r2' GROUP BY tag_id", "door1"),
    "adaptive smoothing, tags per location through the join (clean, smooth, count in SQL)": (
        "SELECT location, count(DISTINCT tag_id) AS tags FROM rfid_stream [adaptive epoch '1 second'] "
        "JOIN receptor_locations USING (receptor_id) WHERE read_strength >= 0.2 GROUP BY location", "warehouse"),
    "adaptive smoothing of one receptor's readings, the smoothed rows selected: root at its edge": (
        "SELECT receptor_id, tag_id, reads, epochs, window_start FROM cleaned_rfid_stream "
        "[adaptive epoch '1 second', delta 0.1] WHERE receptor_id = 'door1-r1'", "door1"),
    "EPC decoding: distinct units per product, grouped by a computed key": (
        "SELECT product(tag_id) AS product, count(DISTINCT tag_id) AS units FROM rfid_stream [range by '4 seconds'] "
        "WHERE read_strength >= 0.2 GROUP BY product", "warehouse"),
    "a definition-only view as source (cleaned), ratio of two aggregates": (
        "SELECT receptor_id, count(DISTINCT tag_id) * 1.0 / count(*) AS distinct_share FROM cleaned_rfid_stream "
        "[range by '2 seconds'] GROUP BY receptor_id", "warehouse"),
    "sensor_stream: the dock motes' temperature and humidity per mote (their door is the root)": (
        "SELECT receptor_id, avg(temperature) AS temperature, max(humidity) AS humidity, count(*) AS samples "
        "FROM sensor_stream [range by '4 seconds', slide by '2 seconds'] GROUP BY receptor_id", "door1"),
    "an event pattern across the doors: a strong read, then a weak one, with no very weak one between": (
        "SELECT a.tag_id AS tag_id, a.receptor_id AS first_at, a.ts AS start_ts, b.ts AS ts FROM rfid_stream "
        "PATTERN SEQ(a, NOT c, b) WITHIN '3 seconds' PARTITION BY tag_id "
        "DEFINE a AS read_strength >= 0.6, c AS read_strength < 0.15, b AS read_strength < 0.45", "warehouse"),
    "a window join: tags read at door1 and at door2 within a second, counted per window": (
        "SELECT count(DISTINCT a.tag_id) AS tags, count(*) AS pairs FROM rfid_stream a [range by '4 seconds'] "
        "JOIN rfid_stream b ON a.tag_id = b.tag_id AND b.ts BETWEEN a.ts - INTERVAL '1' SECOND AND "
        "a.ts + INTERVAL '1' SECOND WHERE a.receptor_id IN ('door1-r1', 'door1-r2') AND "
        "b.receptor_id IN ('door2-r1', 'door2-r2')", "warehouse"),
    "a second window join over the same inputs, windows of its own: it reads the first one's joined rows": (
        "SELECT count(*) AS pairs FROM rfid_stream a [range by '2 seconds'] JOIN rfid_stream b "
        "ON a.tag_id = b.tag_id AND b.ts BETWEEN a.ts - INTERVAL '1' SECOND AND a.ts + INTERVAL '1' SECOND "
        "WHERE a.receptor_id IN ('door1-r1', 'door1-r2') AND b.receptor_id IN ('door2-r1', 'door2-r2')", "warehouse"),
}


@pytest.fixture(scope="module")
def submitted(hierarchy):
    """Every query of QUERIES submitted at once, so their windows accumulate side by side (one
    after another they took seven minutes); each test below checks one and cancels it. Later ones
    may reuse or roll up the parts of earlier ones, as on a shared hierarchy."""
    plans = {name: hierarchy.placement.submit(sql) for name, (sql, _) in QUERIES.items()}
    yield plans
    running = {q.id for q in hierarchy.mdr.queries()}
    for plan in plans.values():
        if plan.query_id in running:
            hierarchy.placement.cancel(plan.query_id)


@pytest.mark.parametrize("name", list(QUERIES))
def test_hierarchical_answers_equal_the_reference(hierarchy, submitted, name):
    plan = submitted[name]
    try:
        assert plan.placement.root == QUERIES[name][1], plan.explain()
        assert_equal_to_reference(hierarchy, plan, twin=independent.TWINS.get(name))
    finally:
        hierarchy.placement.cancel(plan.query_id)


def test_a_window_join_over_a_running_ones_inputs_reads_its_joined_rows(submitted):
    first, second = (submitted[name] for name in list(QUERIES)[-2:])
    joins = [[t for t in plan.tasks if t.role == "join"] for plan in (first, second)]
    assert [t.reused for t in joins[1]] == [True] and joins[0][0].topic == joins[1][0].topic, second.explain()


def test_a_second_query_reuses_the_first_ones_views_and_outlives_its_cancel(hierarchy):
    sql = "SELECT tag_id, max(read_strength) AS best FROM rfid_stream [range by '2 seconds'] GROUP BY tag_id"
    first = hierarchy.placement.submit(sql)
    second = hierarchy.placement.submit(sql)
    producers = [t for t in second.tasks if t.role == "producer"]
    assert producers and all(t.reused for t in producers), second.explain()
    assert "reuses view" in second.explain()
    hierarchy.placement.cancel(first.query_id)
    views = {(v.node, v.name) for v in hierarchy.mdr.views()}
    assert all((t.node, t.export_as) in views for t in producers), "a view still in use was revoked"
    assert_equal_to_reference(hierarchy, second)
    hierarchy.placement.cancel(second.query_id)
    views = {(v.node, v.name) for v in hierarchy.mdr.views()}
    assert not any((t.node, t.export_as) in views for t in producers), "views nobody uses were left behind"
    running = {q.query_id for node in hierarchy.nodes.values() for q in node.dsp.queries()}
    assert not any(t.query_id in running for t in second.tasks)


def test_the_papers_three_views_chained_through_create_view(hierarchy):
    """cleaned (the topology's definition-only view) -> smoothed -> product_counts, each a view
    the next one reads; both created views equal their centralized evaluation."""
    smoothed = hierarchy.placement.submit(
        "CREATE VIEW smoothed_chain AS (SELECT receptor_id, tag_id FROM cleaned_rfid_stream "
        "[range by 't1', slide by 't2'] GROUP BY receptor_id, tag_id HAVING count(*) >= count_T)")
    counts = hierarchy.placement.submit(
        "CREATE VIEW product_counts_chain AS (SELECT receptor_id, count (distinct tag_id) FROM smoothed_chain rs "
        "[range by '4 seconds'] GROUP BY receptor_id, tag_id HAVING count(*) >= ALL (SELECT count(*) "
        "FROM smoothed_chain [range by '4 seconds'] WHERE tag_id = rs.tag_id GROUP BY receptor_id))")
    try:
        assert counts.placement.producers == ("warehouse",), counts.explain()
        assert_equal_to_reference(hierarchy, counts)
        assert_equal_to_reference(hierarchy, smoothed)
    finally:
        hierarchy.placement.cancel(counts.query_id)
        hierarchy.placement.cancel(smoothed.query_id)


def test_an_event_view_is_read_by_a_later_query_as_a_stream_of_matches(hierarchy):
    """A pattern exported as a view (made with replay: its matches from the stream's beginning),
    counted per door by a later query over windows of the matches' end times: equal to the
    reference over every reading."""
    view = hierarchy.placement.submit(
        "CREATE VIEW strong_then_weak AS SELECT a.tag_id AS tag_id, a.receptor_id AS at FROM rfid_stream "
        "PATTERN SEQ(a, NOT c, b) WITHIN '3 seconds' PARTITION BY tag_id "
        "DEFINE a AS read_strength >= 0.6, c AS read_strength < 0.15, b AS read_strength < 0.45", replay=True)
    counts = hierarchy.placement.submit(
        "SELECT at, count(*) AS matches FROM strong_then_weak [range by '4 seconds'] GROUP BY at")
    try:
        assert counts.placement.producers == ("warehouse",), counts.explain()
        assert_equal_to_reference(hierarchy, counts)
    finally:
        hierarchy.placement.cancel(counts.query_id)
        hierarchy.placement.cancel(view.query_id)


def test_queries_side_by_side_share_pane_partials_and_each_equal_the_reference(hierarchy):
    """A tumbling and a sliding query with the same panes: the second, submitted while the first
    runs, reuses the first one's producers and still answers exactly. A third, coarser one is
    subsumed by them: its producers roll the running partials up, and go on doing so after the
    queries that made them are cancelled."""
    tumbling = hierarchy.placement.submit(
        "SELECT tag_id, count(*) AS n FROM rfid_stream [range by '2 seconds'] GROUP BY tag_id")
    sliding = hierarchy.placement.submit(
        "SELECT tag_id, count(*) AS n FROM rfid_stream [range by '6 seconds', slide by '2 seconds'] GROUP BY tag_id")
    coarse = hierarchy.placement.submit("SELECT count(*) AS n FROM rfid_stream [range by '4 seconds']")
    try:
        assert [t.reused for t in sliding.tasks if t.role == "producer"] == [True, True], sliding.explain()
        made = {(t.node, t.query_id) for t in tumbling.tasks if t.role == "producer"}
        assert set(coarse.uses) == made and "rolls up view" in coarse.explain(), coarse.explain()
        assert_equal_to_reference(hierarchy, sliding)
        assert_equal_to_reference(hierarchy, tumbling)
        hierarchy.placement.cancel(sliding.query_id)
        hierarchy.placement.cancel(tumbling.query_id)   # their producers stay: the coarse query reads them
        cancelled_ms = int(time.time() * 1000)
        assert made <= {(node, q.query_id) for node in ("door1", "door2") for q in hierarchy.nodes[node].dsp.queries()}
        wait_for(lambda: any(as_ms(r["window_start"]) > cancelled_ms
                             for r in topic_rows(hierarchy.bootstrap, coarse.result_topic)),
                 60, "the coarse query's windows after the cancel")
        assert_equal_to_reference(hierarchy, coarse)
    finally:
        for query in (coarse, sliding, tumbling):
            if any(q.id == query.query_id for q in hierarchy.mdr.queries()):
                hierarchy.placement.cancel(query.query_id)


def test_the_sensor_proxy_tells_the_motes_a_threshold_and_the_answers_are_those_of_every_sample(hierarchy):
    """door1's motes (no standing view reads them here) send nothing until a threshold query runs;
    the submission returns once they obey it (the placement's prepare step), they send only the
    samples above it, and the query's windows from its start equal the central answer over every
    sample they took, sent or held back; its cancel silences them again. The planner estimated the
    threshold's share from the histograms of recent values the motes send."""
    from edge.agent import read_jsonl
    from glue.analyzer import analyze
    from glue.reference import Reference
    from services.judge import same_rows
    from services.placement import load_catalog

    motes = sorted(r for r, info in hierarchy.mdr.receptors().items()
                   if info["kind"] == "mote" and info["node"] == "door1")
    assert motes

    def told() -> set[str]:
        return {hierarchy.mdr.told("door1").get(m, {}).get("rule", "") for m in motes}
    wait_for(lambda: told() == {"never"}, 30, lambda: f"door1's motes told never, not {told()}")
    version_never = hierarchy.mdr.told("door1")[motes[0]]["version"]
    wait_for(lambda: max((line["t"] for line in read_jsonl(hierarchy.readings_path)), default=0) > version_never + 2000,
             30, "samples held back")
    # humidity, not temperature: the scenario's fires heat the dock every few minutes, all its motes at once
    logged = read_jsonl(hierarchy.readings_path)
    taken = [s["values"]["humidity"] for line in logged if line["t"] > logged[-1]["t"] - 30_000
             for s in line.get("samples", []) + line.get("held", []) if s["receptor_id"] in motes]
    threshold = round(sorted(taken)[len(taken) // 2], 1)   # the recent median: some samples above, some below
    # the motes send histograms of what they took (held back too) every 10 s; the planner estimates from them
    wait_for(lambda: {m for m, quantity in hierarchy.mdr.histograms() if quantity == "humidity"} >= set(motes), 30,
             "the motes' histograms in the MDR")
    plan = hierarchy.placement.submit(
        f"SELECT receptor_id, count(*) AS humid, max(humidity) AS most FROM sensor_stream [range by '2 seconds'] "
        f"WHERE humidity > {threshold} GROUP BY receptor_id")
    try:
        # the planner estimated the median's share from the histograms (it is about half)
        assert [e.share is not None and 0.05 <= e.share <= 0.95 for e in plan.estimates] == [True], plan.explain()
        assert f"most selective first (the motes' recent values): humidity > {threshold:g} ~" in plan.explain()
        # told before the submission returned, and obeyed: the motes' batches said so to the data listener
        assert told() == {f"(humidity > {threshold:g})"}, told()
        version = hierarchy.mdr.told("door1")[motes[0]]["version"]
        assert version < plan.start_ms and hierarchy.mdr.obeyed("door1")[0] >= version
        hierarchy.write_run_file()
        shown = _hifi("motes", "--node", "door1")
        shows = rf"{motes[0]}\s+\(humidity > {threshold:g}\)\s+humidity"   # its rule, then its quantities
        assert shown.returncode == 0 and re.search(shows, shown.stdout), shown
        wait_for(lambda: len({start for r in topic_rows(hierarchy.bootstrap, plan.result_topic)
                              if (start := as_ms(r["window_start"])) >= plan.start_ms}) >= 4,
                 120, "four windows from the query's start")
        logged = read_jsonl(hierarchy.readings_path)
        lines = [line for line in logged if line.get("node") == "door1" and "samples" in line]
        # two read cycles (the bound), and a second for the node's publishing on a loaded machine
        late = [line["t"] for line in lines if line["t"] >= version + 2 * hierarchy.agent.scenario.cycle_ms + 1000
                and line.get("settings_version", 0) < version]
        assert not late, f"sample batches not obeying the settings well after they were issued: {late[:3]}"
        obeying = [line for line in lines if line.get("settings_version") == version]
        assert all(s["values"]["humidity"] > threshold for line in obeying for s in line["samples"])
        assert {q for line in obeying for s in line["samples"] for q in s["values"]} == {"humidity"}
        assert sum(len(line.get("held", [])) for line in obeying) > 0 < sum(len(line["samples"]) for line in obeying)
        # the answer from what was sent equals the one from every sample taken, window by window,
        # from the query's first window on
        got = [tuple(as_ms(r[c]) for c in plan.columns) for r in topic_rows(hierarchy.bootstrap, plan.result_topic)]
        first = plan.start_ms
        last = max(r[0] for r in got)
        every = [{**line, "samples": line["samples"] + line.get("held", [])} if "samples" in line else line
                 for line in logged]
        want = [tuple(r[c] for c in plan.columns) for r in Reference.from_log(every, load_catalog(hierarchy.mdr))
                .run(analyze(plan.query.text, load_catalog(hierarchy.mdr)))]
        span = [r for r in got if first <= r[0] < last], [r for r in want if first <= r[0] < last]
        assert span[1] and same_rows(*span), span
    finally:
        hierarchy.placement.cancel(plan.query_id)
    wait_for(lambda: told() == {"never"}, 10, lambda: f"the motes silenced after the cancel, not {told()}")


def test_a_query_over_the_past_equals_window_by_window_the_same_query_started_then(hierarchy):
    """The seam of `--since` (issue 21): a query asked for the last 25 s, its parts first fed
    what their nodes archived and then the live stream, equals window by window the same query
    started a minute earlier — across the edges (whose archives hold the raw input) and the
    warehouse (whose archive holds the edges' partials, which the later query reuses)."""
    from mdr.repository import now_ms
    from services.judge import same_rows
    from services.placement import TOPIC_GRACE_MS, UNTIL_GRACE_MS

    across = ("SELECT location, count(*) AS reads, max(read_strength) AS best FROM rfid_stream [range by '4 seconds', "
              "slide by '2 seconds'] JOIN receptor_locations USING (receptor_id) GROUP BY location")
    at_edge = ("SELECT tag_id, count(*) AS n FROM rfid_stream [range by '2 seconds'] WHERE receptor_id = 'door1-r1' "
               "GROUP BY tag_id")
    live = [hierarchy.placement.submit(sql) for sql in (across, at_edge)]
    # `since` a little after they started: every node running their parts has archived from then on
    # (the warehouse's first reader of the doors' partials came with them; the plan warns otherwise)
    since = max(p.start_ms for p in live) + 10_000
    time.sleep(max(0.0, since + 25_000 - time.time() * 1000) / 1000)
    # explained over the gRPC API first: what it would be fed, nothing deployed; a span that is none refused
    stub = _placement(hierarchy)
    explained = stub.Submit(hifi_pb2.SubmitRequest(sql=across, explain_only=True, since_ms=since))
    assert "the nodes' archives, then live" in explained.plan and len(hierarchy.mdr.queries()) == 2
    with pytest.raises(grpc.RpcError) as error:
        stub.Submit(hifi_pb2.SubmitRequest(sql=across, since_ms=since, until_ms=since - 1000))
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "until after it" in error.value.details()
    past = [hierarchy.placement.submit(p.query.text, since_ms=since) for p in live]
    asked = int(time.time() * 1000)
    try:
        assert [p.placement.root for p in past] == ["warehouse", "door1"]
        assert "the nodes' archives, then live" in past[0].explain() and "warning" not in past[0].explain()
        assert past[0].tasks[0].reused and not past[1].tasks[0].reused   # the partials at the edges are shared

        def windows(plan) -> list[tuple]:
            rows = topic_rows(hierarchy.bootstrap, plan.result_topic)
            return [tuple(as_ms(r[c]) for c in plan.columns) for r in rows]
        # past the seam: windows from after the later queries were asked
        wait_for(lambda: all(max((w[0] for w in windows(p)), default=0) >= asked + 6000 for p in past), 120,
                 "windows past the seam")
        for earlier, later in zip(live, past, strict=True):
            got, want = windows(later), windows(earlier)
            end = min(max(w[0] for w in got), max(w[0] for w in want)) - 4000   # rows of the last ones in flight
            span = [w for w in got if since <= w[0] < end], [w for w in want if since <= w[0] < end]
            starts = {w[0] for w in span[1]}
            assert min(starts) < asked - 20_000 and max(starts) > asked, "the span crosses the seam"
            assert same_rows(*span), (earlier.query.text, sorted(set(span[0]) ^ set(span[1]))[:6])
            assert all(w[0] >= since for w in got), "nothing before --since"
        assert hierarchy.mdr.stats("door1").get("archive_bytes", 0) > 0
        # `--until`: the placement ends the query once the windows before it have gone out
        bounded = hierarchy.placement.submit(at_edge, since_ms=since, until_ms=asked + 2000)
        assert hierarchy.placement.end_finished(asked + 2000 + UNTIL_GRACE_MS - 1) == []
        assert hierarchy.placement.end_finished(asked + 2000 + UNTIL_GRACE_MS) == [bounded.query_id]
        assert bounded.query_id not in {q.id for q in hierarchy.mdr.queries()}
        # its results may still be read: their topic is not retired with its parts'
        assert bounded.result_topic not in hierarchy.mdr.retired_topics(now_ms() + TOPIC_GRACE_MS)
        assert bounded.result_topic in topic_names(hierarchy.bootstrap)
    finally:
        for plan in live + past:
            hierarchy.placement.cancel(plan.query_id)


def _placement(hierarchy):
    return hierarchy.placement_stub()


def test_placement_grpc_rejects_bad_queries_with_position_and_reason(hierarchy):
    stub = _placement(hierarchy)
    cases = {
        "SELECT tag_id FROM rfid_streem": "line 1, column 20: unknown stream or view 'rfid_streem'",
        "SELECT tag_id, count(*) FROM rfid_stream GROUP BY tag_id": "needs a window",
        "SELECT colour FROM rfid_stream": "unknown column 'colour'",
        "SELECT tag_id FROM rfid_stream WHERE": "line 1, column 37: expected a value",
        "SELECT receptor_id, count(*) AS n FROM smoothed_rfid_stream [range by '3 seconds'] GROUP BY receptor_id":
            "cannot be derived",
    }
    for sql, message in cases.items():
        with pytest.raises(grpc.RpcError) as error:
            stub.Submit(hifi_pb2.SubmitRequest(sql=sql))
        assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert message in error.value.details(), (sql, error.value.details())
    explained = stub.Submit(hifi_pb2.SubmitRequest(
        sql="SELECT tag_id, count(*) AS n FROM rfid_stream [range by '6 seconds', slide by '4 seconds'] "
            "GROUP BY tag_id", explain_only=True))
    assert explained.root_node == "warehouse" and "panes tumbling 2s" in explained.plan
    assert not hierarchy.mdr.queries(), "explain must not run anything"


def _hifi(*args):
    hifi = os.path.join(os.path.dirname(sys.executable), "hifi")
    return subprocess.run([hifi, *args], capture_output=True, text=True, timeout=240,
                          env={**os.environ, "HIFI_PLACEMENT": "", "HIFI_REDIS_URL": ""})


def test_cli_query_streams_results_and_reference_agrees(hierarchy):
    hierarchy.write_run_file()
    sql = "SELECT location, count(*) AS reads FROM rfid_stream [range by '2 seconds'] " \
          "JOIN receptor_locations USING (receptor_id) GROUP BY location"
    explain = _hifi("query", "--explain", sql)
    assert explain.returncode == 0, explain.stderr
    assert "root warehouse" in explain.stdout and "producer" in explain.stdout
    streamed = _hifi("query", "--limit", "4", "--format", "json", "--timeout", "200", sql)
    assert streamed.returncode == 0, streamed.stderr
    import json

    rows = [json.loads(line) for line in streamed.stdout.splitlines()]
    assert len(rows) == 4 and {"window_start", "window_end", "location", "reads"} <= set(rows[0])
    assert "cancelled" in streamed.stderr and not hierarchy.mdr.queries()
    reference = _hifi("query", "--reference", "--format", "json", sql)
    assert reference.returncode == 0, reference.stderr
    expected = {(r["window_start"], r["location"]): r["reads"] for r in map(json.loads, reference.stdout.splitlines())}
    start = hierarchy.agent.stats.started_ms
    for row in rows:
        if dt.datetime.fromisoformat(row["window_start"]).timestamp() * 1000 >= start:
            assert expected[(row["window_start"], row["location"])] == row["reads"]
    bad = _hifi("query", "SELECT nothing FROM rfid_stream")
    assert bad.returncode == 2 and "unknown column 'nothing'" in bad.stderr and "Traceback" not in bad.stderr
