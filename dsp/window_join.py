"""The window join's state and probing (STEAM's W-join), over plain rows. Pure.

A window join keeps, per input, the rows that may still meet a future row of another input: a
row of input i at time t can be part of a joined row with a row of input j only if
`time(j) - t <= reach[i, j]`, the largest gap the bounds allow between them along any path of
bounds (`time_reach`: shortest paths over the difference constraints). Once every other input's
progress bound has passed `t + reach[i, j]`, nothing that input will still send can meet it, and
the row goes (`Buffers.evict`): state is evicted by the inputs' progress, never by wall time.

A new row of an input probes the others' buffers in a fixed order (`probe_order`): an input
joined to those already chosen by an equal key first (a hash lookup), then the one the bounds hold
closest in time; each combination is produced once, when its last row arrives (rows are inserted
after they probe, one at a time).

>>> bounds = (JoinBound("a", "b", 0, 30_000), JoinBound("b", "c", 0, 10_000))
>>> reach = time_reach(("a", "b", "c"), bounds)
>>> reach["a", "c"], reach["c", "a"]
(40000, 0)
>>> probe_order(("a", "b", "c"), (("b.id", "c.id"),), reach)["a"]
('b', 'c')
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dsp.plan import JoinBound

Row = dict[str, Any]
Reach = dict[tuple[str, str], int | None]


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


def probe_order(aliases: Sequence[str], keys: Sequence[tuple[str, str]], reach: Reach) -> dict[str, tuple[str, ...]]:
    """For a new row of each input, the order in which the other inputs' buffers are probed:
    next the one with an equal key to an input already chosen (a hash lookup, the most selective
    probe), then the one held closest in time to them (the narrowest window), then FROM order."""
    linked = {(_alias(left), _alias(right)) for left, right in keys}
    linked |= {(b, a) for a, b in linked}
    def rank(j: str, chosen: list[str]) -> tuple[int, int, int]:
        keyed = any((c, j) in linked for c in chosen)
        span = min((reach[c, j] or 0) + (reach[j, c] or 0) for c in chosen)
        return (0 if keyed else 1, span, aliases.index(j))

    orders: dict[str, tuple[str, ...]] = {}
    for first in aliases:
        chosen = [first]
        while len(chosen) < len(aliases):
            chosen.append(min((j for j in aliases if j not in chosen), key=lambda j, so_far=chosen: rank(j, so_far)))
        orders[first] = tuple(chosen[1:])
    return orders


def _alias(qualified: str) -> str:
    return qualified.split(".", 1)[0]


def _column(qualified: str) -> str:
    return qualified.split(".", 1)[1]


@dataclass
class Buffers:
    """Each input's rows that may still join, with a hash index on its key columns."""

    aliases: tuple[str, ...]
    keys: tuple[tuple[str, str], ...]
    bounds: tuple[JoinBound, ...]
    rows: dict[str, list[tuple[int, Row]]] = field(default_factory=dict)   # alias -> (time ms, row)
    index: dict[tuple[str, str], dict[Any, list[tuple[int, Row]]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.reach = time_reach(self.aliases, self.bounds)
        self.order = probe_order(self.aliases, self.keys, self.reach)
        self.rows = {alias: self.rows.get(alias, []) for alias in self.aliases}
        self._reindex()

    def __getstate__(self) -> dict[str, Any]:   # the index is derived: not pickled with a part's state
        return {"aliases": self.aliases, "keys": self.keys, "bounds": self.bounds, "rows": self.rows}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.__post_init__()

    def add(self, alias: str, time_ms: int, row: Row) -> list[dict[str, tuple[int, Row]]]:
        """Every combination `row` completes with the rows held (alias -> (time, row)), then `row` held."""
        found = self._extend({alias: (time_ms, row)}, self.order[alias])
        self.rows[alias].append((time_ms, row))
        for key in self._key_columns(alias):
            self.index[alias, key].setdefault(row.get(key), []).append((time_ms, row))
        return found

    def evict(self, bounds: Mapping[str, int | None]) -> int:
        """Drop the rows no input can still meet (every input's progress bound known); how many."""
        if any(bounds.get(alias) is None for alias in self.aliases):
            return 0
        dropped = 0
        for alias in self.aliases:
            kept = [(t, row) for t, row in self.rows[alias] if any(
                t + self.reach[alias, other] >= bounds[other]   # type: ignore[operator]
                for other in self.aliases if other != alias)]
            dropped += len(self.rows[alias]) - len(kept)
            self.rows[alias] = kept
        if dropped:
            self._reindex()
        return dropped

    def held(self) -> int:
        return sum(len(rows) for rows in self.rows.values())

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
        for left, right in self.keys:
            for mine, theirs in ((left, right), (right, left)):
                if _alias(mine) == alias and _alias(theirs) in chosen:
                    value = chosen[_alias(theirs)][1].get(_column(theirs))
                    return [] if value is None else self.index[alias, _column(mine)].get(value, [])
        return self.rows[alias]

    def _meets(self, alias: str, candidate: tuple[int, Row], chosen: Mapping[str, tuple[int, Row]]) -> bool:
        for left, right in self.keys:
            for mine, theirs in ((left, right), (right, left)):
                if _alias(mine) == alias and _alias(theirs) in chosen:
                    value = candidate[1].get(_column(mine))
                    if value is None or value != chosen[_alias(theirs)][1].get(_column(theirs)):
                        return False
        for bound in self.bounds:
            if alias not in (bound.left, bound.right):
                continue
            other = bound.right if alias == bound.left else bound.left
            if other not in chosen:
                continue
            left_ms = candidate[0] if alias == bound.left else chosen[other][0]
            right_ms = chosen[other][0] if alias == bound.left else candidate[0]
            gap = right_ms - left_ms
            if (bound.low_ms is not None and gap < bound.low_ms) or (bound.high_ms is not None and gap > bound.high_ms):
                return False
        return True

    def _key_columns(self, alias: str) -> list[str]:
        return sorted({_column(q) for pair in self.keys for q in pair if _alias(q) == alias})

    def _reindex(self) -> None:
        self.index = {}
        for alias in self.aliases:
            for key in self._key_columns(alias):
                table: dict[Any, list[tuple[int, Row]]] = {}
                for entry in self.rows[alias]:
                    table.setdefault(entry[1].get(key), []).append(entry)
                self.index[alias, key] = table
