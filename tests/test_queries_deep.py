"""HiFi SQL across a four-level hierarchy (doors -> warehouses -> region -> hq), judged by the
reference evaluator: the producers run at the doors, the warehouses merge their panes (or pass
rows through), and the region, the lowest common ancestor, finishes the windows."""

from __future__ import annotations

import os

import pytest

from glue.topology import load_topology
from services.paths import TOPOLOGIES
from tests.conftest import running_hierarchy
from tests.judge import assert_equal_to_reference

DEEP_TOPOLOGY = os.path.join(TOPOLOGIES, "deep.yaml")


@pytest.fixture(scope="module")
def hierarchy(servers, spark, tmp_path_factory):
    yield from running_hierarchy(load_topology(DEEP_TOPOLOGY), servers, str(tmp_path_factory.mktemp("deep")))


QUERIES = {
    "group-by at every level, range a multiple of slide": (
        "SELECT tag_id, count(*) AS n FROM rfid_stream [range by '4 seconds', slide by '2 seconds'] GROUP BY tag_id"),
    "gcd panes through two merge levels: avg/min/max/count(DISTINCT), HAVING": (
        "SELECT receptor_id, avg(read_strength) AS strength, min(read_strength) AS lo, max(read_strength) AS hi, "
        "count(DISTINCT tag_id) AS tags FROM rfid_stream [range by '3 seconds', slide by '2 seconds'] "
        "GROUP BY receptor_id HAVING count(*) > 3"),
    "selection rows passed through the merge level": (
        "SELECT receptor_id, tag_id, ts FROM rfid_stream WHERE read_strength > 0.7"),
}


@pytest.fixture(scope="module")
def submitted(hierarchy):
    """The queries submitted together: their windows accumulate side by side (tests/test_queries.py)."""
    plans = {name: hierarchy.placement.submit(sql) for name, sql in QUERIES.items()}
    yield plans
    running = {q.id for q in hierarchy.mdr.queries()}
    for plan in plans.values():
        if plan.query_id in running:
            hierarchy.placement.cancel(plan.query_id)


@pytest.mark.parametrize("name", list(QUERIES))
def test_four_level_answers_equal_the_reference(hierarchy, submitted, name):
    plan = submitted[name]
    try:
        roles = {(t.node, t.role) for t in plan.tasks}
        assert plan.placement.root == "region", plan.explain()
        assert {("door1", "producer"), ("door2", "producer"), ("warehouse1", "merge"), ("warehouse2", "merge"),
                ("region", "final")} <= roles, plan.explain()
        assert_equal_to_reference(hierarchy, plan)
    finally:
        hierarchy.placement.cancel(plan.query_id)


def test_scope_of_one_warehouse_puts_the_root_at_its_door(hierarchy):
    plan = hierarchy.placement.submit(
        "SELECT tag_id, count(*) AS n FROM rfid_stream [range by '2 seconds'] WHERE receptor_id = 'door2-r1' "
        "GROUP BY tag_id")
    try:
        assert plan.placement.root == "door2" and {t.node for t in plan.tasks} == {"door2"}, plan.explain()
        assert_equal_to_reference(hierarchy, plan)
    finally:
        hierarchy.placement.cancel(plan.query_id)
