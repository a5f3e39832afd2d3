"""`hifi bench joins`: the W-join (base.window_join) against STEAM's nested-loop W-join, and the
probe order the buffers' own statistics choose against the join's written order. Offline, one
process, no Spark: what is measured is the join's state and probing, which is where a window
join spends its time.

**Algorithms.** Three inputs a, b, c, each `rate` rows a second of event time, STEAM's chain: b
within [0, W] s after a on the same key, c within [0, W] s after b on the same key (`KEYS`
distinct keys). Both joins are fed the same rows, in time order, with every input's progress
advanced each 100 ms: the W-join (`Buffers`: time-ordered buffers, a hash index on the keys,
the window of times a probe may read found by bisection), and the nested loop written here
(`NestedLoopJoin`, STEAM's NLW-join: each input's rows in a list, a new row looping over every
other input's rows nested in FROM order, checking keys and bounds as it goes, rows dropped once
older than the join's whole span behind the progress). Printed per rate: rows joined per
CPU-second after the first spans (the buffers full), the most rows held, and the combinations
each found over the rows both took (they must agree). The nested loop gets a CPU budget a rate;
where it runs out before the buffers are full, its figure is over the rows it took (emptier
buffers: its best case, so the ratio understates the W-join's lead).

**Order.** A 3-way join whose best order the written one is not: a (`ORDER_RATES`), b (fast) and
c (rare), b and c within [-W, W] s of a, b.k = c.k over many keys. A row of a probing b first
examines every b of its window only for most to find no c with its key; probing c first examines
a few. The same rows are joined with the query written (a, b, c) and (a, c, b), once in the order
the join's shape picks (FROM order breaks the tie) and once in the order its buffers' statistics
choose; with the statistics' order either writing should run within 10 % of the best order
(each figure the least CPU of ORDER_REPEATS runs, the four cases taking turns in every round).
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from base.plan import JoinBound
from base.window_join import Buffers
from services.bench.report import figures_table

WINDOW_MS = 1_000
KEYS = 400
DURATION_S = 20.0
PROGRESS_MS = 100
NESTED_LOOP_BUDGET_S = 20.0
ORDER_RATES = {"a": 50, "b": 1_000, "c": 5}
ORDER_KEYS = 1_000
ORDER_DURATION_S = 60.0
ORDER_REPEATS = 5

Row = dict[str, Any]
Arrival = tuple[int, str, Row]   # (time ms, alias, row)


@dataclass(frozen=True)
class JoinRun:
    rate: int                # rows per second per input
    algorithm: str           # "w-join" | "nested loop"
    rows: int                # rows taken (the nested loop may stop at its budget)
    rows_per_cpu_s: float    # after the first spans
    most_held: int           # rows in the buffers at most
    combinations: int        # joined rows found over the first `compared` rows
    compared: int


@dataclass(frozen=True)
class OrderRun:
    written: str             # "a, b, c"
    chosen_by: str           # "shape" | "statistics"
    cpu_s: float
    combinations: int
    a_probes: str            # the order a row of a probed in at the end


def chain(aliases: Sequence[str]) -> tuple[tuple[tuple[str, str], ...], tuple[JoinBound, ...]]:
    """STEAM's chain over `aliases`: each after the one before within [0, W] on the same key."""
    keys = tuple((f"{x}.k", f"{y}.k") for x, y in zip(aliases, aliases[1:], strict=False))
    return keys, tuple(JoinBound(x, y, 0, WINDOW_MS) for x, y in zip(aliases, aliases[1:], strict=False))


def arrivals(rates: dict[str, int], keys: int, seconds: float, seed: int) -> list[Arrival]:
    """Each input's rows at its rate, keys drawn at random, merged in time order."""
    rng = random.Random(seed)
    rows = [(int(n * 1000 / rate), alias, {"k": rng.randrange(keys), "n": n})
            for alias, rate in rates.items() for n in range(int(rate * seconds))]
    return sorted(rows, key=lambda arrival: (arrival[0], arrival[1]))


