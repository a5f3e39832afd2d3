"""The dashboard's events: the newest alerts (an EMIT CHANGES view's starts and ends, a pattern's
matches), faulty receptors and dead letters, tailed from their Kafka topics from the beginning
(so a restarted dashboard shows the same events), each as the events panel words it."""

from __future__ import annotations

import collections
import logging
import threading

from services import listing
from wire.codec import decode_dead_letter, parse_row_batch
from wire.kafka import admin, consumers

log = logging.getLogger("hifi.dashboard")


EVENTS_KEPT = 200


class EventLog:
    """The newest alerts, faulty receptors and dead letters, tailed from their topics."""

    def __init__(self, bootstrap: str, alert_topics: dict[str, str], dead_topics: list[str]) -> None:
        self.bootstrap = bootstrap
        self.kinds = {**alert_topics, **{topic: "dead" for topic in dead_topics}}
        self.events: collections.deque[dict] = collections.deque(maxlen=EVENTS_KEPT)
        self.counts: collections.Counter[str] = collections.Counter()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._tail, name="dashboard-events", daemon=True)

    def start(self) -> None:
        if self.kinds:
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def recent(self) -> tuple[list[dict], dict[str, int]]:
        with self._lock:
            return list(self.events)[::-1], dict(self.counts)

    def _add(self, event: dict) -> None:
        with self._lock:
            self.events.append(event)
            self.counts[event["kind"]] += 1

    def _tail(self) -> None:
        """Re-read the topics from their beginning, again after a failure (the broker went away)."""
        while not self._stop.is_set():
            with self._lock:
                self.events.clear()
                self.counts.clear()
            try:
                self._read()
            except Exception:  # noqa: BLE001 - the page must stay up when the broker hiccups
                log.exception("dashboard: event tail failed; retrying in 5 s")
                self._stop.wait(5.0)

    def _read(self) -> None:
        # the dashboard may start before the nodes that write these topics (a container each)
        admin.ensure_topics(self.bootstrap, list(self.kinds))
        for record in consumers.tail(self.bootstrap, list(self.kinds), self._stop):
            kind = self.kinds[record.topic]
            if kind == "dead":
                letter = decode_dead_letter(record.value)
                if letter is not None:   # anything else on a dead-letter topic is not an event
                    self._add({"ms": record.timestamp, "kind": "dead", "node": letter.node,
                               "text": f"{letter.topic}:{letter.partition}@{letter.offset}: {letter.reason}"})
                continue
            batch, _ = parse_row_batch(record.value)
            if batch is None:
                continue   # the node reading this view dead-letters it
            node, view = record.topic.split(".")[2], record.topic.split(".", 3)[3]
            for values in batch.rows:
                row = dict(zip(batch.columns, values, strict=True))
                self._add({"ms": batch.emitted_ms, "kind": kind, "node": node, "text": event_text(row),
                           "receptor": row.get("receptor_id", ""), "view": f"{node}.{view}",
                           "cleared": row.get("change") == "end"})


def event_text(row: dict) -> str:
    """An alert's row as the events panel shows it: an EMIT CHANGES view's start with its values,
    its end with how long it held; a pattern's match with its values."""
    shown = listing.fields_text(row)
    if row.get("change") == "end":
        return f"ended after {listing.shown(row.get('held_seconds'))} s: {shown}"
    return shown
