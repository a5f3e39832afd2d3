"""Rewriting and placement (pure): panes, partial aggregates, scope and LCA, per-node plans,
and the reference evaluator the hierarchy is judged by."""

from dataclasses import replace

import pytest

from base.plan import (
    RAW_RFID_SOURCE_COLUMNS,
    SMOOTH_COLUMNS,
    Aggregate,
    AggSpec,
    BinOp,
    Col,
    Filter,
    Lit,
    LookupJoin,
    Smooth,
    Source,
    Window,
)
from base.plan_schema import output_columns
from glue.analyzer import analyze
from glue.catalog import ExportedView, NodeInfo
from glue.logical_query import AggCall
from glue.planner import plan_query
from glue.reference import Reference, adaptive_smoothed, evaluate_expr
from glue.rewrite.distribute import answering_from
from glue.rewrite.partials import split
from glue.rewrite.placement import place
from glue.sql.lexer import SqlError
from tests.catalogs import supply_chain_catalog
from wire.windows import pane_of, window_starts

COUNT_BY_TAG = ("SELECT tag_id, count(*) AS n FROM rfid_stream [range by '6 seconds', slide by '4 seconds'] "
                "GROUP BY tag_id")


def test_panes_are_the_gcd_of_range_and_slide():
    assert pane_of(Window(6000, 4000)) == Window(2000, 2000)
    assert pane_of(Window(5000, 5000)) == Window(5000, 5000)
    assert pane_of(Window(10_000, 1000)) == Window(1000, 1000)


def test_window_starts_cover_exactly_the_windows_holding_a_time():
    assert list(window_starts(5000, Window(6000, 4000))) == [0, 4000]
    assert list(window_starts(4000, Window(6000, 4000))) == [0, 4000]
    assert list(window_starts(6000, Window(6000, 4000))) == [4000]
    assert list(window_starts(1999, Window(2000, 2000))) == [0]


def test_partial_aggregates_merge_and_finish():
    avg = split(AggCall("avg_x", "avg", "x"))
    assert [s.fn for s in avg.partial] == ["sum", "count"] and [s.fn for s in avg.merge] == ["sum", "sum"]
    assert evaluate_expr(avg.final, {"avg_x__sum": 9.0, "avg_x__n": 3}) == 3.0
    distinct = split(AggCall("d", "count_distinct", "tag"))
    assert distinct.partial == (AggSpec("d__set", "collect_set", "tag"),)
    assert distinct.merge == (AggSpec("d__set", "union_sets", "d__set"),)
    assert evaluate_expr(distinct.final, {"d__set": ["a", "b"]}) == 2
    count = split(AggCall("n", "count", None))
    assert count.merge == (AggSpec("n", "sum", "n"),)


@pytest.mark.parametrize("where, root, producers", [
    ("", "warehouse", ("door1", "door2")),
    ("WHERE receptor_id = 'door2-r1'", "door2", ("door2",)),
    ("WHERE receptor_id IN ('door1-r1', 'door2-r1')", "warehouse", ("door1", "door2")),
    ("WHERE area = 'inbound'", "door1", ("door1",)),
    ("WHERE location = 'outbound-door' AND read_strength > 0.5", "door2", ("door2",)),
])
def test_the_root_is_the_lowest_common_ancestor_of_the_scope(where, root, producers):
    catalog = supply_chain_catalog()
    join = "JOIN receptor_locations USING (receptor_id)" if "location" in where or "area" in where else ""
    text = f"SELECT tag_id FROM rfid_stream {join} {where}"
    if "area" in where:
        # area is receptor metadata: expose it the way a deployment would, through a relation column
        from dataclasses import replace
        relation = catalog.relations["receptor_locations"]
        catalog.relations["receptor_locations"] = replace(
            relation, columns=(*relation.columns, ("area", "string")),
            rows=tuple((*row, next(r.area for r in catalog.receptors if r.id == row[0])) for row in relation.rows))
    placement = place(analyze(text, catalog), catalog)
    assert (placement.root, placement.producers) == (root, producers)


def test_a_scope_that_matches_nothing_is_an_error():
    catalog = supply_chain_catalog()
    with pytest.raises(SqlError, match="no receptor or node matches"):
        place(analyze("SELECT tag_id FROM rfid_stream WHERE receptor_id = 'nowhere'", catalog), catalog)


def test_dead_producers_are_refused():
    catalog = supply_chain_catalog()
    catalog.nodes["door2"] = NodeInfo("door2", "edge", "warehouse", alive=False)
    with pytest.raises(SqlError, match="door2 holding 'rfid_stream' are not alive"):
        plan_query(analyze(COUNT_BY_TAG, catalog), catalog, "q1")