class NestedLoopJoin:
    """STEAM's NLW-join: every other input's rows looped over, nested in FROM order."""

    def __init__(self, aliases: Sequence[str], keys: Sequence[tuple[str, str]], bounds: Sequence[JoinBound]) -> None:
        self.aliases, self.keys, self.bounds = list(aliases), list(keys), list(bounds)
        self.rows: dict[str, list[tuple[int, Row]]] = {alias: [] for alias in aliases}
        self.span = sum(abs(b.low_ms or 0) + abs(b.high_ms or 0) for b in bounds)

    def add(self, alias: str, time_ms: int, row: Row) -> int:
        others = [a for a in self.aliases if a != alias]
        found = self._loop({alias: (time_ms, row)}, others)
        self.rows[alias].append((time_ms, row))
        return found

    def evict(self, bounds: Mapping[str, int]) -> None:
        """Drop rows older than the join's whole span behind the oldest input's progress."""
        oldest = min(bounds.values())
        for alias in self.aliases:
            self.rows[alias] = [(t, row) for t, row in self.rows[alias] if t >= oldest - self.span]

    def count(self) -> int:
        return sum(len(rows) for rows in self.rows.values())

    def _loop(self, chosen: dict[str, tuple[int, Row]], rest: list[str]) -> int:
        if not rest:
            return 1
        found = 0
        for candidate in self.rows[rest[0]]:
            chosen[rest[0]] = candidate
            if self._fits(chosen):
                found += self._loop(chosen, rest[1:])
            del chosen[rest[0]]
        return found

    def _fits(self, chosen: dict[str, tuple[int, Row]]) -> bool:
        for left, right in self.keys:
            (a, col_a), (b, col_b) = left.split("."), right.split(".")
            if a in chosen and b in chosen and chosen[a][1][col_a] != chosen[b][1][col_b]:
                return False
        for bound in self.bounds:
            if bound.left in chosen and bound.right in chosen:
                gap = chosen[bound.right][0] - chosen[bound.left][0]
                low = -math.inf if bound.low_ms is None else bound.low_ms
                high = math.inf if bound.high_ms is None else bound.high_ms
                if not low <= gap <= high:
                    return False
        return True


def _feed(join: Buffers | NestedLoopJoin, rows: Sequence[Arrival], warm_ms: int,
          budget_s: float | None) -> tuple[int, float, int, list[int]]:
    """(rows taken, their rows per CPU-second from `warm_ms` on (from the start if the budget ran
    out before it), most held, combinations per row)."""
    per_row, most, next_progress = [], 0, PROGRESS_MS
    measured_from, started = 0, time.process_time()
    began, warm = started, False
    for taken, (time_ms, alias, row) in enumerate(rows):
        if time_ms >= next_progress:
            join.evict(dict.fromkeys(join.aliases, next_progress))
            next_progress += PROGRESS_MS
            most = max(most, join.count())
        if time_ms >= warm_ms and not warm:
            measured_from, started, warm = taken, time.process_time(), True
        found = join.add(alias, time_ms, row)
        per_row.append(found if isinstance(found, int) else len(found))
        if budget_s is not None and time.process_time() - began > budget_s:
            break
    elapsed = time.process_time() - started
    return len(per_row), (len(per_row) - measured_from) / elapsed if elapsed else 0.0, most, per_row


def run_algorithms(rates: Sequence[int], progress: Callable[[str], None]) -> list[JoinRun]:
    aliases = ("a", "b", "c")
    keys, bounds = chain(aliases)
    found = []
    for rate in rates:
        rows = arrivals(dict.fromkeys(aliases, rate), KEYS, DURATION_S, seed=rate)
        warm = 2 * WINDOW_MS + PROGRESS_MS
        w_rows, w_rate, w_held, w_found = _feed(Buffers(aliases, keys, bounds), rows, warm, None)
        n_rows, n_rate, n_held, n_found = _feed(NestedLoopJoin(aliases, keys, bounds), rows, warm,
                                                NESTED_LOOP_BUDGET_S)
        compared = min(w_rows, n_rows)
        for algorithm, taken, speed, held, per_row in (("w-join", w_rows, w_rate, w_held, w_found),
                                                       ("nested loop", n_rows, n_rate, n_held, n_found)):
            found.append(JoinRun(rate, algorithm, taken, speed, held, sum(per_row[:compared]), compared))
        progress(f"{rate} rows/s an input: w-join {w_rate:,.0f} rows/CPU-s, nested loop {n_rate:,.0f}")
    return found


