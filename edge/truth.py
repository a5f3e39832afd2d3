"""Scoring against ground truth: what the core should report. Pure.

Inputs are the lines of edge.agent's readings.jsonl; its read-cycle lines carry the tags truly
at the reader's location ("present"), its sensor lines ("samples") are skipped here.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
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


@dataclass(frozen=True)
class CountMiss:
    """A location's count in one window that differs from the truth, and what in the receptors'
    data could make it so: tags present here and at another location within the window (the truth
    counts them at both, an answer at one), present here but never read here at or above the
    strength threshold, read here while present elsewhere (overlapping doors, ghosts), or here in
    the window before and gone in this one (a smoothing window carries them on)."""

    window_start: int
    location: str
    true: int
    said: int
    in_transit: int
    unread: int
    read_across: int
    just_left: int

    @property
    def explained(self) -> bool:
        if self.said < self.true:
            return self.true - self.said <= self.in_transit + self.unread
        return self.said - self.true <= self.read_across + self.just_left


def count_misses(truth: Iterable[dict[str, Any]], said: dict[tuple[int, str], int], windows: Sequence[int],
                 window_ms: int, strength_t: float) -> list[CountMiss]:
    """Every (window, location) of `windows` whose count in `said` differs from the truth, each
    with the tags that could explain it (CountMiss)."""
    present: dict[tuple[int, str], set[str]] = defaultdict(set)
    read: dict[tuple[int, str], set[str]] = defaultdict(set)
    for cycle in read_cycles(truth):
        key = (cycle["t"] // window_ms * window_ms, cycle["location"])
        present[key].update(cycle["present"])
        read[key].update(tag for tag, _antenna, strength in cycle["reads"] if strength >= strength_t)
    locations = sorted({loc for _, loc in present if loc != "away"})
    misses = []
    for start in windows:
        for location in locations:
            here = present.get((start, location), set())
            n = said.get((start, location), 0)
            if n == len(here):
                continue
            elsewhere = set().union(*(present.get((start, other), set()) for other in locations if other != location))
            misses.append(CountMiss(
                start, location, len(here), n, len(here & elsewhere), len(here - read.get((start, location), set())),
                len(read.get((start, location), set()) - here),
                len(present.get((start - window_ms, location), set()) - here)))
    return misses
