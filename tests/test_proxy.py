"""The sensor proxy's rules (glue.proxy, wire.receptor_settings), pure: a mote under its rule sends
every sample a running part could use, so each query's answer is the one it gets from every
sample — checked against SQL's own semantics on generated predicates, and against the central
answer over every sample for queries planned over the hierarchy while the motes hold back."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from base.plan import SAMPLE_QUANTITIES, BinOp, Col, Filter, Func, Lit, conjuncts
from glue.analyzer import analyze
from glue.planner import plan_query
from glue.proxy import mote_rules, rule_for
from glue.reference import Reference, evaluate_expr
from services.judge import as_ms, same_rows
from tests.test_equivalence import MOTES, SENSOR_CATALOG, SENSOR_QUERIES, SENSOR_RELATIONS, run_bottom_up, sample_batch
from tests.test_equivalence import samples as generated_samples
from wire.receptor_settings import ALWAYS, NEVER, ReceptorSettings, describe, wants

# ------------------------------------------------------------------ generated predicates

MOTE = "door1-m1"
_numbers = st.sampled_from([10, 20.5, 25, 30, 40])
_operands = st.one_of(   # (column, a constant of its type, or NULL)
    st.tuples(st.sampled_from(SAMPLE_QUANTITIES[:3]), st.one_of(_numbers, st.none())),
    st.tuples(st.just("receptor_id"), st.sampled_from(["door1-m1", "door1-m2", None])))


def _comparison(operands, op, flipped):
    left, right = Col(operands[0]), Lit(operands[1])
    if flipped:
        left, right = right, left
    return BinOp(op, left, right)


_atoms = st.one_of(
    st.builds(_comparison, _operands, st.sampled_from(["<", "<=", ">", ">=", "=", "!="]), st.booleans()),
    st.builds(lambda c, n: BinOp(">", BinOp("*", Col(c), Lit(2)), Lit(n)), st.sampled_from(SAMPLE_QUANTITIES[:3]),
              _numbers),                                        # arithmetic: a mote cannot check it
    st.builds(lambda c: BinOp(">", Func("double", (Col(c),)), Lit(20)), st.sampled_from(SAMPLE_QUANTITIES[:3])),
    st.sampled_from([Lit(True), Lit(False), Lit(None)]),
)
_predicates = st.recursive(_atoms, lambda inner: st.one_of(
    st.builds(lambda a, b: BinOp("AND", a, b), inner, inner),
    st.builds(lambda a, b: BinOp("OR", a, b), inner, inner),
    st.builds(lambda a: Func("not", (a,)), inner)), max_leaves=6)
_samples = st.fixed_dictionaries({q: st.one_of(st.none(), st.sampled_from([5.0, 10, 20.5, 25, 31.0, 45]))
                                  for q in SAMPLE_QUANTITIES[:3]})


@settings(max_examples=400, deadline=None, derandomize=True)
@given(predicate=_predicates, values=_samples, mote=st.sampled_from(["door1-m1", "door1-m2"]))
def test_a_motes_rule_keeps_every_sample_its_predicate_keeps(predicate, values, mote):
    row = {"receptor_id": mote, **values}
    if evaluate_expr(predicate, row) is True:   # a filter keeps only true (SQL's three-valued logic)
        sent = {q: v for q, v in values.items() if v is not None}   # a missing quantity is not sent
        assert wants(rule_for(predicate, mote), sent), (predicate, describe(rule_for(predicate, mote)))


# ------------------------------------------------------------------ rules of planned queries

def edge_rules(sql: str, edge: str = "door1") -> dict[str, str]:
    plan = plan_query(analyze(sql, SENSOR_CATALOG), SENSOR_CATALOG, "q")
    plans = [task.plan for task in plan.tasks if task.node == edge]
    return {mote: describe(rule) for mote, rule in mote_rules(plans, MOTES[edge]).items()}


@pytest.mark.parametrize(("sql", "told"), [
    ("SELECT receptor_id, temperature, ts FROM sensor_stream WHERE temperature > 35",
     {"door1-m1": "(temperature > 35)", "door1-m2": "(temperature > 35)"}),
    ("SELECT receptor_id, avg(temperature) AS t FROM sensor_stream [range by '4 seconds'] GROUP BY receptor_id",
     {"door1-m1": "always", "door1-m2": "always"}),
    ("SELECT receptor_id, temperature, ts FROM sensor_stream WHERE receptor_id = 'door1-m2' AND NOT humidity >= 40",
     {"door1-m1": "never", "door1-m2": "(humidity < 40)"}),
    ("SELECT receptor_id, temperature, ts FROM sensor_stream WHERE temperature * 1.8 + 32 > 100",
     {"door1-m1": "always", "door1-m2": "always"}),
    ("SELECT location, count(*) AS n FROM sensor_stream [range by '2 seconds'] JOIN receptor_locations "
     "USING (receptor_id) WHERE location = 'inbound-dock' AND temperature > 30 GROUP BY location",
     {"door1-m1": "(temperature > 30)", "door1-m2": "(temperature > 30)"}),
    # a pattern over readings and samples: its steps' conditions reach the motes, the weaker one kept
    ("SELECT a.receptor_id AS m, b.ts AS ts FROM receptor_stream PATTERN SEQ(a, b) WITHIN '3 seconds' "
     "PARTITION BY receptor_id DEFINE a AS temperature > 40, b AS temperature > 45",
     {"door1-m1": "(temperature > 40)", "door1-m2": "(temperature > 40)"}),
])
def test_the_proxy_tells_each_mote_the_thresholds_of_the_parts_reading_it(sql, told):
    assert edge_rules(sql) == told


@pytest.mark.parametrize(("sql", "fields"), [
    ("SELECT receptor_id, temperature, ts FROM sensor_stream WHERE temperature > 35", ("temperature",)),
    ("SELECT receptor_id, max(light) AS l FROM sensor_stream [range by '4 seconds'] WHERE humidity > 3 "
     "GROUP BY receptor_id", ("humidity", "light")),
    ("SELECT receptor_id, voltage AS v, ts FROM sensor_stream", ("voltage",)),   # renamed: named where renamed
    ("SELECT count(*) AS n FROM sensor_stream [range by '4 seconds']", ()),        # no quantity named: all
    # a pattern over receptor_stream reads every column of the union
    ("SELECT a.receptor_id AS m, b.ts AS ts FROM receptor_stream PATTERN SEQ(a, b) WITHIN '3 seconds' "
     "PARTITION BY receptor_id DEFINE a AS temperature > 40, b AS humidity > 45", ()),
])
def test_the_proxy_tells_each_mote_the_quantities_the_parts_read(sql, fields):
    from glue.proxy import mote_fields

    plan = plan_query(analyze(sql, SENSOR_CATALOG), SENSOR_CATALOG, "q")
    assert mote_fields([t.plan for t in plan.tasks if t.node == "door1"], MOTES["door1"]) == \
        dict.fromkeys(MOTES["door1"], fields)
    # the quantities sent are enough: the central answer from them is the one from every quantity
    every = [{"receptor_id": m, "temperature": t, "humidity": h, "light": 300.0, "sound": 40.0, "voltage": 2.9,
              "ts": ms} for rows in generated_samples(2).values() for m, t, h, ms in rows]
    kept = [{**row, **{q: None for q in SAMPLE_QUANTITIES if fields and q not in fields}} for row in every]
    query = analyze(sql, SENSOR_CATALOG)
    assert Reference([], SENSOR_CATALOG, samples=kept).run(query) == \
        Reference([], SENSOR_CATALOG, samples=every).run(query)


def test_a_mote_no_part_reads_sends_nothing_and_one_any_part_reads_in_full_sends_everything():
    threshold = analyze("SELECT receptor_id, temperature, ts FROM sensor_stream WHERE temperature > 35", SENSOR_CATALOG)
    everything = analyze("SELECT receptor_id, count(*) AS n FROM sensor_stream [range by '2 seconds'] "
                         "GROUP BY receptor_id", SENSOR_CATALOG)
    plans = [t.plan for q in (threshold, everything) for t in plan_query(q, SENSOR_CATALOG, "q").tasks
             if t.node == "door1"]
    assert mote_rules([], MOTES["door1"]) == dict.fromkeys(MOTES["door1"], NEVER)
    assert mote_rules(plans, MOTES["door1"]) == dict.fromkeys(MOTES["door1"], ALWAYS)
    rfid_only = [t.plan for t in plan_query(analyze("SELECT tag_id, ts FROM rfid_stream", SENSOR_CATALOG),
                                            SENSOR_CATALOG, "q").tasks if t.node == "door1"]
    assert mote_rules(rfid_only, MOTES["door1"]) == dict.fromkeys(MOTES["door1"], NEVER)


# ------------------------------------------------------------------ answers while the motes hold back

THRESHOLD_QUERIES = {
    **SENSOR_QUERIES,
    "a threshold alert per mote over windows": (
        "SELECT receptor_id, count(*) AS hot, max(temperature) AS hottest FROM sensor_stream [range by '4 seconds'] "
        "WHERE temperature >= 33 GROUP BY receptor_id", "warehouse"),
    "two thresholds, OR": (
        "SELECT receptor_id, temperature, humidity, ts FROM sensor_stream WHERE temperature > 38 OR humidity < 25",
        "warehouse"),
}


def answered_while_held_back(sql: str, taken: dict[str, list[tuple]]) -> tuple[int, list, list]:
    """`sql` planned over the hierarchy and run bottom-up on the samples its motes send of those
    they `taken`: (how many were held back, its rows, the central answer over every sample taken)."""
    plan = plan_query(analyze(sql, SENSOR_CATALOG), SENSOR_CATALOG, "q")
    sent: dict[str, list] = {}
    for edge, rows in taken.items():
        rules = mote_rules([t.plan for t in plan.tasks if t.node == edge], MOTES[edge])
        # a held sample leaves only its batch's clock (no receptor): event time moves on
        sent[edge] = [row if wants(rules[row[0]], {"temperature": row[1], "humidity": row[2], "voltage": 2.9}, row[3])
                      else (None, None, None, row[3]) for row in rows]
    emitted = run_bottom_up([(t.topic, t.plan) for t in plan.tasks], sent, clock_batch,
                            lambda edge, ms: (MOTES[edge][0], 0.0, 0.0, ms), SENSOR_RELATIONS)
    got = [tuple(as_ms(v) for v in row) for row in emitted[plan.result_topic]]
    every = [{"receptor_id": m, "temperature": t, "humidity": h, "light": None, "sound": None, "voltage": 2.9,
              "ts": ms} for rows in taken.values() for m, t, h, ms in rows]
    want = [tuple(r[c] for c in plan.columns)
            for r in Reference([], SENSOR_CATALOG, samples=every).run(analyze(sql, SENSOR_CATALOG))]
    if not plan.query.is_aggregate:   # the sentinel row that closes the windows is a sample too
        got = [r for r in got if r[plan.columns.index("ts")] < max(r["ts"] for r in every) + 1000]
    return sum(row[0] is None for rows in sent.values() for row in rows), got, want


@pytest.mark.parametrize("name", THRESHOLD_QUERIES)
def test_answers_are_those_of_every_sample_while_the_motes_hold_back_what_the_proxy_says(name):
    sql = THRESHOLD_QUERIES[name][0]
    held, got, want = answered_while_held_back(sql, generated_samples(5))
    assert want and same_rows(got, want), (sql, sorted(got)[:5], sorted(want)[:5])
    if "WHERE temperature" in sql or "OR humidity" in sql:
        assert held > 0, "a threshold query lets the motes hold samples back"


def clock_batch(rows: list[tuple]) -> pa.Table:
    """sample_batch, where a held sample's clock row has no receptor and no values."""
    table = sample_batch([(m or "", t or 0.0, h or 0.0, ms) for m, t, h, ms in rows])
    held = pa.array([m is None for m, *_ in rows])
    return table.set_column(0, "receptor_id", pa.compute.if_else(held, pa.scalar(None, pa.string()),
                                                                  table["receptor_id"]))


