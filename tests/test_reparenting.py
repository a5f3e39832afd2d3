"""Re-parenting (issue 18): an aggregation node dead past the grace period has its parts adopted
by the nearest live ancestor, which resumes each from where the dead node stopped; the node,
back, takes them back at a window boundary. On the chaos topology (core <- agg <- two edges),
with a query rooted at the aggregation node: its answers across both moves equal the reference
over every reading published (none lost, none twice), and the query never shows as waiting
while its parts run elsewhere."""

from __future__ import annotations

import time

import pytest

from glue.topology import parse_topology
from services.bench.chaos import AGG, CHAOS, QUERY
from services.health import moves, query_states
from tests.conftest import restart_node, running_hierarchy, wait_for, windows_after
from tests.judge import assert_equal_to_reference

CORE = "chaos-core"


@pytest.fixture(scope="module")
def hierarchy(servers, spark, tmp_path_factory):
    state = tmp_path_factory.mktemp("state")
    yield from running_hierarchy(parse_topology(CHAOS, str(state / "chaos.yaml")), servers, str(state))


def test_a_dead_parents_parts_run_at_the_core_and_come_back_with_nothing_lost_or_doubled(hierarchy):
    mdr = hierarchy.mdr
    plan = hierarchy.placement.submit(QUERY)
    assert plan.placement.root == AGG
    wait_for(lambda: windows_after(hierarchy, plan, 0) >= 2, 120, "the query's first windows")

    hierarchy.nodes[AGG].stop()   # dead: no heartbeat, nothing running
    down_ms = int(time.time() * 1000)
    adopted = wait_for(lambda: (mdr.adoptions().get(AGG) or None) and mdr.adoptions()[AGG].parts, 60,
                       "the core to adopt the aggregation node's parts")
    found = mdr.adoptions()[AGG]
    assert (found.adopter, found.children) == (CORE, ("chaos-edge-a", "chaos-edge-b"))
    assert any(query_id.endswith(plan.query_id) for query_id in adopted), "the query's final part moved"
    wait_for(lambda: windows_after(hierarchy, plan, down_ms + 4000) >= 3, 120, "windows while the node is dead")
    state = query_states(mdr, [q for q in mdr.queries() if q.id == plan.query_id])[plan.query_id]
    assert state == ("running", ""), "a query whose parts were adopted does not wait"
    moved = moves(mdr.adoptions(), str)
    assert moved["chaos-edge-a"] == (CORE, f"moved to {CORE} ({AGG} dead)")

    restart_node(hierarchy, AGG)
    wait_for(lambda: AGG not in mdr.adoptions(), 120, "the aggregation node to take its parts back")
    assert not any(q.query_id.startswith(f"{AGG}:") for q in hierarchy.nodes[CORE].dsp.queries()), \
        "the core no longer runs them"
    back_ms = int(time.time() * 1000)
    wait_for(lambda: windows_after(hierarchy, plan, back_ms + 2000) >= 2, 120, "windows after the hand-back")
    # every window from the query's start — before, during and after both moves — equals the
    # reference over the readings the agents published
    assert assert_equal_to_reference(hierarchy, plan, timeout_s=60) > 0
