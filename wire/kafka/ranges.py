"""Offset ranges of one partition read with librdkafka (confluent-kafka): the readers' fetch.

Every other client of the project is kafka-python (wire.kafka.consumers). A reader's fetch is the one place its
cost per record decides a node's capacity: kafka-python parses each record batch in Python, ~11 µs a
record (measured on the 2-core machine: 900 k readings/s = 90 k records/s of 10 readings, and that
before a row is decoded), where librdkafka parses in C: the same topic in 0.09 s against 0.55 s,
5.5 M readings/s. Records come back as `Record`s, the fields readers use of kafka-python's. A short
range (LIBRDKAFKA_FROM) is read with kafka-python.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import NamedTuple

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaTopicPartition

from wire.kafka.clients import owned_consumer
from wire.kafka.config import librdkafka_client
from wire.kafka.consumers import make_consumer, poll_range, poll_ranges

# A micro-batch of a hierarchy's steady state holds a few records a partition; there librdkafka's
# first fetch after an assignment took up to 0.8 s now and then (p95 15 ms; measured over
# `hifi bench pipeline`: its p95 latency rose from 6.7-6.9 s to 7.7-9.5 s), and kafka-python's per
# record cost does not matter. Past this many records, librdkafka.
LIBRDKAFKA_FROM = 1_000


class Record(NamedTuple):
    offset: int
    timestamp: int | None            # Kafka's record time, epoch ms
    value: bytes | None
    headers: list[tuple[str, bytes]] | None


def make_range_consumer(bootstrap: str) -> Consumer:
    # Assigned partitions only, never a group join (DESIGN §11: ~20 s on the embedded broker); the
    # group id is librdkafka's requirement, unused. fetch.wait.max.ms: a range's records exist
    # already, so a fetch never needs to wait for more. librdkafka's prefetch is left as it is
    # (up to 100 000 records or 64 MB ahead): capped at 10 000 records and 8 MB, the capacity bench
    # fell from 444 k to 205 k readings/s.
    config = {**librdkafka_client(bootstrap), "group.id": "hifi-range-reader", "enable.auto.commit": False,
              "enable.auto.offset.store": False, "auto.offset.reset": "earliest", "fetch.wait.max.ms": 10,
              "isolation.level": "read_uncommitted",   # as kafka-python reads, every other client here
              "max.partition.fetch.bytes": 8 * 1024 * 1024, "fetch.max.bytes": 64 * 1024 * 1024,
              "enable.partition.eof": False, "log.connection.close": False,
              # its log through Python's (a worker's stderr is Spark's log): a broker going away at
              # shutdown is not an error of the node's
              "logger": logging.getLogger("hifi.librdkafka")}
    return Consumer(config)


def make_short_range_consumer(bootstrap: str) -> KafkaConsumer:
    """kafka-python's consumer for short ranges. A poll with nothing fetchable yet sleeps
    `retry_backoff_ms` (100 ms by default), and a consumer whose assignment changed has nothing
    fetchable for ~100 ms whatever that setting (measured on the embedded broker: a consumer
    switching between 33 topics 102 ms a read, one per topic 5 ms). Hence one consumer per
    *owner* (a node's lane, reading the same topics batch after batch: `owned_consumer`), and a short
    backoff for when its topics change. `fetch_max_wait_ms` as librdkafka's above: a range's
    records exist already."""
    return make_consumer(bootstrap, retry_backoff_ms=5, fetch_max_wait_ms=10)


def read_short_ranges(bootstrap: str, ranges: list[tuple[str, int, int, int]],
                      owner: str = "") -> dict[tuple[str, int, int], list]:
    """(topic, partition, start) -> the records of each short range (topic, partition, start, end),
    fetched together with kafka-python (a reader of many topics reads a small batch in one fetch)
    with `owner`'s consumer (`owned_consumer`)."""
    consumer = owned_consumer("kafka-python", bootstrap, make_short_range_consumer, owner)
    found = poll_ranges(consumer, {KafkaTopicPartition(t, p): (lo, hi) for t, p, lo, hi in ranges},
                            keep_assigned=bool(owner))
    return {(t, p, lo): found[KafkaTopicPartition(t, p)] for t, p, lo, _ in ranges}


def read_range(bootstrap: str, topic: str, partition: int, start: int, end: int,
               idle_timeout_s: float = 30.0, owner: str = "") -> Iterator[Record]:
    """Yield the records of one partition with start <= offset < end, in order: a range of fewer
    than LIBRDKAFKA_FROM records with kafka-python (wire.kafka.consumers.poll_range, whose records have the same
    fields), a longer one with librdkafka. The records exist (the range ends at an offset the broker
    gave): `idle_timeout_s` is for a broker that stopped answering; under a 160 k readings/s
    overload the embedded broker went 5 s without a record now and then (the batch failed and its
    query restarted: `hifi bench capacity`). `owner`: whose kafka-python consumer (`owned_consumer`)."""
    if start >= end:
        return
    if end - start < LIBRDKAFKA_FROM:
        yield from poll_range(owned_consumer("kafka-python", bootstrap, make_short_range_consumer, owner),
                                  KafkaTopicPartition(topic, partition), start, end, keep_assigned=bool(owner))
        return
    consumer = owned_consumer("librdkafka", bootstrap, make_range_consumer)
    consumer.assign([TopicPartition(topic, partition, start)])
    try:
        position, idle_since = start, time.monotonic()
        while position < end:
            # asked for what is left: consume() returns as soon as it has that many
            messages = consumer.consume(min(end - position, 50_000), timeout=0.1)
            if not messages:
                if time.monotonic() - idle_since > idle_timeout_s:
                    raise TimeoutError(f"{topic}[{partition}]: no records at offset {position} (< {end})")
                continue
            idle_since = time.monotonic()
            for message in messages:
                error = message.error()
                if error is not None:
                    # the client's own troubles (its group coordinator, which assign-only reading
                    # never uses, may be denied to a node under ACLs) are not the range's
                    if message.topic() == topic and message.partition() == partition \
                            and error.code() != KafkaError._PARTITION_EOF:
                        raise KafkaException(error)
                    continue
                offset = message.offset()
                if message.partition() != partition or message.topic() != topic or offset < position:
                    continue   # left from an earlier assignment, or before the start
                if offset >= end:
                    return
                position = offset + 1
                yield Record(offset, message.timestamp()[1], message.value(), message.headers())
    finally:
        consumer.unassign()
