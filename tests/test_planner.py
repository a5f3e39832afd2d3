"""glue.planner: the ordered passes from a bound query to its hierarchical plan, pass by pass."""

import pytest

from glue.analyzer import analyze
from glue.planner import (
    PLAN_PASSES,
    START_PASSES,
    Planning,
    answer_from,
    build,
    emit_changes,
    order_where_terms,
    place_root,
    plan_query,
    reuse_running_views,
    start_from,
    type_check,
)
from glue.sql.lexer import SqlError
from tests.catalogs import supply_chain_catalog

CATALOG = supply_chain_catalog()
COUNTS = "SELECT receptor_id, count(*) AS n FROM rfid_stream [range by '10 seconds'] GROUP BY receptor_id"


def test_the_passes_run_in_the_documented_order():
    assert PLAN_PASSES == (order_where_terms, place_root, reuse_running_views, build, emit_changes, answer_from,
                           type_check)
    assert START_PASSES == (answer_from, type_check) == PLAN_PASSES[-2:]


@pytest.mark.parametrize("sql", [COUNTS, COUNTS + " HAVING count(*) > 1 EMIT CHANGES",
                                 "SELECT tag_id, receptor_id FROM rfid_stream WHERE receptor_id = 'door1-r1'"])
def test_a_start_applied_to_the_one_plan_is_the_plan_made_with_it(sql):
    """The placement service plans a live query once, reads its inputs' ends, then applies the
    start to that plan (issue 69: it planned twice)."""
    query = analyze(sql, CATALOG)
    once = start_from(plan_query(query, CATALOG, "q1"), CATALOG, 60_000, 120_000)
    assert once == plan_query(query, CATALOG, "q1", start_ms=60_000, until_ms=120_000)
    assert "60000" in repr(once.tasks[-1].plan) and once.start_ms == 60_000
    with pytest.raises(AssertionError, match="one start"):
        start_from(once, CATALOG, 70_000)


def test_each_pass_adds_what_it_names_and_the_whole_is_plan_query():
    planning = Planning(analyze(COUNTS, CATALOG), CATALOG, "q1")
    placed = place_root(order_where_terms(planning))
    assert placed.plan is None and placed.placement is not None and placed.placement.root == "warehouse"
    built = build(reuse_running_views(placed))
    assert [(p.node, p.role) for p in built.plan.tasks] == [("door1", "producer"), ("door2", "producer"),
                                                           ("warehouse", "final")]
    assert answer_from(built) is built   # no start: nothing to drop
    assert emit_changes(built) is built    # every window's rows
    assert type_check(answer_from(built)).plan == plan_query(built.query, CATALOG, "q1")


def test_a_start_time_drops_what_began_before_it_and_a_past_reads_the_archives():
    live = plan_query(analyze(COUNTS, CATALOG), CATALOG, "q1", start_ms=60_000, until_ms=120_000)
    assert (live.start_ms, live.until_ms, live.from_archive) == (60_000, 120_000, False)
    assert "60000" in repr(live.tasks[-1].plan) and "120000" in repr(live.tasks[-1].plan)
    past = plan_query(analyze(COUNTS, CATALOG), CATALOG, "q1", start_ms=60_000, now_ms=200_000)
    assert past.from_archive and past.start_ms == 60_000
    for start, until in ((300_000, None), (60_000, 60_000)):
        with pytest.raises(SqlError, match="a query over the past needs"):
            plan_query(analyze(COUNTS, CATALOG), CATALOG, "q1", start_ms=start, until_ms=until, now_ms=200_000)


def test_the_naive_baseline_is_refused_for_arbitration_before_anything_is_built():
    arbitration = analyze(
        "SELECT receptor_id, count(DISTINCT tag_id) AS tags FROM rfid_stream r [range by '2 seconds'] "
        "GROUP BY receptor_id, tag_id HAVING count(*) >= ALL (SELECT count(*) FROM rfid_stream "
        "[range by '2 seconds'] WHERE tag_id = r.tag_id GROUP BY receptor_id)", CATALOG)
    assert place_root(Planning(arbitration, CATALOG, "q")).placement is not None
    with pytest.raises(SqlError, match="naive baseline does not plan arbitration"):
        place_root(Planning(arbitration, CATALOG, "q", naive=True))


def test_a_running_view_that_holds_a_producers_partials_is_rolled_up_instead():
    from dataclasses import replace

    from glue.catalog import exported_view

    running = plan_query(analyze("SELECT receptor_id, count(*) AS n FROM rfid_stream [range by '2 seconds'] "
                                 "GROUP BY receptor_id", CATALOG), CATALOG, "a")
    catalog = replace(CATALOG, views=[*CATALOG.views, *(exported_view(t) for t in running.tasks if t.export_as)])
    coarser = analyze("SELECT count(*) AS n FROM rfid_stream [range by '4 seconds']", catalog)
    planning = reuse_running_views(place_root(order_where_terms(Planning(coarser, catalog, "b"))))
    held = {(t.node, t.export_as) for t in running.tasks if t.role == "producer"}
    assert {(view.node, view.name) for _, view in planning.rollups.values()} == held
    plan = build(planning).plan
    assert set(plan.uses) == {(node, f"view.{name}") for node, name in held}
    assert reuse_running_views(place_root(Planning(coarser, catalog, "b", naive=True))).rollups == {}
