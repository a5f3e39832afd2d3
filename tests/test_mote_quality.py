"""Faulty mote detection (pure) on hand-built periods whose right answer is known, and on the real
Intel Lab readings with injected faults."""

import pickle
import random

import pyarrow as pa

from base.mote_quality import MoteQuality
from base.plan import RAW_SAMPLE_SOURCE_COLUMNS, SAMPLE_QUANTITIES, LookupJoin, Qualify, Source
from dsp.operators.build import build, rows_of
from dsp.operators.expressions import arrow_schema
from glue.reference import mote_quality_rows
from services.bench.cleaning import mote_detection
from wire.codec import ms_to_datetime

GRID = {f"m{i}": (float(i % 3) * 3, float(i // 3) * 3) for i in range(9)}


def _period(t: int, **changes: dict[str, float]) -> dict[str, dict[str, float]]:
    """Every mote of the grid reading a room at 20 °C / 40 % that warms slowly, with offsets."""
    base = {m: {"temperature": 20.0 + 0.1 * t + 0.3 * i, "humidity": 40.0 - 0.1 * t + 0.5 * i, "voltage": 2.7}
            for i, m in enumerate(GRID)}
    for mote, values in changes.items():
        base[mote] = {**base[mote], **values}
    return base


def _judge(periods: list[dict[str, dict[str, float]]]) -> list[dict[str, tuple[str, ...]]]:
    quality = MoteQuality(GRID)
    return [{v.receptor_id: v.reasons for v in quality.step(t, samples) if v.faulty}
            for t, samples in enumerate(periods)]


def test_healthy_motes_with_offsets_are_never_flagged_and_trusted_once_their_offsets_are_known():
    quality = MoteQuality(GRID)
    verdicts = [quality.step(t, _period(t)) for t in range(30)]
    assert not any(v.faulty for period in verdicts for v in period)
    assert min(v.confidence for v in verdicts[0]) < 0.9 <= min(v.confidence for v in verdicts[-1])


def test_a_mote_that_dies_is_silent_from_its_death_on():
    periods = [_period(t) for t in range(10)]
    for t in range(6, 10):
        del periods[t]["m4"]
    flagged = _judge(periods)
    assert [t for t, f in enumerate(flagged) if f] == [6, 7, 8, 9]
    assert all(f == {"m4": ("silent",)} for f in flagged[6:])


def test_a_stuck_mote_is_caught_after_its_run_and_a_spike_at_once():
    periods = [_period(t) for t in range(12)]
    for t in range(5, 12):
        periods[t]["m2"] = dict(periods[5]["m2"])
    periods[8]["m7"]["temperature"] += 25.0
    flagged = _judge(periods)
    assert [t for t, f in enumerate(flagged) if "m2" in f] == [7, 8, 9, 10, 11]   # 3 identical samples
    assert [t for t, f in enumerate(flagged) if "m7" in f] == [8]
    assert flagged[8]["m7"] == ("neighbours:temperature",)


def test_a_dying_battery_is_out_of_limits_and_a_mote_in_the_sun_is_not_faulty():
    periods = [_period(t) for t in range(12)]
    periods[10]["m1"].update(temperature=104.0, voltage=2.1)
    for t in range(6, 9):   # the sun on m5: 9 °C warmer and 12 % drier than around it
        periods[t]["m5"]["temperature"] += 9.0
        periods[t]["m5"]["humidity"] -= 12.0
    flagged = _judge(periods)
    assert flagged[10] == {"m1": ("limits:temperature", "limits:voltage")}
    assert not any(flagged[6:9])


def test_injected_faults_in_the_intel_lab_replay_are_found_with_precision_and_recall_over_0_9():
    tp, fp, fn = mote_detection(seed=11)
    assert tp / (tp + fp) >= 0.9 and tp / (tp + fn) >= 0.9, (tp, fp, fn)


def _sample_batch(samples: list[tuple[int, str | None, dict[str, float]]]) -> pa.Table:
    """A samples reader's batch of (ms, mote, values); a mote of None is the reader's clock row."""
    return pa.Table.from_pylist([{"receptor_id": mote, **{q: values.get(q) for q in SAMPLE_QUANTITIES},
                                  "ts": ms_to_datetime(ms)} for ms, mote, values in samples],
                                schema=arrow_schema(RAW_SAMPLE_SOURCE_COLUMNS))


def _judged(table: pa.Table) -> list[tuple]:
    return [(row[0].timestamp(), *row[2:]) for row in rows_of(table)]


RAW = "hifi.raw.door1"
QUALIFY = Qualify(LookupJoin(Source((RAW,), "samples", RAW_SAMPLE_SOURCE_COLUMNS, "ts", 1000), "mote_positions",
                             "receptor_id", (("x", "double"), ("y", "double"))), 1000)
POSITIONS = {"mote_positions": [(mote, x, y) for mote, (x, y) in GRID.items()]}


def grid_samples() -> tuple[list[tuple[int, str, dict[str, float]]], list[pa.Table]]:
    """Twelve periods of the grid's samples (m4 silent in period 7), and RAW's batches of them:
    three periods each, out of order within the lateness, then the clock moving on with no sample."""
    periods = [_period(t) for t in range(12)]
    del periods[7]["m4"]
    samples = [(t * 1000 + 10 * i, mote, v) for t in range(12) for i, (mote, v) in enumerate(periods[t].items())]
    chunks = [[s for s in samples if first * 1000 <= s[0] < (first + 3) * 1000] for first in (0, 3, 6, 9)]
    batches = [_sample_batch(random.Random(n).sample(chunk, len(chunk))) for n, chunk in enumerate(chunks)]
    return samples, [*batches, _sample_batch([(20_000, None, {})])]   # the clock: periods 12..19 close


def test_the_engine_judges_periods_as_they_close_equal_to_the_central_judgement_and_resumes_exactly():
    """Each period judged once its means close, the whole equal to the central evaluation; the
    evaluator pickled mid-way (a restart) goes on exactly."""
    raw, plan, relations = RAW, QUALIFY, POSITIONS
    samples, batches = grid_samples()
    straight = build(plan, relations)
    expected = [_judged(straight.push(raw, batch)) for batch in batches]
    assert [len(rows) for rows in expected] == [9, 27, 27, 27, 18]   # a period waits out the lateness
    assert straight.bound() == 12_000   # the silent periods after the last sample are not judged yet
    logged = [{"samples": [{"receptor_id": mote, "timestamp_ms": ms, "values": v} for ms, mote, v in samples]}]
    central = [(row[0].timestamp(), *row[2:]) for row in mote_quality_rows(logged, 1000, GRID)]
    assert sorted(r for rows in expected for r in rows) == sorted(central)
    silent = [row for rows in expected for row in rows if row[2]]
    assert [(row[0], row[1], row[3]) for row in silent] == [(7.0, "m4", "silent")]
    first = build(plan, relations)
    assert [_judged(first.push(raw, batch)) for batch in batches[:2]] == expected[:2]
    restarted = pickle.loads(pickle.dumps(first))
    assert [_judged(restarted.push(raw, batch)) for batch in batches[2:]] == expected[2:]
