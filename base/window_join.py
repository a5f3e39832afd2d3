"""The window join's state and probing (STEAM's W-join), over plain rows. Pure.

A window join keeps, per input, the rows that may still meet a future row of another input: a
row of input i at time t can be part of a joined row with a row of input j only if
`time(j) - t <= reach[i, j]`, the largest gap the bounds allow between them along any path of
bounds (`time_reach`: shortest paths over the difference constraints). Once every other input's
progress bound has passed `t + reach[i, j]`, nothing that input will still send can meet it, and
the row goes (`Buffers.evict`): state is evicted by the inputs' progress, never by wall time.

A new row of an input probes the others' buffers in an order (`probe_order`): the one expected to
examine the fewest rows (`probe_cost`), from each input's rate and keys as its buffer holds them,
or, before anything is held, by the join's shape; each buffer is kept in time order, so a probe
reads only the window of times the bounds leave (two bisections), and through a hash index when
an equal key ties the input to a row already chosen. Each combination is produced once, when its
last row arrives (rows are inserted after they probe, one at a time), so the answer is the same in
any order.

>>> bounds = (JoinBound("a", "b", 0, 30_000), JoinBound("b", "c", 0, 10_000))
>>> reach = time_reach(("a", "b", "c"), bounds)
>>> reach["a", "c"], reach["c", "a"]
(40000, 0)
>>> probe_order(("a", "b", "c"), (("b.id", "c.id"),), reach)["a"]
('b', 'c')
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import permutations
from typing import Any

from base.plan import JoinBound

Row = dict[str, Any]
Reach = dict[tuple[str, str], int | None]
DEFAULT_DISTINCT = 10.0   # a key's distinct values when nothing counted them (a guess, as optimizers make)
# Rows added before the probe order is chosen again from the buffers: REORDER_EVERY after a change
# (the order bench's worse writing found the better order after 32 rows instead of 256), twice as
# many after each choice that kept it, up to REORDER_MOST (a choice ~0.4 ms: every 256 rows was
# ~8 % of the order bench's CPU)
REORDER_EVERY = 32
REORDER_MOST = 16_384
PROBE_ROWS = 8.0          # a probe's own cost (its window's bisections, a hash lookup) in rows examined


def time_reach(aliases: Sequence[str], bounds: Sequence[JoinBound]) -> Reach:
    """For every ordered pair (i, j), the largest `time(j) - time(i)` the bounds allow along any
    path of them (None: nothing bounds it). A negative `reach[i, i]` means they contradict."""
    reach: Reach = {(i, j): 0 if i == j else None for i in aliases for j in aliases}

    def tighten(i: str, j: str, most: int | None) -> None:
        if most is not None and (reach[i, j] is None or most < reach[i, j]):   # type: ignore[operator]
            reach[i, j] = most

    for bound in bounds:
        tighten(bound.left, bound.right, bound.high_ms)
        tighten(bound.right, bound.left, None if bound.low_ms is None else -bound.low_ms)
    for k in aliases:   # Floyd-Warshall
        for i in aliases:
            for j in aliases:
                via = (reach[i, k], reach[k, j])
                if via[0] is not None and via[1] is not None:
                    tighten(i, j, via[0] + via[1])
    return reach


def unbounded_pair(aliases: Sequence[str], reach: Reach) -> tuple[str, str] | None:
    """Two inputs nothing bounds the time between (in the order of `aliases`), if any."""
    return next(((i, j) for n, i in enumerate(aliases) for j in aliases[n + 1:]
                 if reach[i, j] is None or reach[j, i] is None), None)


def contradictory(aliases: Sequence[str], reach: Reach) -> bool:
    return any((reach[i, i] or 0) < 0 for i in aliases)


def probe_order(aliases: Sequence[str], keys: Sequence[tuple[str, str]], reach: Reach,
                stats: Mapping[str, InputStats] | None = None) -> dict[str, tuple[str, ...]]:
    """For a new row of each input, the order in which the other inputs' buffers are probed.

    With `stats` for every input, the order expected to examine the fewest rows (`probe_cost`);
    without, by the join's shape: next an input with an equal key to one already chosen (a hash
    lookup), then the one held closest in time to them (the narrowest window), then FROM order.

    >>> reach = time_reach(("a", "b", "c"), (JoinBound("a", "b", 0, 5_000), JoinBound("a", "c", 0, 5_000)))
    >>> probe_order(("a", "b", "c"), (), reach)["a"]
    ('b', 'c')
    >>> rates = {"a": InputStats(1.0), "b": InputStats(2.0), "c": InputStats(0.01)}
    >>> probe_order(("a", "b", "c"), (), reach, rates)["a"]
    ('c', 'b')
    """
    shaped = {first: _shape_order(aliases, keys, reach, first) for first in aliases}
    if stats is None or any(alias not in stats for alias in aliases):
        return shaped
    return {first: min(permutations(shaped[first]), key=lambda order, first=first: (   # ties: the shape's way
        probe_cost(first, order, keys, reach, stats), [shaped[first].index(a) for a in order])) for first in aliases}


def _linked(keys: Sequence[tuple[str, str]]) -> set[tuple[str, str]]:
    """Pairs of aliases some key holds equal, both ways round."""
    linked = {(_alias(left), _alias(right)) for left, right in keys}
    return linked | {(b, a) for a, b in linked}


def _shape_order(aliases: Sequence[str], keys: Sequence[tuple[str, str]], reach: Reach, first: str) -> tuple[str, ...]:
    """The order the join's shape picks after `first`."""
    linked = _linked(keys)

    def rank(j: str, chosen: list[str]) -> tuple[int, int, int]:
        keyed = any((c, j) in linked for c in chosen)
        span = min((reach[c, j] or 0) + (reach[j, c] or 0) for c in chosen)
        return (0 if keyed else 1, span, aliases.index(j))

    chosen = [first]
    while len(chosen) < len(aliases):
        chosen.append(min((j for j in aliases if j not in chosen), key=lambda j, so_far=chosen: rank(j, so_far)))
    return tuple(chosen[1:])


