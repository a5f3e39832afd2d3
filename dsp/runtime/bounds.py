"""Output bounds: which of a part's rows and markers go out while another node shares its topic.

A part adopted from a dead parent (glue.adoption) emits only windows from where the dead one
stopped, and, once the parent is back, only those before the hand-back boundary; the returned
part emits those from the boundary on and holds its markers there until the adopter has drained.
The bounds apply to the column readers order the topic by (window_start, or a selection's event
time), so the windows of one topic split between two writers exactly, with no change to the
part's plan or state. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from base.plan import EVENT_TIME
from wire.codec import datetime_ms

BOUNDED_COLUMNS = ("window_start", EVENT_TIME)   # what a reader of a part's output orders it by


def bounded_column(columns: Sequence[str]) -> str | None:
    """The column a part's output can be bounded on; None: its rows carry no time to split at."""
    return next((c for c in BOUNDED_COLUMNS if c in columns), None)


@dataclass
class OutputBounds:
    """Rows with `from_ms` <= time < `until_ms` go out; markers never promise past `marker_cap_ms`
    (None: no cap; set while another writer may still emit earlier windows on the topic)."""

    column: str
    from_ms: int = 0
    until_ms: int | None = None
    marker_cap_ms: int | None = None

    def keep(self, rows: list[tuple], columns: Sequence[str]) -> list[tuple]:
        at = list(columns).index(self.column)
        return [row for row in rows if row[at] is not None and self.from_ms <= datetime_ms(row[at])
                and (self.until_ms is None or datetime_ms(row[at]) < self.until_ms)]

    def cap(self, promise_ms: int) -> int:
        caps = [c for c in (self.until_ms, self.marker_cap_ms) if c is not None]
        return min(promise_ms, *caps) if caps else promise_ms

    def drained(self, last_marker_ms: int | None) -> bool:
        """Whether a part bounded `until_ms` has emitted everything before it."""
        return self.until_ms is not None and last_marker_ms is not None and last_marker_ms >= self.until_ms
