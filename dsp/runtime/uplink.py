"""A node's constrained link to the tier above (the topology's `uplink`, a byte rate emulated on
this side): what its parts send waits in lanes, one per priority, and goes out highest priority
first at the link's rate, so alerts and summaries are not stuck behind a flood of detail.

Each lane is a spool on the node's disk (wire.spool), so a message is durable once queued: the
runtime records a micro-batch as done when its messages are in their lanes (not yet sent), and
a node that restarts takes its lanes up again. A message sent and not yet marked forwarded when
the node dies is sent again, and readers drop it (its identity: wire.codec). A part's messages
(rows, then its progress markers) stay in order: a part has one priority. When a lane's spool
is full a message is refused and counted (`dropped`): the link is behind by more than the
spool holds.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass

from wire.kafka import clients, producers
from wire.spool import Spool, SpooledRecord

log = logging.getLogger("hifi.uplink")

DEFAULT_LANE_BYTES = 256 * 1024 * 1024
BURST_S = 0.2          # the link may send this many seconds' worth of bytes at once after an idle spell
FORWARD_RECORDS = 64   # read from a lane at once (a higher lane is looked at again after each message)


@dataclass
class UplinkStats:
    sent_bytes: int = 0
    sent: int = 0
    dropped: int = 0


class _Sent:
    """What a lane's `send` returns: the interface of a Kafka future that producers.deliver checks."""

    exception = None

    @staticmethod
    def failed() -> bool:
        return False


class Lane:
    """The producer-like face of one priority: `send` queues on disk."""

    def __init__(self, uplink: Uplink, priority: int) -> None:
        self.uplink, self.priority = uplink, priority
        self.spool = Spool(os.path.join(uplink.directory, f"priority-{priority}"), uplink.lane_bytes)
        self.lock = threading.Lock()

    def send(self, topic: str, key: bytes | None = None, value: bytes | None = None, headers=None):
        record = SpooledRecord(topic, key or b"", value or b"", list(headers or []), int(time.time() * 1000))
        with self.lock:
            taken = self.spool.put(record)
        if not taken:
            self.uplink.stats.dropped += 1
            log.error("uplink: lane %d is full (%d bytes): a message to %s was dropped", self.priority,
                      self.uplink.lane_bytes, topic)
        self.uplink.wake.set()
        return _Sent()

    def flush(self) -> None:
        """Queued is durable: nothing to wait for (its sends' futures need no wait: producers.deliver)."""

    def pending(self) -> int:
        with self.lock:
            return self.spool.pending_bytes()


class Uplink:
    def __init__(self, directory: str, bytes_per_s: int, bootstrap: str, lane_bytes: int = DEFAULT_LANE_BYTES) -> None:
        self.directory, self.bytes_per_s, self.bootstrap = directory, bytes_per_s, bootstrap
        self.lane_bytes = lane_bytes
        self.stats = UplinkStats()
        self.wake = threading.Event()
        self._lanes: dict[int, Lane] = {}
        self._lanes_lock = threading.Lock()
        self._stop = threading.Event()
        self._allowance, self._last = 0.0, time.monotonic()   # the link's token bucket (bytes it may send now)
        os.makedirs(directory, exist_ok=True)
        for name in os.listdir(directory):   # lanes a node that stopped left behind
            if name.startswith("priority-"):
                self.lane(int(name.removeprefix("priority-")))
        self._thread = threading.Thread(target=self._forward_loop, name="uplink", daemon=True)
        self._thread.start()

    def lane(self, priority: int) -> Lane:
        with self._lanes_lock:
            if priority not in self._lanes:
                self._lanes[priority] = Lane(self, priority)
            return self._lanes[priority]

    def queued_bytes(self) -> dict[int, int]:
        """Per priority, the bytes waiting for the link."""
        with self._lanes_lock:
            lanes = list(self._lanes.values())
        return {lane.priority: lane.pending() for lane in lanes}

    def stop(self) -> None:
        self._stop.set()
        self.wake.set()
        self._thread.join(timeout=5)

    def _highest(self) -> Lane | None:
        with self._lanes_lock:
            lanes = sorted(self._lanes.values(), key=lambda lane: -lane.priority)
        return next((lane for lane in lanes if lane.pending()), None)

    def _forward_loop(self) -> None:
        while not self._stop.is_set():
            lane = self._highest()
            if lane is None:
                self.wake.wait(0.5)
                self.wake.clear()
                continue
            with lane.lock:
                records, ends = lane.spool.head(FORWARD_RECORDS)
            for record, end in zip(records, ends, strict=True):
                size = len(record.key) + len(record.value)
                if not self._await_link(size, lane) or not self._send(record):
                    break   # stopping, a more important message came, or the broker did not take it
                self._allowance -= size
                with lane.lock:
                    lane.spool.advance(end)
                self.stats.sent += 1
                self.stats.sent_bytes += size
                if self._overtaken(lane):
                    break

    def _overtaken(self, lane: Lane) -> bool:
        higher = self._highest()
        return higher is not None and higher.priority > lane.priority

    def _await_link(self, size: int, lane: Lane) -> bool:
        """Wait until the link has carried the bytes before (a token bucket of BURST_S); False when
        stopping, or when a more important message came meanwhile (it goes first)."""
        while not self._stop.is_set():
            now = time.monotonic()
            self._allowance = min(self._allowance + (now - self._last) * self.bytes_per_s,
                                  max(size, self.bytes_per_s * BURST_S))
            self._last = now
            if self._allowance >= size:
                return True
            self.wake.clear()
            self.wake.wait((size - self._allowance) / self.bytes_per_s)
            if self._overtaken(lane):
                return False
        return False

    def _send(self, record: SpooledRecord) -> bool:
        try:
            message = (record.topic, record.key, record.value, record.headers, record.timestamp_ms)
            taken = producers.send_and_wait(clients.shared_producer(self.bootstrap), [message])
        except Exception:  # noqa: BLE001 - the broker away: tried again shortly, nothing is lost
            taken = [False]
        if not taken[0]:
            log.warning("uplink: the broker did not take a message; trying again")
            self._stop.wait(0.5)
        return taken[0]