@dataclass(frozen=True)
class InputStats:
    """What the probe order is chosen from, per input: its rows per second, and how many distinct
    values its key columns hold (an equal key holds for one pair in the larger of the two sides'
    distinct counts, as System R estimates an equi-join)."""

    rows_per_s: float
    distinct: float = DEFAULT_DISTINCT


def probe_cost(first: str, order: Sequence[str], keys: Sequence[tuple[str, str]], reach: Reach,
               stats: Mapping[str, InputStats]) -> float:
    """The rows a new row of `first` is expected to examine probing the others in `order`: at each
    step, every partial combination so far probes the next input (PROBE_ROWS each) and looks at
    its rows within the tightest window the bounds leave it (a hash lookup keeps one in the larger
    of the two inputs' `distinct`), each taken to meet (other conditions unknown: the most it costs).

    >>> reach = time_reach(("a", "b"), (JoinBound("a", "b", 0, 2_000),))
    >>> probe_cost("a", ("b",), (), reach, {"a": InputStats(10.0), "b": InputStats(100.0)})
    208.0
    >>> probe_cost("a", ("b",), (("a.k", "b.k"),), reach, {"a": InputStats(10.0), "b": InputStats(100.0, 50)})
    12.0
    """
    linked = _linked(keys)
    chosen, partial, cost = [first], 1.0, 0.0
    for alias in order:
        span_ms = min(_span(reach, c, alias) for c in chosen)
        examined = partial * stats[alias].rows_per_s * span_ms / 1000
        keyed = [stats[c].distinct for c in chosen if (c, alias) in linked]
        if keyed:
            examined /= max(stats[alias].distinct, *keyed, 1.0)
        cost, partial = cost + examined + partial * PROBE_ROWS, examined
        chosen.append(alias)
    return cost


def _span(reach: Reach, known: str, alias: str) -> float:
    """How wide a window of `alias`'s times a row of `known` leaves (inf: unbounded)."""
    ahead, behind = reach[known, alias], reach[alias, known]
    return math.inf if ahead is None or behind is None else float(ahead + behind)


def _negated(bound: JoinBound) -> tuple[int | None, int | None]:
    """The bound on time(left) - time(right), from one on time(right) - time(left)."""
    return (None if bound.high_ms is None else -bound.high_ms, None if bound.low_ms is None else -bound.low_ms)