def test_producers_emit_pane_partials_and_the_root_assembles_windows():
    catalog = supply_chain_catalog()
    plan = plan_query(analyze(COUNT_BY_TAG, catalog), catalog, "q1")
    roles = [(t.node, t.role) for t in plan.tasks]
    assert roles == [("door1", "producer"), ("door2", "producer"), ("warehouse", "final")]
    producer = plan.tasks[0].plan
    assert isinstance(producer, Aggregate) and producer.window == Window(2000, 2000)
    assert producer.child == Source(("hifi.raw.door1",), "rfid", producer.child.columns, "ts", 1000)
    final = plan.tasks[-1]
    assert final.topic == f"hifi.results.{final.node}.q1"
    assert plan.columns == ["window_start", "window_end", "tag_id", "n"]
    windowed = final.plan.child.child
    assert windowed.window == Window(6000, 4000) and windowed.aggregates == (AggSpec("count", "sum", "count"),)
    assert windowed.child.markers and windowed.child.topics == tuple(t.topic for t in plan.tasks[:2])


def test_nodes_between_the_root_and_the_producers_merge_panes():
    import os

    from tests.catalogs import topology_catalog

    path = os.path.join(os.path.dirname(__file__), "..", "deploy", "topologies", "regional.yaml")
    catalog = topology_catalog(path)
    plan = plan_query(analyze(COUNT_BY_TAG, catalog), catalog, "q1")
    assert [(t.node, t.role) for t in plan.tasks] == [
        ("door1", "producer"), ("door2", "producer"), ("warehouse1", "merge"), ("door3", "producer"),
        ("door4", "producer"), ("warehouse2", "merge"), ("region", "final")]
    merge = plan.tasks[2].plan
    assert merge.window == Window(2000, 2000) and merge.aggregates == (AggSpec("count", "sum", "count"),)
    assert merge.child.topics == (plan.tasks[0].topic, plan.tasks[1].topic) and merge.child.markers
    north = COUNT_BY_TAG.replace("GROUP BY", "JOIN receptor_locations USING (receptor_id) "
                                             "WHERE location = 'outbound-door' OR location = 'inbound-dock' GROUP BY")
    north = plan_query(analyze(north, catalog), catalog, "q2")
    assert north.placement.root == "warehouse1" and {t.node for t in north.tasks} == {"door1", "door2", "warehouse1"}


def test_joins_run_where_the_relation_is_replicated_and_views_are_reused():
    catalog = supply_chain_catalog()
    text = "SELECT location, count(*) AS n FROM rfid_stream [range by '2 seconds'] " \
           "JOIN receptor_locations USING (receptor_id) GROUP BY location"
    first = plan_query(analyze(text, catalog), catalog, "q1")
    assert isinstance(first.tasks[0].plan.child, LookupJoin)
    # a view of a part's name but another plan (a user's, say) is never read as that part
    squatters = [ExportedView(t.export_as, t.node, t.topic, output_columns(t.plan), Window(2000, 2000), "",
                              plan=first.tasks[-1].plan) for t in first.tasks if t.export_as]
    catalog.views += squatters
    assert not any(t.reused for t in plan_query(analyze(text, catalog), catalog, "q2").tasks)
    catalog.views = [v for v in catalog.views if v not in squatters]
    catalog.views += [ExportedView(t.export_as, t.node, t.topic, output_columns(t.plan), Window(2000, 2000), "",
                                   plan=t.plan) for t in first.tasks if t.export_as]
    second = plan_query(analyze(text, catalog), catalog, "q2")
    assert [t.reused for t in second.tasks] == [True, True, False]
    assert "reuses view" in second.explain()
    from glue.analyzer import refuse_taken_view_name
    from glue.sql.parser import parse
    with pytest.raises(SqlError, match="the planner gives the partial streams"):   # nor may a user take one
        refuse_taken_view_name(parse("CREATE VIEW producer_0123456789ab AS SELECT tag_id FROM rfid_stream"), catalog)
    from dataclasses import replace
    catalog.relations["receptor_locations"] = replace(catalog.relations["receptor_locations"], replicas=("hq",))
    with pytest.raises(SqlError, match="not replicated at door1"):
        plan_query(analyze(text, catalog), catalog, "q3")


