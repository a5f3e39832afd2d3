"""EMIT CHANGES (base.plan.Changes): a windowed stream's rows as the starts and ends of each key's
condition, the way an operator wants an alert, not one row per window it holds in. Pure: rows
and bounds in, change rows out; the state pickles with the evaluator that holds it.

A key starts in the first window it has a row in; it ends in the first window after its last one
that closed without a row of it (windows follow each other `slide_ms` apart). A window with start
s is closed once the input's bound is past s (no row of it is still to come); rows of windows not
closed yet wait (a view's rows from several children come in any order). A change row is the
row that started the key, or its last row, with `change`, `since` (the start of its first window)
and `held_seconds` (from `since` to the end of its last window); an end row's window is the one
it ended in.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

Row = dict[str, Any]   # window_start, window_end (epoch ms) and the input's columns


@dataclass
class _Held:
    since_ms: int
    row: Row       # its last window's row


@dataclass
class KeyChanges:
    """Each key's condition, from the windows' rows in window order and the input's bound.

    >>> changes = KeyChanges(("dock",), 2000)
    >>> def row(start, dock): return {"window_start": start, "window_end": start + 2000, "dock": dock, "tags": 9}
    >>> [(r["change"], r["dock"]) for r in changes.feed([row(0, "a"), row(2000, "a"), row(2000, "b")], 4000)]
    [('start', 'a'), ('start', 'b')]
    >>> [(r["change"], r["dock"], r["window_start"], r["held_seconds"]) for r in changes.feed([row(4000, "b")], 6000)]
    [('end', 'a', 4000, 4.0)]
    >>> changes.feed([row(8000, "c")], 6000), [(r["change"], r["dock"], r["since"]) for r in changes.feed([], 6001)]
    ([], [('end', 'b', 2000)])
    >>> [(r["change"], r["dock"]) for r in changes.feed([], 8001)]   # the window 8000 waited for its bound
    [('start', 'c')]
    """

    keys: tuple[str, ...]
    slide_ms: int
    held: dict[tuple, _Held] = field(default_factory=dict)
    waiting: dict[int, list[Row]] = field(default_factory=dict)   # rows of windows not closed yet

    def feed(self, rows: Iterable[Row], bound_ms: int | None) -> list[Row]:
        """The changes that rows (of any windows, in any order) and the input's bound after them make."""
        for row in rows:
            self.waiting.setdefault(row["window_start"], []).append(row)
        if bound_ms is None:
            return []
        out: list[Row] = []
        for start in sorted(s for s in self.waiting if s < bound_ms):
            out += self._ended(start)
            for row in self.waiting.pop(start):
                out += self._seen(row)
        return out + self._ended(bound_ms)

    def _seen(self, row: Row) -> list[Row]:
        key = tuple(row[k] for k in self.keys)
        held = self.held.get(key)
        if held is not None:
            held.row = row
            return []
        self.held[key] = _Held(row["window_start"], row)
        return [change_row(row, "start", row["window_start"])]

    def _ended(self, closed_before_ms: int) -> list[Row]:
        """The keys whose window after their last closed without them: its start is before
        `closed_before_ms` (a later window's start, or the bound)."""
        out = []
        for key, held in list(self.held.items()):
            after = held.row["window_start"] + self.slide_ms
            if after < closed_before_ms:
                length = held.row["window_end"] - held.row["window_start"]
                out.append(change_row({**held.row, "window_start": after, "window_end": after + length}, "end",
                                      held.since_ms, held.row["window_end"]))
                del self.held[key]
        return out


def change_row(row: Row, change: str, since_ms: int, until_ms: int | None = None) -> Row:
    """`row` as a change: what it is, since when, and for how long (to `until_ms`, else its window's end)."""
    held_ms = (row["window_end"] if until_ms is None else until_ms) - since_ms
    return {**row, "change": change, "since": since_ms, "held_seconds": held_ms / 1000}


