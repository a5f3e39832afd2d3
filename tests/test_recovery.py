"""Parts that fail and come back (issue 18), on the small hierarchy (core over dock-a, dock-b):
a node restarted on its state directory takes back the query parts it hosted from the MDR's
desired state, and the query's answers across the restart equal the reference (nothing lost,
nothing doubled); a node that fails after sending a micro-batch's rows and before recording it
sends them again and every reader drops them (exactly once); a Redis killed and restarted comes
back from its append-only file with every node, view and query, and the hierarchy takes new
queries."""

from __future__ import annotations

import logging
import time
from collections import Counter

import pytest

from dsp.runtime import faults
from glue.topology import load_topology
from services.health import query_states
from services.judge import as_ms
from services.paths import SMALL_TOPOLOGY
from tests.conftest import (
    metric,
    restart_node,
    running_hierarchy,
    scrape_metrics,
    topic_records,
    topic_rows,
    wait_for,
    windows_after,
)
from tests.judge import assert_equal_to_reference
from wire.codec import readable_batches

QUERY = "SELECT receptor_id, count(*) AS reads FROM rfid_stream [range by '2 seconds'] GROUP BY receptor_id"


@pytest.fixture(scope="module")
def hierarchy(servers, spark, tmp_path_factory):
    yield from running_hierarchy(load_topology(SMALL_TOPOLOGY), servers, str(tmp_path_factory.mktemp("state")))


def test_a_restarted_node_takes_back_its_query_parts_and_nothing_is_lost_or_doubled(hierarchy):
    plan = hierarchy.placement.submit(QUERY)
    part = next(t.query_id for t in plan.tasks if t.node == "dock-a")
    assert part in hierarchy.mdr.desired("dock-a"), "the placement records what should run on dock-a"
    wait_for(lambda: windows_after(hierarchy, plan, 0) >= 2, 120, "the query's first windows")

    def waiting() -> None:   # while dock-a is down, the query says what it waits for
        state = query_states(hierarchy.mdr, [q for q in hierarchy.mdr.queries() if q.id == plan.query_id])
        assert state[plan.query_id] == ("WAITING", "dock-a is dead; its parts run again when it is back")
    node = restart_node(hierarchy, "dock-a", waiting)
    assert part in {q.query_id for q in node.dsp.queries()}, "the restarted node runs its part again"
    back_ms = int(time.time() * 1000)
    wait_for(lambda: windows_after(hierarchy, plan, back_ms + 2000) >= 2, 120, "windows after the restart")
    # every window from the query's start, the ones the restart fell in too, equals the
    # reference over the readings the agents published: none lost, none counted twice
    assert assert_equal_to_reference(hierarchy, plan, timeout_s=60) > 0

    hierarchy.placement.cancel(plan.query_id)
    assert part not in hierarchy.mdr.desired("dock-a"), "a cancelled query's parts are no longer desired"
    time.sleep(3)   # two rounds of reconciliation: it is not deployed again
    assert part not in {q.query_id for q in node.dsp.queries()}


def sent_twice(hierarchy, topics: set[str]) -> list[tuple]:
    """Identities of batches with rows that stand more than once in `topics`."""
    sent = Counter(batch.identity for topic in topics
                   for _, batch in readable_batches_of(topic_records(hierarchy.bootstrap, topic)) if batch.rows)
    return [identity for identity, n in sent.items() if n > 1]


def readable_batches_of(records):
    """Every RowBatch record, repeats included (readable_batches drops them)."""
    return (found for record in records for found in readable_batches([record]))


def test_a_batch_sent_again_after_a_failure_between_flush_and_fence_counts_once(hierarchy, caplog):
    caplog.set_level(logging.INFO, logger="hifi.dsp")
    # a selection: every micro-batch of an edge sends rows, which its parent forwards
    plan = hierarchy.placement.submit("SELECT receptor_id, tag_id, ts FROM rfid_stream WHERE read_strength > 0.5")
    partials = {task.topic for task in plan.tasks if task.node != plan.placement.root}
    wait_for(lambda: topic_rows(hierarchy.bootstrap, plan.result_topic), 120, "the query's first rows")
    # an edge fails right after sending a micro-batch's rows, before recording it, twice
    faults.arm(faults.AFTER_FLUSH, times=2, where="dock-a")
    wait_for(lambda: not faults.armed(faults.AFTER_FLUSH), 30, "the faults to strike")
    # the failed batches ran again and sent only what their topics did not hold (dsp.runtime.unrepeated) ...
    wait_for(lambda: [r for r in caplog.records if "were not sent twice" in r.getMessage()], 60,
             "a failed batch to run again over messages it had sent")
    # ... so each identity stands once in the edges' topics (for a reader that drops no repeats) ...
    assert sent_twice(hierarchy, partials) == []
    # ... and every reader took each once: the answers equal the reference
    since = int(time.time() * 1000)
    wait_for(lambda: any(as_ms(r["ts"]) > since + 3000 for r in topic_rows(hierarchy.bootstrap, plan.result_topic)),
             120, "rows after the faults")
    assert assert_equal_to_reference(hierarchy, plan, timeout_s=60) > 0
    # the node's statistics count each batch once too: rows counted = rows its readers take
    part = next(task for task in plan.tasks if task.node == "dock-a")
    url = hierarchy.mdr.endpoints()["node:dock-a"]["metrics"]
    wait_for(lambda: metric(scrape_metrics(url, hierarchy.admin_token), "hifi_view_rows_total", node="dock-a",
                                query=part.query_id)
             == len(topic_rows(hierarchy.bootstrap, part.topic)), 30, "dock-a's rows counted = rows in its topic")
    hierarchy.placement.cancel(plan.query_id)


def test_the_metadata_comes_back_when_redis_restarts(hierarchy, servers):
    if not servers.workdir:
        pytest.skip("an external Redis (HIFI_REDIS_URL) is not ours to restart")
    plan = hierarchy.placement.submit(QUERY)
    servers.restart_redis(down_s=2)
    # from the append-only file: every node (heartbeating again), every view, the running query
    wait_for(lambda: all(n.alive for n in hierarchy.mdr.nodes()) and len(hierarchy.mdr.nodes()) == 3, 20,
             "every node alive after the restart")
    assert plan.query_id in {q.id for q in hierarchy.mdr.queries()}
    assert {v.name for v in hierarchy.mdr.views("dock-a")} >= {v.name for v in hierarchy.topology.views_at("dock-a")
                                                                if v.materialize}
    # and the hierarchy goes on: the running query emits, a new query is planned and answers
    since = int(time.time() * 1000)
    wait_for(lambda: windows_after(hierarchy, plan, since) >= 1, 60, "the running query's next window")
    second = hierarchy.placement.submit(QUERY.replace("count(*) AS reads", "count(*) AS n"))
    wait_for(lambda: windows_after(hierarchy, second, 0) >= 1, 90, "the new query's first window")
    for query in (plan, second):
        hierarchy.placement.cancel(query.query_id)
