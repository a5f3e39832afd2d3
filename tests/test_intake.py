"""wire.intake and glue.limits: what nodes accept, as pure functions."""

import datetime as dt
import random
from collections import Counter

import pytest

from glue.limits import Limits, check_name
from glue.sql.lexer import Pos, SqlError
from wire.intake import IntakeRules, RecentCycles, arrival_ms, rows_problem, value_problem

NOW = 1_800_000_000_000


def test_event_time_is_judged_against_the_records_arrival_in_both_directions():
    rules = IntakeRules(max_ahead_ms=500, max_behind_ms=60_000)
    assert rules.time_problem(NOW + 500, NOW) is None and rules.time_problem(NOW - 60_000, NOW) is None
    assert "501 ms ahead" in rules.time_problem(NOW + 501, NOW)
    assert "60 s older" in rules.time_problem(NOW - 60_001, NOW)
    assert "non-positive" in rules.time_problem(0, NOW)


def test_arrival_is_the_record_timestamp_unless_missing_or_ahead_of_the_node():
    assert arrival_ms(NOW - 5, NOW) == NOW - 5
    assert arrival_ms(NOW + 55_000, NOW) == NOW       # a producer's clock may not run ahead of the node's
    assert arrival_ms(-1, NOW) == NOW and arrival_ms(None, NOW) == NOW


def test_rules_survive_the_trip_to_a_worker():
    rules = IntakeRules("door1", {"r1": "door1"}, 250, 9_000)
    assert IntakeRules.from_option(rules.to_option()) == rules
    assert IntakeRules.from_option("") == IntakeRules()


def test_duplicate_decisions_depend_only_on_the_log_not_on_who_reads_which_range():
    """Readers at different positions sharing one span, ranges read by another process (gaps),
    a cold start mid-partition: each decides as one reader that read the whole log in order."""
    rng = random.Random(5)
    log = [(f"r{rng.randrange(4)}", rng.randrange(30)) for _ in range(600)]
    whole = RecentCycles(0, lookback=50)
    expected = [whole.seen(key, offset) for offset, key in enumerate(log)]
    assert 0 < sum(e is not None for e in expected) < len(log)

    def read(recent: RecentCycles, start: int, end: int) -> list:
        if not recent.serves(start):   # what dsp.spark.kafka_source does: start over, or fill the gap
            recent = RecentCycles(max(0, start - 50), lookback=50)
        if start > recent.hi:
            for offset in range(recent.hi, start):
                recent.seen(log[offset], offset)
            recent.reached(start)
        got = [recent.seen(log[offset], offset) for offset in range(start, end)]
        recent.reached(end)
        return got

    for _ in range(30):
        shared = RecentCycles(0, lookback=50)
        fast = slow = 0
        while slow < len(log):
            if fast < len(log) and rng.random() < 0.6:
                step = rng.randrange(1, 40)
                skip = rng.random() < 0.3          # this range went to another worker
                start, fast = fast, min(len(log), fast + step)
                if not skip:
                    assert read(shared, start, fast) == expected[start:fast]
            else:
                start, slow = slow, min(fast if fast > slow else len(log), slow + rng.randrange(1, 40))
                assert read(shared, start, slow) == expected[start:slow]
    cold = RecentCycles(250, lookback=50)   # a query starting mid-partition
    assert read(cold, 300, 600) == expected[300:600]


@pytest.mark.parametrize(("value", "kind", "ok"), [
    ("x", "string", True), (3, "string", False), (3, "long", True), (True, "long", False), (2**63, "long", False),
    (2**31, "int", False), (1.5, "double", True), (2, "double", True), (True, "double", False),
    (dt.datetime(2026, 1, 1, tzinfo=dt.UTC), "timestamp", True), ("2026", "timestamp", False),
    (["a", "b"], "array<string>", True), (["a", 1], "array<string>", False), ("ab", "array<string>", False),
    (None, "long", True), (True, "boolean", True), (1, "boolean", False),
])
def test_values_are_checked_against_their_column_type(value, kind, ok):
    assert (value_problem(value, kind) is None) == ok


def test_a_batch_missing_a_column_or_with_a_ragged_row_is_refused():
    wanted = [("tag_id", "string"), ("n", "long")]
    assert rows_problem(["tag_id", "n", "extra"], [("a", 1, 0.5)], wanted) is None
    assert "missing column(s) n" in rows_problem(["tag_id"], [("a",)], wanted)
    assert "row 0, column n" in rows_problem(["tag_id", "n"], [("a", "1")], wanted)


def test_windows_over_the_admission_limits_are_refused_with_the_limit_named():
    limits = Limits()
    limits.check_window(3_600_000, 60_000, Pos(1, 1))          # 60 windows per row, 60 panes: fine
    cases = {(3_600_000, 1): "limit_windows_per_row", (3_600_000, 3_599_900): "limit_window_panes",
             (50, 50): "limit_min_pane_ms"}
    for (range_ms, slide_ms), parameter in cases.items():
        with pytest.raises(SqlError, match=parameter) as error:
            limits.check_window(range_ms, slide_ms, Pos(2, 7))
        assert error.value.line == 2 and error.value.column == 7
    assert Limits.from_parameters({"limit_windows_per_row": "5", "strength_T": 0.2}).windows_per_row == 5
    with pytest.raises(SqlError, match="whole number"):
        Limits.from_parameters({"limit_nesting": "deep"})


def test_names_that_cannot_be_topics_are_refused():
    check_name("smoothed_rfid_stream")
    for bad in ("../../evil name", "9lives", "", "a" * 101, "Dots.in.it"):
        with pytest.raises(SqlError, match="cannot name a topic"):
            check_name(bad)


def test_the_ingest_tally_counts_readings_cycles_weak_reads_and_refusals_per_receptor():
    from dsp.spark.ingest import IngestTally
    from dsp.spark.lane_offsets import OffsetRange
    from wire.codec import TagObservation, encode_read_cycle
    from wire.cycle_columns import RawCycle, decode_cycles
    from wire.intake import RecentCycles

    tally = IngestTally(OffsetRange("hifi.raw.d1", 0, 0, 6), weak_below=0.2)
    cycles = [("r1", 0, 1000, [0.5, 0.1, 0.9]), ("r2", 0, 3000, [0.15]), ("r1", 1, 2000, []), ("r1", 1, 2000, [])]
    records = []
    for offset, (receptor, cycle, ts, strengths) in enumerate(cycles):
        reads = [TagObservation(f"t{i}", 1, strength) for i, strength in enumerate(strengths)]
        records.append(RawCycle(encode_read_cycle(receptor, cycle, ts, reads)[1], offset, ts))
    records.append(RawCycle(b"\xff garbage", 4, 5000))
    valid_cycles: Counter[str] = Counter()
    tally.add(decode_cycles(records, 0, recent=RecentCycles(0), valid_cycles=valid_cycles), valid_cycles)
    assert (tally.good, tally.cycles, tally.max_event_ms, len(tally.dead), tally.duplicates) == (4, 3, 3000, 1, 1)
    assert tally.per_receptor == {"r1:reads": 3, "r2:reads": 1, "r1:cycles": 2, "r2:cycles": 1,
                                  "r1:weak": 1, "r2:weak": 1}
