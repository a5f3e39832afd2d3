"""Where a receptor agent's records go: straight to the broker while it takes them, to the spool
on local disk (wire.spool) while it does not, and from the spool to the broker, oldest first,
once it does again (store-and-forward).

Each record keeps the time it was first sent as its Kafka timestamp, so the edge node judges it
by when it was produced (wire.intake), and its readings keep the time they were stamped with:
windows come out the same, only later. Once anything is spooled, new records queue behind it
until the spool is empty, so a partition's order holds (but for a record the broker took while
one before it failed: that one comes later). A forward that the broker takes only in part is
forwarded again from its first failure: what it took is sent twice, and the edge node drops
the repeated read cycles (wire.intake's duplicate check).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

from wire.kafka import producers
from wire.spool import Spool, SpooledRecord

log = logging.getLogger("hifi.agent")

FORWARD_RECORDS = 2_000                 # sent from the spool per attempt
RETRY_AFTER_S = (0.5, 1.0, 2.0, 4.0)    # waits before trying an unreachable broker again
DEFAULT_SPOOL_BYTES = 256 * 1024 * 1024
# An agent must notice an unreachable broker in seconds, not kafka-python's minutes.
PRODUCER_TIMEOUTS = {"request_timeout_ms": 2_000, "delivery_timeout_ms": 3_000, "max_block_ms": 2_000}


@dataclass
class OutboxStats:
    spooled: int = 0       # records that went to the spool
    forwarded: int = 0     # records sent from it
    dropped: int = 0       # records refused by a full spool
    outages: int = 0       # times the broker stopped taking records


class Outbox:
    def __init__(self, producer, spool: Spool) -> None:
        self.producer = producer
        self.spool = spool
        self.stats = OutboxStats()
        self._failures = 0
        self._retry_at = 0.0
        self._full = False

    def send(self, records: Sequence[SpooledRecord]) -> None:
        """Send one tick's records (or spool them); returns once each is with the broker or spooled."""
        if self.spool.pending_bytes():
            self.forward()
        if self.spool.pending_bytes():
            self._spool(records)
            return
        taken = producers.send_and_wait(self.producer, [(r.topic, r.key, r.value, r.headers, r.timestamp_ms)
                                                  for r in records])
        failed = [r for r, ok in zip(records, taken, strict=True) if not ok]
        if failed:
            self._unreachable()
            self._spool(failed)

    def forward(self) -> None:
        """Send what the spool holds, oldest first, if the broker may be back."""
        while self.spool.pending_bytes() and time.monotonic() >= self._retry_at:
            records, ends = self.spool.head(FORWARD_RECORDS)
            taken = producers.send_and_wait(self.producer, [(r.topic, r.key, r.value, r.headers, r.timestamp_ms)
                                                      for r in records])
            done = next((n for n, ok in enumerate(taken) if not ok), len(taken))
            if done:
                self.spool.advance(ends[done - 1])
                self.stats.forwarded += done
            if done < len(taken):
                self._unreachable()
                return
            if self._failures:
                log.warning("agent: the broker takes records again; forwarding the spool")
                self._failures, self._full = 0, False
            if not self.spool.pending_bytes():
                log.warning("agent: spool forwarded (%d records in all)", self.stats.forwarded)

    def _spool(self, records: Sequence[SpooledRecord]) -> None:
        for record in records:
            if self.spool.put(record):
                self.stats.spooled += 1
            else:
                self.stats.dropped += 1
                if not self._full:
                    self._full = True
                    log.error("agent: the spool is full (%d bytes): newer records are dropped and counted",
                              self.spool.max_bytes)

    def _unreachable(self) -> None:
        if not self._failures:
            self.stats.outages += 1
            log.warning("agent: the broker does not take records; spooling them on disk")
        self._retry_at = time.monotonic() + RETRY_AFTER_S[min(self._failures, len(RETRY_AFTER_S) - 1)]
        self._failures += 1
