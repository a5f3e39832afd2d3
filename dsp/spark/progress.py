"""Progress markers: a query's watermark, published beside its rows, so parents close windows
as soon as every child has passed them (DESIGN §7, windows without per-level lag).

After each micro-batch Spark reports the watermark the batch ran with; every window that ends at
or before it has been emitted by then. The next window a query can still emit therefore starts
at `next_window_start(watermark, window)`, and a marker (a RowBatch with no rows and
`watermark_ms` set) promises that every later row's `window_start` is at least that. A parent
reads each child as its own stream whose watermark such markers advance (dsp.spark.compiler), so the
parent's watermark is the slowest child's promise, never a guess padded with slack.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import threading
from dataclasses import dataclass

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQueryListener
from pyspark.sql.streaming.listener import JStreamingQueryListener

from base.plan import Window
from dsp.spark.kafka_sink import send_marker
from wire.kafka import clients, producers
from wire.windows import window_starts

log = logging.getLogger("hifi.progress")


def next_window_start(watermark_ms: int, window: Window) -> int:
    """The start of the earliest window of `window` that ends after `watermark_ms` (pure)."""
    return window_starts(watermark_ms, window).start


def marker_due(promise_ms: int, last_ms: int, repeated: bool) -> bool:
    """Whether a query publishes a marker now: when its promise moves, and once more after each
    move. A parent applies a watermark only in the micro-batch after the one that read it, and
    with no-data batches off (dsp.spark.session) that batch waits for the next record; the repeat is
    that record, so the parent need not wait for the child's next pane. (At 10 s panes on deep.yaml
    the levels still add ~18-21 s each with it, as without it: see the stop note of 2026-11-23.)"""
    return promise_ms > last_ms or (promise_ms == last_ms and not repeated)


def parse_watermark(text: str | None) -> int | None:
    """Spark's progress watermark ('2026-11-22T19:00:00.000Z') in epoch ms; None before the first."""
    if not text:
        return None
    ms = int(dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)
    return ms if ms > 0 else None


@dataclass
class MarkerTarget:
    bootstrap: str
    topic: str
    producer: str
    stream: str
    window: Window
    last_ms: int = 0
    repeated: bool = True     # the marker of the last move has gone out twice


class _JsonEvents(JStreamingQueryListener):
    """Spark's listener bridge, handing each progress event on as its JSON (two py4j calls)
    instead of the Python object PySpark builds from the JVM's object graph: that costs ~300 ms
    wall and ~600 ms CPU an event (measured, DESIGN §11), the events queued behind it reached
    the markers 10-25 s late, and Spark dropped events ("listener too slow")."""

    def onQueryStarted(self, jevent) -> None:  # noqa: N802 - Spark's listener interface
        return None

    def onQueryProgress(self, jevent) -> None:  # noqa: N802
        self.pylistener.on_progress(json.loads(jevent.progress().json()))

    def onQueryIdle(self, jevent) -> None:  # noqa: N802
        return None

    def onQueryTerminated(self, jevent) -> None:  # noqa: N802
        return None


class ProgressMarkers(StreamingQueryListener):
    """One per Spark session: publishes a marker after every batch that moved a query's promise,
    and once more after the next batch (see marker_due)."""

    def __init__(self) -> None:
        self._targets: dict[str, MarkerTarget] = {}
        self._lock = threading.Lock()

    @property
    def _jlistener(self):
        # Overrides PySpark's bridge (a private hook of pyspark 4.0): events arrive as JSON.
        from pyspark import SparkContext

        if not hasattr(self, "_jlistenerobj"):
            self._jlistenerobj = SparkContext._jvm.PythonStreamingQueryListenerWrapper(_JsonEvents(self))
        return self._jlistenerobj

    def watch(self, query_name: str, target: MarkerTarget) -> None:
        with self._lock:
            self._targets[query_name] = target

    def unwatch(self, query_name: str) -> None:
        with self._lock:
            self._targets.pop(query_name, None)

    # The abstract methods of StreamingQueryListener; events reach on_progress instead.
    def onQueryStarted(self, event) -> None:  # noqa: N802
        return None

    def onQueryProgress(self, event) -> None:  # noqa: N802
        return None

    def onQueryIdle(self, event) -> None:  # noqa: N802
        return None

    def onQueryTerminated(self, event) -> None:  # noqa: N802
        return None

    def on_progress(self, progress: dict) -> None:
        """A query's progress, as Spark's JSON: publish its marker when one is due."""
        with self._lock:
            target = self._targets.get(progress.get("name") or "")
        if target is None:
            return
        watermark = parse_watermark((progress.get("eventTime") or {}).get("watermark"))
        if watermark is None:
            return
        promise = next_window_start(watermark, target.window)
        if not marker_due(promise, target.last_ms, target.repeated):
            return
        batch_id = int(progress.get("batchId", 0))
        try:
            producer = clients.shared_producer(target.bootstrap)
            producers.deliver(producer, [send_marker(producer, target.topic, target.producer, target.stream, batch_id,
                                               promise)])
            target.repeated = promise == target.last_ms
            target.last_ms = promise
        except Exception:  # noqa: BLE001 - a lost marker only delays the parent; the next one repairs it
            log.exception("progress marker for %s failed", progress.get("name"))


_markers: dict[int, ProgressMarkers] = {}
_markers_lock = threading.Lock()


def markers_for(spark: SparkSession) -> ProgressMarkers:
    """The session's marker listener, registered on first use."""
    with _markers_lock:
        key = id(spark)
        if key not in _markers:
            _markers[key] = ProgressMarkers()
            spark.streams.addListener(_markers[key])
        return _markers[key]


def detach_markers(spark: SparkSession) -> None:
    """Remove the session's marker listener (before the session stops)."""
    with _markers_lock:
        listener = _markers.pop(id(spark), None)
    if listener is not None:
        spark.streams.removeListener(listener)
