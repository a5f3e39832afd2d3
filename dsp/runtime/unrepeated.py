"""A micro-batch sent again sends only what its topics do not hold yet: each message once in the log.

A batch that fails after some of its messages went out (a crash between flush and fence, in
process or of the process) runs again from the saved state and makes the same messages: the same
key (`<node>:<batch>:<chunk>`, `<node>:wm:<batch>`), stream and run (wire.codec's identity). The
replay's producer reads the tail of each topic it writes, the first time it writes it, and drops
a message whose identity is there. Every topic a part writes has one writer (its node; wire.topics),
and the batch in flight is the last that writer sent, so its messages, if any went out, are in the
tail. A reader that does not drop repeats — a read_committed consumer, kcat, Flink — then reads
each window once; the project's readers keep dropping repeats as a second line.
"""

from __future__ import annotations

import logging
from typing import Any

from wire.codec import parse_row_batch
from wire.kafka import consumers

log = logging.getLogger("hifi.dsp")

TAIL_MESSAGES = 2_000   # a batch's messages to one topic: its row chunks and one marker
Identity = tuple[bytes, str, str]   # (key, stream, run)


def identity(key: bytes | None, value: bytes | None) -> Identity | None:
    """A message's identity, or None for one that is not a RowBatch with a key."""
    batch, _ = parse_row_batch(value)
    if batch is None or not key:
        return None
    return key, batch.stream, batch.run


class AlreadySent:
    """What a send that was not repeated returns: a delivered future, as producers.deliver reads one."""

    is_done = True
    exception = None

    @staticmethod
    def failed() -> bool:
        return False

    @staticmethod
    def succeeded() -> bool:
        return True


class Unrepeated:
    """The producer of one replayed batch: `send` as the producer's, less what its topics hold."""

    def __init__(self, producer: Any, bootstrap: str, node_id: str) -> None:
        self.producer, self.bootstrap, self.node_id = producer, bootstrap, node_id
        self._held: dict[str, set[Identity]] = {}
        self.dropped = 0

    def held(self, topic: str) -> set[Identity]:
        """The identities in the last TAIL_MESSAGES messages of `topic` (read once per replay)."""
        if topic not in self._held:
            consumer = consumers.make_consumer(self.bootstrap)
            try:
                found: set[Identity] = set()
                for tp in consumers.partitions_of(consumer, [topic]):
                    end = consumers.end_offsets(consumer, [tp]).get(tp, 0)
                    for record in consumers.poll_range(consumer, tp, max(0, end - TAIL_MESSAGES), end):
                        if (known := identity(record.key, record.value)) is not None:
                            found.add(known)
                self._held[topic] = found
            finally:
                consumer.close()
        return self._held[topic]

    def send(self, topic: str, key: bytes | None = None, value: bytes | None = None, **kwargs: Any) -> Any:
        known = identity(key, value)
        if known is not None and known in self.held(topic):
            self.dropped += 1
            return AlreadySent()
        return self.producer.send(topic, key=key, value=value, **kwargs)

    def flush(self, timeout: float | None = None) -> Any:
        return self.producer.flush(timeout=timeout)

    def report(self, batch_id: int) -> None:
        if self.dropped:
            log.info("node %s: batch %d sent again: %d of its messages were in their topics already and were not "
                     "sent twice", self.node_id, batch_id, self.dropped)
