"""`hifi bench cleaning`'s tag counts: the π-estimate (base.tag_count, SQL `tag_estimate`) against
the tags truly there, beside the plain count of the tags read (`count(DISTINCT tag_id)`): the mean
absolute error of each, how often the estimate's 95 % interval holds the true count, and its
width. Pure: emulated reads in, figures out.

Two kinds of setting: tags of known read rates before one reader (each tag read in each cycle
with its own chance, drawn from a range; a tag read in no cycle is what the plain count misses),
and the supply-chain scenario's locations, each window's tags arbitrated first (a tag counted at
the location whose readers read it most in the window, as the default topology's chain does: a
location's raw reads hold its neighbours' tags too)."""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from base.tag_count import read_key, tag_count
from edge.truth import true_location_counts

# (lowest, highest read rate per cycle, cycles a window): from tags missed often to none missed
READ_RATE_SETTINGS = ((0.02, 0.1, 25), (0.02, 0.3, 10), (0.05, 0.5, 10), (0.3, 0.9, 10))


@dataclass(frozen=True)
class TagCountScore:
    setting: str
    cells: int              # windows scored (per location in the scenario)
    plain_error: float      # mean |tags read - tags there|
    estimate_error: float   # mean |estimate - tags there|
    coverage: float         # share of the windows whose interval holds the true count
    width: float            # mean interval width (high - low)


def _score(setting: str, windows: Iterable[tuple[int, Iterable[str]]]) -> TagCountScore:
    """Score (true count, the window's reads) pairs."""
    n = plain = estimate = covered = width = 0.0
    for there, reads in windows:
        count = tag_count(reads)
        n += 1
        plain += abs(count.read - there)
        estimate += abs(count.estimate - there)
        covered += count.low <= there <= count.high
        width += count.high - count.low
    n = n or 1
    return TagCountScore(setting, int(n), plain / n, estimate / n, covered / n, width / n)


def score_read_rates(low: float, high: float, cycles: int, seed: int, windows: int = 1000) -> TagCountScore:
    """Windows of 5-40 tags before one reader for `cycles` read cycles, each tag read in a cycle
    with its own chance from [low, high]."""
    rng = random.Random(seed)

    def window() -> tuple[int, list[str]]:
        rates = [rng.uniform(low, high) for _ in range(rng.randint(5, 40))]
        reads = [read_key("r", cycle, f"t{tag}") for tag, rate in enumerate(rates)
                 for cycle in range(cycles) if rng.random() < rate]
        return len(rates), reads

    return _score(f"rate {low:g}-{high:g}, {cycles} cycles", (window() for _ in range(windows)))


def score_locations(cycles: list[dict], window_ms: int, strength_t: float) -> TagCountScore:
    """Per location and tumbling window of the scenario's read `cycles` (edge.agent's), the reads
    at least `strength_t` strong of the tags arbitrated to it, against the tags truly there."""
    truth = true_location_counts(cycles, window_ms)
    reads: dict[tuple[int, str], dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for cycle in cycles:
        start = cycle["t"] // window_ms * window_ms
        for tag, _antenna, strength in cycle["reads"]:
            if strength >= strength_t:
                reads[(start, cycle["location"])][tag].add(read_key(cycle["receptor"], cycle["t"], tag))
    where: dict[tuple[int, str], Counter[str]] = defaultdict(Counter)   # (window, tag) -> reads per location
    for (start, location), by_tag in reads.items():
        for tag, keys in by_tag.items():
            where[(start, tag)][location] = len(keys)
    starts = sorted({cycle["t"] // window_ms * window_ms for cycle in cycles})[1:-1]   # whole windows
    locations = sorted({cycle["location"] for cycle in cycles})

    def kept(start: int, location: str) -> list[str]:
        return [key for tag, keys in reads.get((start, location), {}).items()
                if max(where[(start, tag)].items(), key=lambda item: (item[1], item[0]))[0] == location
                for key in keys]

    windows = [(truth.get((s, loc), 0), kept(s, loc)) for s in starts for loc in locations]
    return _score(f"supply chain, {window_ms / 1000:g} s windows, strength >= {strength_t:g}",
                  [(there, keys) for there, keys in windows if there or keys])


def tag_estimate_scores(cycles: list[dict], seed: int) -> list[TagCountScore]:
    """Every setting's score: the read-rate settings, then the scenario's locations."""
    return [*(score_read_rates(low, high, n, seed) for low, high, n in READ_RATE_SETTINGS),
            *(score_locations(cycles, window_ms, 0.45) for window_ms in (2_000, 5_000))]


def tag_estimate_lines(scores: list[TagCountScore]) -> list[str]:
    """The report's table."""
    header = (f"{'setting':<46}{'windows':>8}{'read: error':>13}{'estimate: error':>17}"
              f"{'95 % interval holds':>21}{'width':>8}")
    lines = [header, "-" * len(header)]
    for s in scores:
        lines.append(f"{s.setting:<46}{s.cells:>8}{s.plain_error:>13.3f}{s.estimate_error:>17.3f}"
                     f"{s.coverage:>21.1%}{s.width:>8.2f}")
    return lines