# ------------------------------------------------------------------ the control record

def test_settings_travel_as_a_control_record_and_a_malformed_one_is_refused():
    told = ReceptorSettings("door1", 7, 1_700_000_000_000, {
        "door1-m1": ((("temperature", ">", 35.0),), (("humidity", "<", 20.0), ("voltage", ">=", 2.5))),
        "door1-m2": NEVER, "door1-m3": ALWAYS}, {"door1-m1": ("temperature", "voltage")})
    key, value = told.encode()
    assert key == b"door1" and ReceptorSettings.decode(value) == told
    assert told.sent("door1-m1", {"temperature": 1.0, "humidity": 2.0}) == {"temperature": 1.0}
    assert told.sent("door1-m3", {"temperature": 1.0, "humidity": 2.0}) == {"temperature": 1.0, "humidity": 2.0}
    assert told.rule("a-mote-not-named") == ALWAYS
    assert wants(told.rule("door1-m1"), {"temperature": 36.0}) and not wants(told.rule("door1-m1"), {"humidity": 19.0})
    assert wants(told.rule("door1-m1"), {"humidity": 19.0, "voltage": 2.6})
    assert not wants(told.rule("door1-m2"), {"temperature": 99.0}) and wants(told.rule("door1-m3"), {})
    with pytest.raises(ValueError, match="undecodable"):
        ReceptorSettings.decode(b"\xff\xff\xff")
    strange = ReceptorSettings("door1", 8, 0, {"door1-m1": ((("temperature", "~", 1.0),),)})
    with pytest.raises(ValueError, match="unknown comparison"):
        ReceptorSettings.decode(strange.encode()[1])


