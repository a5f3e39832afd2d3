"""Alerts as an operator wants them: one event when a condition starts and one when it clears, not
one per window. An alert view (a topology view with `alert:`) emits a row for every window in which
its condition holds; this turns those rows into edges, per view and key (the row's text columns:
the location, the mote), for `hifi up`'s lines and the dashboard's events. The view's topic keeps
every window's row for programs. Pure: rows and times in, edges out.

A key clears once `hold` windows of its view have closed without it (a row of a newer window
arrives after them), or, when the view falls quiet, once those windows and QUIET_GRACE_MS have
passed by the clock (`tick`): one window missing upstream does not make an alert flap.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

WINDOW_COLUMNS = ("window_start", "window_end")
QUIET_GRACE_MS = 10_000   # a quiet view's windows may still be on their way up the hierarchy


@dataclass(frozen=True)
class Edge:
    raised: bool            # True: the condition starts; False: it cleared
    topic: str
    key: tuple[tuple[str, object], ...]   # the row's identity: its text columns
    row: dict               # the row that raised it, or the last one before it cleared
    at_ms: int              # its window's start (raised) or the end of its last window (cleared)


@dataclass
class _Active:
    row: dict
    last_end_ms: int
    length_ms: int


@dataclass
class _View:
    window_end_ms: int = 0                    # the newest window a row arrived for
    seen: set = field(default_factory=set)    # the keys of that window


def row_key(row: dict) -> tuple[tuple[str, object], ...]:
    """An alert row's identity: its first text column (a location, a mote) and any other id, not
    what describes the condition (its reasons change from window to window).

    >>> row_key({"window_start": 1, "location": "dock", "tags": 11, "max_tags": 8})
    (('location', 'dock'),)
    >>> row_key({"receptor_id": "m3", "faulty": True, "reasons": "neighbours:voltage", "tag_id": "t"})
    (('receptor_id', 'm3'), ('tag_id', 't'))
    """
    texts = [(k, v) for k, v in row.items() if k not in WINDOW_COLUMNS and isinstance(v, str)]
    return tuple(texts[:1] + [(k, v) for k, v in texts[1:] if k.endswith("_id")])


def _ms(value: object) -> int:
    return int(value.timestamp() * 1000) if isinstance(value, datetime) else int(value or 0)


class AlertEdges:
    """The alert views' active conditions, and the edges each row or tick makes.

    >>> edges = AlertEdges()
    >>> def row(start, location): return {"window_start": start, "window_end": start + 2000, "location": location}
    >>> [e.raised for e in edges.feed("a", row(0, "dock"))], edges.feed("a", row(2000, "dock"))
    ([True], [])
    >>> [(e.raised, dict(e.key)["location"]) for e in edges.feed("a", row(4000, "door"))]
    [(True, 'door')]
    >>> edges.feed("a", row(6000, "door"))   # the window 4000-6000 lacked dock: one is not enough
    []
    >>> [(e.raised, dict(e.key)["location"]) for e in edges.feed("a", row(8000, "door"))]   # 6000-8000 too
    [(False, 'dock')]
    >>> edges.tick(10000 + 2 * 2000), [e.raised for e in edges.tick(10000 + 2 * 2000 + QUIET_GRACE_MS + 1)]
    ([], [False])
    """

    def __init__(self, hold: int = 2) -> None:
        self.hold = hold   # windows without a condition before it clears
        self._active: dict[tuple[str, tuple], _Active] = {}
        self._views: dict[str, _View] = {}

    def feed(self, topic: str, row: dict) -> list[Edge]:
        start, end = _ms(row.get("window_start")), _ms(row.get("window_end"))
        key = row_key(row)
        view = self._views.setdefault(topic, _View())
        edges = []
        if end > view.window_end_ms:   # the window before is complete: what `hold` of them lacked has cleared
            done = view.window_end_ms
            edges = self._clear(topic, lambda a, k: k not in view.seen
                                and a.last_end_ms + self.hold * a.length_ms <= done)
            view.window_end_ms, view.seen = end, set()
        view.seen.add(key)
        active = self._active.get((topic, key))
        if active is None:
            self._active[(topic, key)] = _Active(row, end, max(end - start, 1))
            edges.append(Edge(True, topic, key, row, start))
        else:
            active.row, active.last_end_ms = row, max(active.last_end_ms, end)
        return edges

    def tick(self, now_ms: int) -> list[Edge]:
        """The conditions of views fallen quiet: cleared once `hold` windows and QUIET_GRACE_MS passed."""
        edges = []
        for topic in list(self._views):
            edges += self._clear(topic,
                                 lambda a, _: now_ms > a.last_end_ms + self.hold * a.length_ms + QUIET_GRACE_MS)
        return edges

    def _clear(self, topic: str, cleared) -> list[Edge]:   # noqa: ANN001 (a predicate of an active and its key)
        gone = [(k, a) for (t, k), a in self._active.items() if t == topic and cleared(a, k)]
        for key, _ in gone:
            del self._active[(topic, key)]
        return [Edge(False, topic, key, active.row, active.last_end_ms) for key, active in gone]
