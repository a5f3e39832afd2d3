"""Faulty mote detection (pure) on hand-built periods whose right answer is known, and on the real
Intel Lab readings with injected faults."""

from base.mote_quality import MoteQuality
from services.bench.cleaning import mote_detection

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


def test_the_sink_judges_periods_as_they_close_and_a_replay_continues_exactly(tmp_path):
    from base.plan import RAW_SAMPLE_SOURCE_COLUMNS, SAMPLE_QUANTITIES, Qualify, Source
    from dsp.quality import QualityState
    from wire.codec import ms_to_datetime

    plan = Qualify(Source(("hifi.raw.door1",), "samples", RAW_SAMPLE_SOURCE_COLUMNS, "ts", 1000), 1000)
    periods = [_period(t) for t in range(12)]
    del periods[7]["m4"]                                  # m4 misses one period: silent then
    batches = [[(ms_to_datetime(t * 1000), mote, *GRID[mote], *(v.get(q) for q in SAMPLE_QUANTITIES))
                for t in range(first, first + 3) for mote, v in periods[t].items()] for first in (0, 3, 6, 9)]
    straight = QualityState(plan, str(tmp_path / "a.json"))
    expected = [straight(batch, i) for i, batch in enumerate(batches)]
    assert [len(rows) for rows in expected] == [27, 27, 27, 27]          # every mote, every period
    silent = [row for rows in expected for row in rows if row[3]]
    assert [(row[0].timestamp(), row[2], row[4]) for row in silent] == [(7.0, "m4", "silent")]
    first = QualityState(plan, str(tmp_path / "b.json"))
    assert first(batches[0], 0) == expected[0] and first(batches[1], 1) == expected[1]
    restarted = QualityState(plan, str(tmp_path / "b.json"))   # batch 1 is replayed after a restart
    assert [restarted(batches[i], i) for i in (1, 2, 3)] == expected[1:]