def test_the_proxy_bench_on_the_intel_lab_replay_sends_far_fewer_samples_for_alerts_with_identical_answers():
    from services.bench.proxy import run, table

    alerts, per_minute, with_averages = run()   # the whole replay, as docs/benchmarks.md reports it
    assert alerts.samples >= 5 * alerts.sent > 0 and alerts.batch_bytes > 4 * alerts.sent_bytes
    assert all(r.identical.values() for r in (alerts, per_minute, with_averages))
    # per-room averages per minute (one sample a mote a minute) add a sixtieth: still 5x fewer
    assert per_minute.samples >= 5 * per_minute.sent and all("every 60 s" in rule for rule in per_minute.rules.values())
    # a per-room average over every sample needs every sample: its workload saves nothing, and says so
    assert with_averages.sent == with_averages.samples
    assert set(with_averages.rules.values()) == {"always, temperature, humidity"}   # no voltage: no query reads it
    assert with_averages.sent_bytes < with_averages.batch_bytes
    assert "identical" in table([alerts]) and "DIFFERENT" not in table([alerts, per_minute, with_averages])


# ------------------------------------------------------------------ selectivity from the motes' history

@settings(max_examples=200, deadline=None, derandomize=True)
@given(values=st.lists(st.one_of(st.floats(-30, 120), st.sampled_from([-25.0, 20.0, 108.0, 130.0])), min_size=1,
                       max_size=300),
       threshold=st.floats(-30, 120), op=st.sampled_from(["<", "<=", ">", ">="]))