def test_the_reference_evaluates_windows_having_and_arbitration():
    catalog = supply_chain_catalog()
    readings = [{"receptor_id": r, "tag_id": t, "antenna": 1, "read_strength": s, "ts": ts}
                for r, t, s, ts in [("door1-r1", "a", 0.5, 100), ("door1-r1", "a", 0.7, 900),
                                    ("door1-r2", "a", 0.9, 1500), ("door1-r2", "b", 0.4, 2500),
                                    ("door1-r1", "b", 0.1, 2600)]]
    reference = Reference(readings, catalog)
    rows = reference.run(analyze("SELECT tag_id, count(*) AS n, avg(read_strength) AS s FROM rfid_stream "
                                 "[range by '2 seconds'] GROUP BY tag_id HAVING count(*) > 1",
                                 catalog))
    assert [(r["window_start"], r["tag_id"], r["n"]) for r in rows] == [(0, "a", 3), (2000, "b", 2)]
    assert rows[0]["s"] == pytest.approx(0.7)
    arbitrated = reference.run(analyze(
        "SELECT receptor_id, count(DISTINCT tag_id) AS tags FROM rfid_stream r [range by '2 seconds'] "
        "GROUP BY receptor_id, tag_id HAVING count(*) >= ALL (SELECT count(*) FROM rfid_stream "
        "[range by '2 seconds'] WHERE tag_id = r.tag_id GROUP BY receptor_id)", catalog))
    # window 0: door1-r1 read a twice, door1-r2 once; window 2000: b read once by each -> smallest id
    assert [(r["window_start"], r["receptor_id"], r["tags"]) for r in arbitrated] == [
        (0, "door1-r1", 1), (2000, "door1-r1", 1)]


def test_plans_type_check_and_mark_their_event_time():
    catalog = supply_chain_catalog()
    plan = plan_query(analyze("SELECT receptor_id, tag_id, ts FROM rfid_stream WHERE read_strength > 0.8", catalog),
                      catalog, "q1")
    producer = plan.tasks[0].plan
    assert dict(output_columns(producer))["__ts"] == "timestamp"
    assert plan.tasks[-1].plan.outputs == (("receptor_id", Col("receptor_id")), ("tag_id", Col("tag_id")),
                                           ("ts", Col("ts")))


def test_the_naive_baseline_re_forms_whole_windows_at_every_level():
    catalog = supply_chain_catalog()
    plan = plan_query(analyze(COUNT_BY_TAG, catalog), catalog, "q1", naive=True)
    assert plan.tasks[0].plan.window == Window(6000, 4000)
    combined = plan.tasks[-1].plan.child.child
    assert combined.window is None and combined.keys[:2] == ("window_start", "window_end")
    assert combined.child.event_time == "window_end" and combined.child.watermark_ms == 2000
    assert not combined.child.markers


def test_lag_per_level_is_measured_from_first_emits():
    from services.bench.lag import level_lags

    by_role = {"producer": [{4000: 4500, 6000: 6600}, {4000: 4700, 6000: 6500}],
               "merge": [{4000: 5200, 6000: 7000}], "final": [{4000: 6000, 6000: 8000}]}
    per_level, end_to_end, windows = level_lags(by_role, since_ms=0)
    assert windows == 2 and end_to_end == 2000
    assert per_level == {"producer": 650, "merge": 450, "final": 900}


def test_a_query_answering_from_its_start_drops_earlier_windows_at_the_root_only():
    catalog = supply_chain_catalog()
    plan = plan_query(analyze(COUNT_BY_TAG, catalog), catalog, "q1")
    started = answering_from(plan, 10_000)
    assert started.tasks[:-1] == plan.tasks[:-1], "shared partials keep their content-hashed names"
    final = started.tasks[-1].plan
    assert isinstance(final, Filter) and output_columns(final) == output_columns(plan.tasks[-1].plan)
    rows = [{"window_start": 8000}, {"window_start": 10_000}]
    assert [evaluate_expr(final.predicate, r) for r in rows] == [False, True]
    assert "answers windows from 1970-01-01T00:00:10.000+00:00" in started.explain()
    selection = plan_query(analyze("SELECT tag_id FROM rfid_stream", catalog), catalog, "q2")
    kept = answering_from(selection, 10_000).tasks[-1].plan
    assert output_columns(kept) == (("tag_id", "string"),) and "__ts" in str(kept)
    # a query over a span of the past: windows starting in [since, until) only
    span = answering_from(plan, 10_000, 14_000)
    rows += [{"window_start": 12_000}, {"window_start": 14_000}]
    assert [evaluate_expr(span.tasks[-1].plan.predicate, r) for r in rows] == [False, True, True, False]
    assert "from 1970-01-01T00:00:10.000+00:00 until 1970-01-01T00:00:14.000+00:00" in span.explain()
    late = replace(span, archive_begins={"door1": 12_000})
    assert "warning: door1's archive begins at 1970-01-01T00:00:12.000+00:00" in late.explain()
    holed = replace(span, archive_gaps={"door2": (11_000, 11_500)})
    assert ("warning: door2 could not archive batches of events from 1970-01-01T00:00:11.000+00:00 to "
            "1970-01-01T00:00:11.500+00:00") in holed.explain()


