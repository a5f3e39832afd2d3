"""Where partitions end, learned by reading them as they grow (librdkafka): for a stream that asks
every 250 ms where each of its children's topics ends.

Asking the broker (ListOffsets: wire.kafka.consumers.end_offsets) costs a poll in Python per partition, so a
parent's cost grew with its children. A consumer positioned at the ends of those partitions sees
each record as it is appended (a child's views, partials and markers: a few records a window) and
the end is the last one's offset plus one; librdkafka fetches in its own threads, in C. Apache
Kafka answers a waiting fetch as soon as a record arrives, so the fetch may wait long: with
`fetch.wait.max.ms` 500 rather than 100 the default hierarchy's broker and Redis used 0.10 cores
rather than 0.16 and its windows came out no later (`hifi bench pipeline`, one run each). Raw
topics are not watched: their records are many and their readers fetch them anyway.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from confluent_kafka import Consumer, TopicPartition
from kafka import TopicPartition as KafkaTopicPartition

from wire.kafka.clients import shared_consumer
from wire.kafka.config import librdkafka_client
from wire.kafka.consumers import end_offsets

FETCH_WAIT_MS = 500   # how long the broker may hold a fetch with nothing new (the figures above)


class EndWatch:
    """The ends of the partitions it is asked about, each asked of the broker once (when first
    asked) and then followed by reading. Not thread-safe: one stream's reader polls it."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self._ends: dict[tuple[str, int], int] = {}   # (topic, partition) -> the next offset
        self._consumer: Consumer | None = None        # made at the first call: in the process that polls

    def ends(self, tps: Sequence[KafkaTopicPartition]) -> dict[KafkaTopicPartition, int]:
        """Each partition's end now (those of deleted topics left out); partitions no longer asked
        about are no longer followed."""
        if not tps and self._consumer is None:
            return {}   # nothing to follow yet (a process of edges alone): no consumer
        self._follow({(tp.topic, tp.partition) for tp in tps})
        self._read_new()
        return {tp: self._ends[(tp.topic, tp.partition)] for tp in tps if (tp.topic, tp.partition) in self._ends}

    def __getstate__(self) -> dict:
        return {"bootstrap": self.bootstrap, "_ends": {}, "_consumer": None}   # a copy follows afresh

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    def _follow(self, wanted: set[tuple[str, int]]) -> None:
        consumer = self._consumer = self._consumer or _make_consumer(self.bootstrap)
        if gone := [key for key in self._ends if key not in wanted]:
            consumer.incremental_unassign([TopicPartition(*key) for key in gone])
            for key in gone:
                del self._ends[key]
        if new := [KafkaTopicPartition(*key) for key in sorted(wanted - self._ends.keys())]:
            found = end_offsets(shared_consumer(self.bootstrap), new)
            consumer.incremental_assign([TopicPartition(tp.topic, tp.partition, end) for tp, end in found.items()])
            self._ends.update({(tp.topic, tp.partition): end for tp, end in found.items()})

    def _read_new(self) -> None:
        """Every record fetched since the last call: the last of each partition says where it ends.
        Assigned, not maxed: a topic made anew under the same name starts again from its beginning."""
        assert self._consumer is not None
        while messages := self._consumer.consume(10_000, 0):
            for message in messages:
                key = (message.topic(), message.partition())
                if message.error() is None and key in self._ends:
                    self._ends[key] = message.offset() + 1
            if len(messages) < 10_000:
                return


def _make_consumer(bootstrap: str) -> Consumer:
    # assigned partitions only, never a group join (DESIGN §11); the group id is librdkafka's
    # requirement, unused. A topic deleted meanwhile is the placement's doing, not an error here.
    return Consumer({**librdkafka_client(bootstrap), "group.id": "hifi-end-watch", "enable.auto.commit": False,
                     "enable.auto.offset.store": False, "auto.offset.reset": "earliest",
                     "fetch.wait.max.ms": FETCH_WAIT_MS, "isolation.level": "read_uncommitted",
                     "enable.partition.eof": False, "log.connection.close": False,
                     "logger": logging.getLogger("hifi.librdkafka")})
