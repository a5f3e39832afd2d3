import pytest

from base.plan import (
    RAW_RFID_SOURCE_COLUMNS,
    Aggregate,
    AggSpec,
    BinOp,
    Col,
    Filter,
    Lit,
    LookupJoin,
    PlanError,
    Project,
    Source,
    Window,
)
from base.plan_json import from_json, to_json
from base.plan_schema import event_time_column, output_columns, window_of
from wire.windows import WindowError

RAW = Source(("hifi.raw.d1",), "rfid", RAW_RFID_SOURCE_COLUMNS, "ts", 1000)


def smoothed():
    return Aggregate(Filter(RAW, BinOp(">=", Col("read_strength"), Lit(0.2))), ("receptor_id", "tag_id"),
                     (AggSpec("reads", "count"),), BinOp(">=", Col("reads"), Lit(2)), Window(5000, 1000))


def test_windowed_aggregate_schema_and_event_time():
    plan = smoothed()
    assert output_columns(plan) == (("window_start", "timestamp"), ("window_end", "timestamp"),
                                    ("receptor_id", "string"), ("tag_id", "string"), ("reads", "long"))
    assert event_time_column(plan) == "window_end"
    assert window_of(plan).describe() == "range 5s slide 1s"


def test_json_round_trip_preserves_the_tree():
    upper = Source(("a", "b"), "rows", output_columns(smoothed()), "window_end", 2000)
    plan = Aggregate(
        LookupJoin(Aggregate(upper, ("window_start", "window_end", "tag_id"),
                             (AggSpec("receptor_id", "argmax", "receptor_id", "reads"),)),
                   "receptor_locations", "receptor_id", (("location", "string"),)),
        ("window_start", "window_end", "location"), (AggSpec("tags", "count"), AggSpec("avg_x", "avg", "tag_id")))
    for tree in (smoothed(), plan, Project(RAW, (("t", Col("tag_id")),))):
        assert from_json(to_json(tree)) == tree


@pytest.mark.parametrize("plan, message", [
    (Filter(RAW, BinOp(">=", Col("strength"), Lit(1))), "unknown column 'strength'"),
    (Filter(RAW, Col("tag_id")), "not a condition"),
    (Aggregate(RAW, ("nope",), ()), "GROUP BY: unknown column 'nope'"),
    (Aggregate(RAW, (), (AggSpec("m", "median", "read_strength"),)), "unknown function 'median'"),
    (Aggregate(RAW, (), (AggSpec("s", "sum"),)), "sum needs an existing column"),
    (Aggregate(RAW, (), (AggSpec("a", "argmax", "tag_id"),)), "argmax needs an existing 'by' column"),
])
def test_type_errors_name_the_problem(plan, message):
    with pytest.raises(PlanError, match=message):
        output_columns(plan)


def test_bad_windows_and_json_are_refused():
    with pytest.raises(WindowError, match="exceeds its range"):
        Window(1000, 5000)
    with pytest.raises(WindowError, match="positive"):
        Window(0, 0)
    with pytest.raises(PlanError, match="positive"):
        from_json(to_json(RAW).join(['{"op": "Aggregate", "child": ', ', "keys": [], "aggregates": [], '
                                                              '"window": {"range_ms": 0, "slide_ms": 0}}']))
    with pytest.raises(PlanError, match="unknown plan operator"):
        from_json('{"op": "Teleport"}')
    with pytest.raises(PlanError, match="malformed plan JSON"):
        from_json("{not json")
    # a plan from the wire that is JSON but not a plan is the caller's mistake too (a node answers
    # INVALID_ARGUMENT, not an internal error): HiFiError is no ValueError
    for not_a_plan in ("[]", to_json(RAW).replace('"watermark_ms": 1000', '"watermark_ms": "soon"')):
        with pytest.raises(PlanError, match="malformed plan JSON"):
            from_json(not_a_plan)
