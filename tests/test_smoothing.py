"""The sink half of adaptive smoothing (dsp.spark.smoothing) against the reference evaluator's: fed the
micro-batches Spark would hand it, it reports what the central evaluation reports, and a replayed
or restarted micro-batch continues exactly."""

import datetime as dt
import random
from collections import Counter

from base.plan import RAW_RFID_SOURCE_COLUMNS, Smooth, Source
from dsp.spark.smoothing import SmoothingState
from glue.reference import adaptive_smoothed
from wire.codec import ms_to_datetime

EPOCH = 1000
PLAN = Smooth(Source(("hifi.raw.door1",), "rfid", RAW_RFID_SOURCE_COLUMNS, "ts", 1000), EPOCH)


def _readings(seed: int, epochs: int = 120) -> list[dict]:
    """Two receptors, six tags coming and going, 5 cycles an epoch, reads at 30-90 % a cycle."""
    rng = random.Random(seed)
    rates = {f"t{i}": rng.uniform(0.3, 0.9) for i in range(6)}
    here = {(r, t): rng.random() < 0.5 for r in ("r1", "r2") for t in rates}
    readings = []
    for epoch in range(epochs):
        for key in here:
            if rng.random() < 0.05:
                here[key] = not here[key]
        for (receptor, tag), present in sorted(here.items()):
            for cycle in range(5):
                if present and rng.random() < rates[tag]:
                    readings.append({"receptor_id": receptor, "tag_id": tag, "antenna": 1, "read_strength": 0.9,
                                     "ts": epoch * EPOCH + cycle * 200})
    return readings


def _batches(readings: list[dict], epochs: int, seed: int) -> list[list[tuple]]:
    """What Spark's aggregate hands the sink: reads per receptor, tag and closed epoch, and one
    heartbeat row per receptor and epoch; several epochs close in one micro-batch, at random."""
    counts = Counter((r["ts"] // EPOCH, r["receptor_id"], r["tag_id"]) for r in readings)
    rows: dict[int, list[tuple]] = {e: [] for e in range(epochs)}
    for (epoch, receptor, tag), n in counts.items():
        rows[epoch].append((ms_to_datetime(epoch * EPOCH), ms_to_datetime((epoch + 1) * EPOCH), receptor, tag, n))
    for epoch in range(epochs):
        for receptor in ("r1", "r2"):
            rows[epoch].append((ms_to_datetime(epoch * EPOCH).replace(tzinfo=None),   # Spark's naive UTC
                                ms_to_datetime((epoch + 1) * EPOCH), receptor, None, 0))
    rng, batches, epoch = random.Random(seed), [], 0
    while epoch < epochs:
        size = rng.choice((1, 1, 2, 3))
        batches.append([row for e in range(epoch, min(epoch + size, epochs)) for row in rows[e]])
        epoch += size
    return batches


def _as_reference(rows: list[tuple]) -> list[tuple]:
    return sorted((int(s.timestamp() * 1000), r, t, n, w) for s, _, r, t, n, w in rows)


def test_the_sink_smooths_exactly_as_the_reference_does(tmp_path):
    readings = _readings(1)
    state = SmoothingState(PLAN, str(tmp_path / "smoothing.json"))
    got = [row for batch_id, batch in enumerate(_batches(readings, 120, 2)) for row in state(batch, batch_id)]
    want = sorted((r["window_start"], r["receptor_id"], r["tag_id"], r["reads"], r["epochs"])
                  for r in adaptive_smoothed(readings, EPOCH, PLAN.delta))
    assert _as_reference(got) == want and len(want) > 300


def test_a_replayed_or_restarted_micro_batch_continues_exactly(tmp_path):
    readings = _readings(3, epochs=60)
    batches = _batches(readings, 60, 4)
    path = str(tmp_path / "smoothing.json")
    straight = SmoothingState(PLAN, path + ".a")
    expected = [straight(batch, i) for i, batch in enumerate(batches)]
    first = SmoothingState(PLAN, path)
    for i, batch in enumerate(batches[:10]):
        assert first(batch, i) == expected[i]
    # the process dies after batch 9 was smoothed and saved but before its fence: Spark replays 9
    restarted = SmoothingState(PLAN, path)
    assert restarted(batches[9], 9) == expected[9]
    for i in range(10, len(batches)):
        assert restarted(batches[i], i) == expected[i]


def test_epochs_before_the_query_start_are_left_out(tmp_path):
    readings = _readings(5, epochs=30)
    start = 10_500
    plan = Smooth(PLAN.child, EPOCH, from_ms=start)
    state = SmoothingState(plan, str(tmp_path / "smoothing.json"))
    got = [row for i, batch in enumerate(_batches(readings, 30, 6)) for row in state(batch, i)]
    assert min(row[0] for row in got) == dt.datetime.fromtimestamp(11, dt.UTC)
    want = sorted((r["window_start"], r["receptor_id"], r["tag_id"], r["reads"], r["epochs"])
                  for r in adaptive_smoothed(readings, EPOCH, PLAN.delta, from_ms=start))
    assert _as_reference(got) == want