def test_a_histogram_estimates_a_thresholds_share_within_the_bucket_it_falls_in(values, threshold, op):
    from wire import histogram
    from wire.receptor_settings import COMPARISONS

    counts = histogram.empty()
    for value in values:
        histogram.add(counts, "temperature", value)
    true = sum(COMPARISONS[op](v, threshold) for v in values) / len(values)
    # the one bucket the threshold cuts is where the estimate may err: at most its share
    slack = counts[histogram.bucket_of("temperature", threshold)] / len(values)
    assert abs(histogram.fraction(counts, "temperature", op, threshold) - true) <= slack + 1e-9


def test_a_histogram_forgets_by_halving_and_refuses_what_is_not_a_mote_histogram_and_a_batch_says_what_it_obeyed():
    from wire import histogram
    from wire.codec import decode_mote_reports, encode_sensor_batch
    from wire.intake import IntakeRules

    counts = histogram.empty()
    for i in range(5000):
        histogram.add(counts, "humidity", 40.0 + i % 10)
    assert 0 < sum(counts) <= histogram.RECENT_SAMPLES and histogram.fraction(counts, "humidity", "<", 0.0) == 0.0
    _, value = encode_sensor_batch("door1", 1, [], 1, 7, {("door1-m1", "humidity"): counts,
                                                          ("door1-m1", "colour"): counts,
                                                          ("nobody", "humidity"): counts,
                                                          ("door1-m2", "humidity"): [1, 2, 3]})
    found, problems, obeyed = decode_mote_reports(value, IntakeRules("door1", {"door1-m1": "door1",
                                                                               "door1-m2": "door1"}))
    assert found == {("door1-m1", "humidity"): counts} and obeyed == 7   # the settings its motes obeyed
    assert sorted(p.split(": ", 1)[1] for p in problems) == [
        "3 counts, not 66", "receptor 'nobody' is not registered", "unknown quantity 'colour'"]