def _alias(qualified: str) -> str:
    return qualified.split(".", 1)[0]


def _column(qualified: str) -> str:
    return qualified.split(".", 1)[1]


class Held:
    """Rows with their times, oldest first (a late row is put in its place): a window of times
    is two bisections away, and eviction drops a prefix."""

    def __init__(self) -> None:
        self.times: list[int] = []
        self.rows: list[Row] = []

    def add(self, time_ms: int, row: Row) -> None:
        at = bisect_right(self.times, time_ms)
        self.times.insert(at, time_ms)
        self.rows.insert(at, row)

    def between(self, low: float, high: float) -> list[tuple[int, Row]]:
        start, end = bisect_left(self.times, low), bisect_right(self.times, high)
        return list(zip(self.times[start:end], self.rows[start:end], strict=True))

    def drop_before(self, cutoff: float) -> int:
        at = bisect_left(self.times, cutoff)
        del self.times[:at], self.rows[:at]
        return at

    def span_ms(self) -> int:
        return self.times[-1] - self.times[0] if self.times else 0

    def __len__(self) -> int:
        return len(self.times)


@dataclass
class Buffers:
    """Each input's rows that may still join, in time order, with a hash index on its key columns.

    The probe order is chosen again after REORDER_EVERY rows from what the buffers hold (each
    input's rows per second over the times it holds, its keys' distinct values), then twice as
    many rows later each time it stays (up to REORDER_MOST), again after REORDER_EVERY once it
    changes: the data's own statistics at the node that joins, so a join written in any order
    probes alike."""

    aliases: tuple[str, ...]
    keys: tuple[tuple[str, str], ...]
    bounds: tuple[JoinBound, ...]
    rows: dict[str, list[tuple[int, Row]]] = field(default_factory=dict)   # alias -> (time ms, row), as pickled
    reorder_every: int = REORDER_EVERY   # 0: keep the shape's order (what the order bench compares against)

    def __post_init__(self) -> None:
        self.reach = time_reach(self.aliases, self.bounds)
        self.order = probe_order(self.aliases, self.keys, self.reach)
        self.key_columns = {alias: sorted({_column(q) for pair in self.keys for q in pair if _alias(q) == alias})
                            for alias in self.aliases}
        # alias -> (its column, another input, that input's column) an equal key ties
        self.links = {alias: [(_column(mine), _alias(theirs), _column(theirs)) for left, right in self.keys
                              for mine, theirs in ((left, right), (right, left)) if _alias(mine) == alias]
                      for alias in self.aliases}
        # alias -> (another input, low, high) of each bound on time(alias) - time(other)
        self.gaps = {alias: [(b.left, b.low_ms, b.high_ms) if b.right == alias else (b.right, *_negated(b))
                             for b in self.bounds if alias in (b.left, b.right)] for alias in self.aliases}
        self.held = {alias: Held() for alias in self.aliases}
        self.index: dict[tuple[str, str], dict[Any, Held]] = {
            (alias, key): {} for alias in self.aliases for key in self.key_columns[alias]}
        self.added = self.stale = 0
        self.every = self.next_choice = self.reorder_every
        self.cutoffs = dict.fromkeys(self.aliases, -math.inf)
        for alias, rows in self.rows.items():
            for time_ms, row in sorted(rows, key=lambda entry: entry[0]):
                self._hold(alias, time_ms, row)
        self.rows = {}

    def __getstate__(self) -> dict[str, Any]:   # the index is derived: not pickled with a part's state
        rows = {alias: list(zip(held.times, held.rows, strict=True)) for alias, held in self.held.items()}
        return {"aliases": self.aliases, "keys": self.keys, "bounds": self.bounds, "rows": rows,
                "reorder_every": self.reorder_every}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.__post_init__()

    def add(self, alias: str, time_ms: int, row: Row) -> list[dict[str, tuple[int, Row]]]:
        """Every combination `row` completes with the rows held (alias -> (time, row)), then `row` held."""
        found = self._extend({alias: (time_ms, row)}, self.order[alias])
        self._hold(alias, time_ms, row)
        self.added += 1
        if self.reorder_every and self.added >= self.next_choice:
            order = probe_order(self.aliases, self.keys, self.reach, self.stats())
            self.every = min(2 * self.every, REORDER_MOST) if order == self.order else self.reorder_every
            self.order, self.next_choice = order, self.added + self.every
        return found

    def evict(self, bounds: Mapping[str, int | None]) -> int:
        """Drop the rows no input can still meet (every input's progress bound known); how many.
        A row of `alias` at t can meet a future row of `other` only if t + reach[alias, other]
        reaches that input's bound. The key index is swept once as many rows went as are held
        (a probe's window of times never reaches a row gone, so what the index still holds is
        only memory, and a sweep per batch would cost a pass over every key)."""
        if any(bounds.get(alias) is None for alias in self.aliases):
            return 0
        dropped = 0
        for alias in self.aliases:
            self.cutoffs[alias] = min(bounds[other] - reach if (reach := self.reach[alias, other]) is not None   # type: ignore[operator]
                                      else -math.inf for other in self.aliases if other != alias)
            dropped += self.held[alias].drop_before(self.cutoffs[alias])
        self.stale += dropped
        if self.index and self.stale > self.count():
            self._sweep()
        return dropped

    def _sweep(self) -> None:
        for (alias, _), table in self.index.items():
            for value, held in list(table.items()):
                held.drop_before(self.cutoffs[alias])
                if not held:
                    del table[value]
        self.stale = 0

    def count(self) -> int:
        """Rows held, all inputs."""
        return sum(len(held) for held in self.held.values())

    def stats(self) -> dict[str, InputStats]:
        """Each input's rows per second over the times it holds, and its keys' distinct values."""
        found = {}
        for alias, held in self.held.items():
            distinct = [len(self.index[alias, key]) for key in self.key_columns[alias]]
            found[alias] = InputStats(1000 * len(held) / max(held.span_ms(), 1), float(max(distinct, default=1) or 1))
        return found

    def _hold(self, alias: str, time_ms: int, row: Row) -> None:
        self.held[alias].add(time_ms, row)
        for key in self.key_columns[alias]:
            self.index[alias, key].setdefault(row.get(key), Held()).add(time_ms, row)

    def _extend(self, chosen: dict[str, tuple[int, Row]], rest: tuple[str, ...]) -> list[dict[str, tuple[int, Row]]]:
        if not rest:
            return [dict(chosen)]
        alias, found = rest[0], []
        for candidate in self._candidates(alias, chosen):
            if self._meets(alias, candidate, chosen):
                chosen[alias] = candidate
                found += self._extend(chosen, rest[1:])
                del chosen[alias]
        return found

    def _candidates(self, alias: str, chosen: Mapping[str, tuple[int, Row]]) -> list[tuple[int, Row]]:
        """`alias`'s rows within the window every chosen row's time leaves it (by a key's hash
        lookup when a key ties it to a chosen row)."""
        low, high = -math.inf, math.inf
        for other, (time_ms, _) in chosen.items():
            ahead, behind = self.reach[other, alias], self.reach[alias, other]
            high = high if ahead is None else min(high, time_ms + ahead)
            low = low if behind is None else max(low, time_ms - behind)
        for mine, other, theirs in self.links[alias]:
            if other in chosen:
                value = chosen[other][1].get(theirs)
                held = None if value is None else self.index[alias, mine].get(value)
                return [] if held is None else held.between(low, high)
        return self.held[alias].between(low, high)

    def _meets(self, alias: str, candidate: tuple[int, Row], chosen: Mapping[str, tuple[int, Row]]) -> bool:
        """Whether `candidate` has every chosen row's keys and lies within every bound to them
        (its window of times holds only the bounds along paths: a direct one may be tighter)."""
        for mine, other, theirs in self.links[alias]:
            if other in chosen:
                value = candidate[1].get(mine)
                if value is None or value != chosen[other][1].get(theirs):
                    return False
        for other, low, high in self.gaps[alias]:   # time(alias) - time(other) within [low, high]
            if other in chosen:
                gap = candidate[0] - chosen[other][0]
                if (low is not None and gap < low) or (high is not None and gap > high):
                    return False
        return True