def test_adaptive_smoothing_runs_in_a_task_of_its_own_at_every_edge_from_the_query_start():
    catalog = supply_chain_catalog()
    query = analyze("SELECT location, count(DISTINCT tag_id) AS tags FROM rfid_stream [adaptive epoch '1 second'] "
                    "JOIN receptor_locations USING (receptor_id) WHERE read_strength >= 0.2 GROUP BY location", catalog)
    plan = answering_from(plan_query(query, catalog, "q7"), 12_345)
    smooth = [t for t in plan.tasks if t.role == "smooth"]
    assert [t.node for t in smooth] == ["door1", "door2"] and all(t.export_as == "smooth_q7" for t in smooth)
    for task in smooth:
        assert isinstance(task.plan, Smooth) and task.plan.from_ms == 12_345 and task.plan.epoch_ms == 1000
        # the readings are joined and filtered before smoothing, the smoothed rows joined again after
        assert isinstance(task.plan.child, Filter) and isinstance(task.plan.child.child, LookupJoin)
        producer = next(t for t in plan.tasks if t.role == "producer" and t.node == task.node)
        assert plan.tasks.index(task) < plan.tasks.index(producer)
        assert isinstance(producer.plan.child, LookupJoin)
        assert producer.plan.child.child == Source((task.topic,), "rows", SMOOTH_COLUMNS, "window_start", 0, True,
                                                     Window(1000, 1000))
    assert plan.placement.root == "warehouse"


def test_the_reference_smooths_each_receptor_from_its_first_reading_after_the_start():
    readings = [{"receptor_id": "r1", "tag_id": "a", "antenna": 1, "read_strength": 0.9, "ts": t}
                for t in (500, 1200, 1400, 2300, 9100)]
    rows = adaptive_smoothed(readings, 1000, 0.25)
    present = [(r["window_start"], r["tag_id"]) for r in rows]
    assert present[:3] == [(0, "a"), (1000, "a"), (2000, "a")]      # read in epochs 0, 1, 2
    assert (9000, "a") in present and max(r["epochs"] for r in rows) >= 1
    assert rows[1]["reads"] == 3                                    # epochs 0 and 1 in a window of 2 or more
    later = adaptive_smoothed(readings, 1000, 0.25, from_ms=1001)  # smoothing begins at epoch 2
    assert min(r["window_start"] for r in later) == 2000


def test_a_running_view_subsumes_a_producer_only_when_it_holds_all_it_needs():
    from glue.catalog import ExportedView
    from glue.rewrite.reuse import rollup_from

    raw = Source(("hifi.raw.door1",), "rfid", RAW_RFID_SOURCE_COLUMNS, "ts", 1000)
    strong = BinOp(">=", Col("read_strength"), Lit(0.3))
    door = BinOp("=", Col("receptor_id"), Lit("door1-r1"))
    running = Aggregate(Filter(raw, strong), ("receptor_id", "tag_id"),
                        (AggSpec("n", "count"), AggSpec("top", "max", "read_strength")), None, Window(2000, 2000))
    view = ExportedView("producer_x", "door1", "hifi.view.door1.producer_x", tuple(output_columns(running)),
                        Window(2000, 2000), "", plan=running)

    def wanted(predicate, keys=("receptor_id",), specs=None, pane=4000):
        return Aggregate(Filter(raw, predicate), keys, specs or (AggSpec("c", "count"),), None, Window(pane, pane))

    rolled = rollup_from(wanted(BinOp("AND", strong, door)), view)
    assert rolled == Aggregate(Filter(Source((view.topic,), "rows", view.columns, "window_start", 0, True,
                                             Window(2000, 2000)), door),
                               ("receptor_id",), (AggSpec("c", "sum", "n"),), None, Window(4000, 4000))
    assert rollup_from(wanted(strong, specs=(AggSpec("m", "max", "read_strength"),)), view) is not None
    assert rollup_from(wanted(door), view) is None                                  # keeps rows the view dropped
    assert rollup_from(wanted(BinOp("AND", strong, BinOp("<", Col("read_strength"), Lit(0.9)))), view) is None
    assert rollup_from(wanted(strong, keys=("antenna",)), view) is None             # a coarser grouping only
    assert rollup_from(wanted(strong, pane=3000), view) is None                     # panes must divide
    assert rollup_from(wanted(strong, specs=(AggSpec("s", "sum", "read_strength"),)), view) is None  # not held