def _with_histograms():
    from dataclasses import replace

    from wire import histogram

    made = {}
    for mote in MOTES["door1"] + MOTES["door2"]:
        for quantity, values in (("temperature", range(15, 40)), ("humidity", range(20, 70, 2))):
            counts = histogram.empty()
            for value in values:
                histogram.add(counts, quantity, float(value))
            made[(mote, quantity)] = counts
    return replace(SENSOR_CATALOG, histograms=made)


def test_the_planner_evaluates_the_most_selective_term_first_and_explains_its_estimates():
    catalog = _with_histograms()
    sql = ("SELECT receptor_id, temperature, ts FROM sensor_stream "
           "WHERE humidity >= 25 AND temperature * 2 > 10 AND temperature > 35")
    plan = plan_query(analyze(sql, catalog), catalog, "q")
    assert [e.describe() for e in plan.estimates] == [
        "temperature > 35 ~0.20", "humidity >= 25 ~0.90", "temperature * 2 > 10 (no estimate)"]   # true: 0.16, 0.92
    assert "filter, most selective first (the motes' recent values): temperature > 35 ~0.20" in plan.explain()
    edge = next(t.plan for t in plan.tasks if t.node == "door1")
    filtered = edge.child
    while not isinstance(filtered, Filter):
        filtered = filtered.child
    assert conjuncts(filtered.predicate)[0] == BinOp(">", Col("temperature"), Lit(35))
    # without histograms, or over another stream, the terms stay as written
    assert not plan_query(analyze(sql, SENSOR_CATALOG), SENSOR_CATALOG, "q").estimates
    assert not plan_query(analyze("SELECT tag_id, ts FROM rfid_stream WHERE read_strength > 0.5 AND antenna = 1",
                                  catalog), catalog, "q").estimates


def test_the_proxy_bench_estimates_the_replays_selectivities_and_a_planned_filter_is_no_slower():
    import statistics

    from services.bench.proxy import run_selectivity

    result = run_selectivity(120.0, passes=30)
    assert statistics.median(abs(share - then) for _, share, then, _ in result.terms) <= 0.05
    assert result.planned_order.startswith("temperature > 25")
    assert result.planned_ms <= result.worst_ms * 1.5   # fastest passes, interleaved: no slower, give or take noise


# ------------------------------------------------------------------ `sample every`: a query's sample period

SAMPLED = ("SELECT receptor_id, avg(temperature) AS t, count(*) AS n FROM sensor_stream "
           "[range by '4 seconds', sample every '1 second'] GROUP BY receptor_id")


def test_sample_every_is_for_sensor_windows_and_errors_name_the_position():
    from glue.sql.lexer import SqlError

    assert analyze(SAMPLED, SENSOR_CATALOG).sample_ms == 1000
    cases = {
        "SELECT tag_id, count(*) AS n FROM rfid_stream [range by '4 seconds', sample every '1 second'] GROUP BY tag_id":
            "line 1, column 83: sample every is for sensor_stream",
        SAMPLED.replace("'1 second'", "'0 seconds'"): "sample every needs a positive period",
        SAMPLED.replace("sample every", "sample"): "expected EVERY",
    }
    for sql, message in cases.items():
        with pytest.raises(SqlError, match=message):
            analyze(sql, SENSOR_CATALOG)
    assert edge_rules(SAMPLED) == dict.fromkeys(MOTES["door1"], "(every 1 s)")
    both = edge_rules(SAMPLED.replace("GROUP BY", "WHERE humidity > 40 GROUP BY"))
    assert both == dict.fromkeys(MOTES["door1"], "(every 1 s AND humidity > 40)")


def test_a_sampled_query_answers_over_its_period_while_the_motes_send_only_that():
    # samples every 500 ms on the half second (the generated ones, moved onto it): every other one is on the period
    taken = {edge: [(m, t, h, ms - ms % 500) for m, t, h, ms in rows] for edge, rows in generated_samples(6).items()}
    held, got, want = answered_while_held_back(SAMPLED, taken)
    assert held >= sum(len(rows) for rows in taken.values()) // 3
    assert want and same_rows(got, want), (sorted(got)[:5], sorted(want)[:5])
    _, _, unsampled = answered_while_held_back(SAMPLED.replace(", sample every '1 second'", ""), taken)
    assert sum(r[-1] for r in unsampled) > sum(r[-1] for r in want), "the period keeps fewer samples per window"
