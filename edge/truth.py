"""Scoring against ground truth: what the core should report. Pure.

Inputs are the lines of edge.agent's readings.jsonl; its read-cycle lines carry the tags truly
at the reader's location ("present"), its sensor lines ("samples") are skipped here.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from typing import Any


def read_cycles(readings: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """The read-cycle lines of readings.jsonl (not the sensor sample batches)."""
    return (line for line in readings if "reads" in line)


def true_location_counts(truth: Iterable[dict[str, Any]], window_ms: int) -> dict[tuple[int, str], int]:
    """Distinct tags truly present at each location per tumbling window: {(window_start_ms, location): n}."""
    present: dict[tuple[int, str], set[str]] = defaultdict(set)
    for cycle in read_cycles(truth):
        start = cycle["t"] // window_ms * window_ms
        present[(start, cycle["location"])].update(cycle["present"])
    return {key: len(tags) for key, tags in present.items()}


def covered_windows(truth: list[dict[str, Any]], window_ms: int, cycle_ms: int) -> list[int]:
    """Window starts whose every read cycle happened during the run (no partial windows)."""
    truth = list(read_cycles(truth))
    if not truth:
        return []
    first = min(c["t"] for c in truth)
    last = max(c["t"] for c in truth) + cycle_ms
    start = -(-first // window_ms) * window_ms
    return list(range(start, last - window_ms + 1, window_ms))


def readings_per_node(truth: Iterable[dict[str, Any]]) -> dict[str, int]:
    counts: dict[str, int] = defaultdict(int)
    for cycle in read_cycles(truth):
        counts[cycle["node"]] += len(cycle["reads"])
    return dict(counts)


def reading_latencies_ms(truth: Iterable[dict[str, Any]], emitted_ms: dict[tuple[int, str], int],
                         window_ms: int) -> list[int]:
    """For every reading whose window and location reached the core: core emit time - reading time."""
    latencies = []
    for cycle in read_cycles(truth):
        key = (cycle["t"] // window_ms * window_ms, cycle["location"])
        if key in emitted_ms:
            latencies.extend([emitted_ms[key] - cycle["t"]] * len(cycle["reads"]))
    return latencies


def presence_errors(truth: Sequence[Sequence[bool]], reported: Sequence[Sequence[bool]]) -> tuple[int, int, int]:
    """(false negatives, false positives, tag-epochs) of reported presence against the truth, one
    sequence per tag."""
    fn = fp = epochs = 0
    for present, said in zip(truth, reported, strict=True):
        if len(present) != len(said):
            raise ValueError(f"{len(said)} reported epochs for {len(present)} true ones")
        fn += sum(p and not s for p, s in zip(present, said, strict=True))
        fp += sum(s and not p for p, s in zip(present, said, strict=True))
        epochs += len(present)
    return fn, fp, epochs
