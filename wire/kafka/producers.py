"""kafka-python's producer (the agents', the tools') and the delivery every producer's sends go
through, librdkafka's (wire.kafka.rd_producer) too: sends whose failure is an error, not a loss."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from confluent_kafka import KafkaException
from kafka import KafkaProducer
from kafka.errors import KafkaError

from wire.kafka.config import client_security

if TYPE_CHECKING:
    from wire.kafka.rd_producer import RdProducer


class Producer(KafkaProducer):
    """kafka-python's producer, tracking in its metadata every topic it sends to.

    kafka-python 3 tracks a topic (asks the broker about it at each refresh) only if a send finds
    no partitions for it; a producer's first metadata, fetched while it tracks nothing, holds every
    topic, so a topic first written before the next refresh is never tracked. That refresh (with
    topics tracked) leaves it out: its partition's leader is unknown from then on, and its sender
    asks for metadata and polls with no wait, for ever. Measured in the default hierarchy: the
    sensor proxy's one write to hifi.control.door1 kept one sender thread 60 % of a core busy."""

    def send(self, topic: str, *args: Any, **kwargs: Any):
        self._sender.add_topic(topic)   # a set lookup once tracked
        return super().send(topic, *args, **kwargs)


def make_producer(bootstrap: str, **overrides) -> Producer:
    # kafka-python 3 turns idempotence on by default; its producer-id and sequence gates stop a
    # producer's every partition while one waits, and in CI records sat 120 s and expired against
    # the embedded broker with no error before. Without it, one request in flight keeps a
    # partition's order on retry (rows before their progress marker); measured on Tansu: 13.9 k
    # vs 13.8 k msg/s, no cost. A retry after a lost answer can repeat a message (at least once).
    # A partition's records can still sit unsent with its leader unknown (seen only in the full test
    # suite, on the first view topic of its first hierarchy): give up after 20 s, not kafka-python's
    # 120 s, and deliver() replaces that producer, so the replayed batch goes out on a fresh one.
    config = {"bootstrap_servers": bootstrap, "linger_ms": 5, "acks": "all", "retries": 5,
              "max_request_size": 8 * 1024 * 1024, "enable_idempotence": False,
              "max_in_flight_requests_per_connection": 1, "request_timeout_ms": 10_000,
              "delivery_timeout_ms": 20_000, **client_security()}
    config.update(overrides)
    return Producer(**config)


def forget_topics(producer: KafkaProducer | RdProducer, topics: Sequence[str]) -> None:
    """Make the producer forget the partitions of `topics` it holds nothing for: topics no part
    writes any more (a cancelled query's), deleted a minute later (services.placement's
    delete_retired_topics).

    kafka-python's accumulator keeps an entry for every partition ever written, and one whose
    leader is unknown (its topic deleted) makes its sender ask for metadata every
    retry_backoff_ms (100 ms), for ever. Measured (300 topics written, 5 deleted,
    metadata_max_age_ms 5 s): the process then spent 10.0 s of CPU per 10 s from the first refresh
    after the deletion. Only these topics' empty entries go (a live topic's are never touched), each
    under its lock and only while no send is appending (kafka-python's append takes a partition's
    queue under the lock, lets go of it, and adds its new batch to that queue under the lock again:
    a queue dropped in between would take the batch and never send it). A later send to one of
    them makes a new entry."""
    if not isinstance(producer, KafkaProducer):
        producer.forget(list(topics))   # librdkafka's (wire.kafka.rd_producer): its next send checks the topic
        return
    accumulator, gone = producer._accumulator, set(topics)
    for tp in [tp for tp in list(accumulator._batches) if tp.topic in gone]:
        with accumulator._tp_lock(tp):   # a send that begins now takes the lock after us
            if not accumulator._batches.get(tp) and not accumulator._appends_in_progress.get():
                accumulator._batches.pop(tp, None)


class DeliveryError(RuntimeError):
    """Messages the broker did not take (after the producer's own retries)."""


DELIVERY_WAIT_S = 30.0   # past the producer's delivery_timeout_ms (20 s): its own expiry answers first


def deliver(producer: KafkaProducer | RdProducer, futures: Sequence) -> None:
    """Wait for these sends, then raise DeliveryError if any failed (a caller that marks its work
    done after it would lose them silently otherwise); a batch that sent nothing waits for nothing.
    The producer is flushed first, so they go now, not after its linger: the nodes of one process
    share it, but their lanes take turns (dsp.process_stream), so a flush waits for little but
    these. Measured 2026-11-28, the 32-door warehouse in one `hifi up`, two interleaved pairs: its
    windows p50 / p95 2.91 / 3.91 and 2.95 / 3.89 s after they end with the flush, 3.22 / 4.56 and
    3.50 / 5.10 waiting out the linger (without any linger, sends went one by one and came later)."""
    waiting = [f for f in futures if hasattr(f, "get") and not f.is_done]   # Kafka's (an uplink's queue took its own)
    if waiting:
        with contextlib.suppress(Exception):   # sent now, not after the linger; failures are read below
            producer.flush(timeout=DELIVERY_WAIT_S)
    for future in waiting:
        with contextlib.suppress(Exception):
            future.get(timeout=DELIVERY_WAIT_S)
    failed = [f.exception or "not answered" for f in futures if f.failed() or not getattr(f, "is_done", True)]
    if failed:
        producer.close(timeout=0)   # not trusted again: the process's cache replaces a closed producer
        raise DeliveryError(f"{len(failed)} of {len(futures)} messages not delivered: {failed[0]}")


def send_and_wait(producer: KafkaProducer | RdProducer,
                  messages: Sequence[tuple[str, bytes, bytes, list, int]]) -> list[bool]:
    """Send (topic, key, value, headers, timestamp ms) messages in order and wait for the broker;
    for each, whether it took it. A broker that does not answer fails them within the producer's
    timeouts (max_block_ms for metadata, delivery_timeout_ms for the rest)."""
    futures = []
    for topic, key, value, headers, timestamp_ms in messages:
        try:
            futures.append(producer.send(topic, key=key, value=value, headers=headers, timestamp_ms=timestamp_ms))
        except (KafkaError, KafkaException):   # no metadata in time (kafka-python's or librdkafka's):
            break                              # the rest would wait as long
    producer.flush()
    taken = [f.succeeded() for f in futures]
    return taken + [False] * (len(messages) - len(taken))