def run_orders(progress: Callable[[str], None]) -> list[OrderRun]:
    """Each writing in each way of choosing, its CPU the least of ORDER_REPEATS runs, the four
    taking turns in every round (the machine is shared: a slow spell slows them alike)."""
    rows = arrivals(ORDER_RATES, ORDER_KEYS, ORDER_DURATION_S, seed=7)
    bounds = tuple(JoinBound("a", x, -WINDOW_MS, WINDOW_MS) for x in ("b", "c"))
    cases = [(written, chosen_by, every) for written in (("a", "b", "c"), ("a", "c", "b"))
             for chosen_by, every in (("shape", 0), ("statistics", Buffers.reorder_every))]
    runs: dict[int, list[float]] = {n: [] for n in range(len(cases))}
    last: dict[int, tuple[int, str]] = {}
    for _ in range(ORDER_REPEATS):
        for n, (written, _, every) in enumerate(cases):
            buffers = Buffers(written, (("b.k", "c.k"),), bounds, reorder_every=every)
            started = time.process_time()
            combinations = sum(len(buffers.add(alias, t, row)) for t, alias, row in rows if _evicted(buffers, t))
            runs[n].append(time.process_time() - started)
            last[n] = combinations, ", ".join(buffers.order["a"])
    found = []
    for n, (written, chosen_by, _) in enumerate(cases):
        found.append(OrderRun(", ".join(written), chosen_by, min(runs[n]), *last[n]))
        progress(f"written {', '.join(written)}, order by {chosen_by}: {min(runs[n]):.2f} CPU-s")
    return found


def _evicted(buffers: Buffers, time_ms: int) -> bool:
    """Advance every input's progress to `time_ms` (rows come in time order); True."""
    buffers.evict(dict.fromkeys(buffers.aliases, time_ms))
    return True


def algorithms_table(runs: Sequence[JoinRun]) -> str:
    rows = [("rate/input", "algorithm | rows taken | rows/CPU-s | most held | combinations (first rows)")]
    by_rate: dict[int, dict[str, JoinRun]] = {}
    for run in runs:
        by_rate.setdefault(run.rate, {})[run.algorithm] = run
        rows.append((f"{run.rate}/s", f"{run.algorithm} | {run.rows:,} | {run.rows_per_cpu_s:,.0f} | "
                                      f"{run.most_held:,} | {run.combinations:,} ({run.compared:,})"))
    for rate, pair in by_rate.items():
        w, n = pair["w-join"], pair["nested loop"]
        agree = "agree" if w.combinations == n.combinations else "DISAGREE"
        ratio = w.rows_per_cpu_s / n.rows_per_cpu_s if n.rows_per_cpu_s else float("inf")
        cut = f" (the nested loop's over its first {n.rows:,} rows: its budget ran out)" if n.rows < w.rows else ""
        rows.append((f"{rate}/s", f"w-join {ratio:,.1f} x the nested loop's rows/CPU-s{cut}; combinations {agree}"))
    return figures_table(rows)


def orders_table(runs: Sequence[OrderRun]) -> str:
    rows = [("written", "order by | CPU-s | combinations | a row of a probes")]
    rows += [(run.written, f"{run.chosen_by} | {run.cpu_s:.2f} | {run.combinations:,} | {run.a_probes}")
             for run in runs]
    stats = [run.cpu_s for run in runs if run.chosen_by == "statistics"]
    best = min(run.cpu_s for run in runs)
    if stats and best:
        rows.append(("statistics", f"its slower writing / the best order found: {max(stats) / best:.2f}"))
    return figures_table(rows)
