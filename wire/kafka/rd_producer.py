"""The nodes' producer: librdkafka (confluent-kafka) behind kafka-python's producer's few calls.

A node's batch sends its parts' rows and markers and waits for the broker before it saves
(wire.kafka.producers.deliver). kafka-python does that work in Python — its `send` builds the record batch,
its sender thread writes the request and reads the answer — so in a process whose lanes take
turns on the interpreter's lock, every send and every acknowledgement is paid for in that lock.
Measured on the 2-core machine (2026-11-29) against the embedded broker, one lane's three sends
then the wait for them: kafka-python 1.7-1.9 ms of CPU and 1.9-2.2 ms of wall, librdkafka
0.13-0.16 ms and 0.30-0.39 ms (its threads are C threads). Sends keep kafka-python's shape —
`send` returns a future that `get`, `is_done`, `failed`, `succeeded` and `exception` read — so
wire.kafka.producers' delivery is one code for both; the futures complete in `flush` (librdkafka answers in
the thread that polls or flushes it), which `deliver` and `send_and_wait` always call.

The settings are the node producer's of wire.kafka.producers.make_producer, in librdkafka's names: every
replica's acknowledgement, one request in flight (a partition's order holds on retry: rows before
their progress marker), no idempotence (see make_producer), 5 ms of linger, 20 s to deliver.
Its metadata requests create no topic: librdkafka asks about every topic it ever wrote, and a
broker that creates topics on demand (the embedded one) made a deleted part's topic again at the
next refresh (seen: at once, refreshing every second). A topic is made, if missing, at its first
send instead (as kafka-python's first send made it), and `forget` (wire.kafka.producers.forget_topics, at a
part's cancel and a topic's deletion) makes the next send to it check again.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from wire.kafka.admin import ensure_topics
from wire.kafka.config import librdkafka_client

log = logging.getLogger("hifi.librdkafka")

DELIVERY_TIMEOUT_MS = 20_000   # as make_producer's delivery_timeout_ms


class Delivery:
    """One message's delivery, as kafka-python's future reads it."""

    def __init__(self, producer: RdProducer) -> None:
        self._producer = producer
        self.is_done = False   # set by librdkafka's report, in whichever thread flushes (`answered`)
        self.exception: Exception | None = None

    def failed(self) -> bool:
        return self.is_done and self.exception is not None

    def succeeded(self) -> bool:
        return self.is_done and self.exception is None

    def get(self, timeout: float | None = None) -> None:
        """Wait for the broker's answer (serving the producer's answers meanwhile); raise its failure."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.is_done:
            left = 1.0 if deadline is None else deadline - time.monotonic()
            if left <= 0:
                raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "no answer in time"))
            self._producer.flush(min(left, 1.0))
        if self.exception is not None:
            raise self.exception

    def answered(self, error: KafkaError | None, _message: Any = None) -> None:
        """librdkafka's delivery report (in the thread that polls or flushes the producer)."""
        if error is not None:
            self.exception = KafkaException(error)
        self.is_done = True


class RdProducer:
    """A librdkafka producer with kafka-python's `send`, `flush` and `close`."""

    def __init__(self, bootstrap: str, **overrides: Any) -> None:
        config = {**librdkafka_client(bootstrap), "acks": "all", "enable.idempotence": False,
                  "max.in.flight.requests.per.connection": 1, "linger.ms": 5, "retries": 5,
                  "message.max.bytes": 8 * 1024 * 1024, "request.timeout.ms": 10_000,
                  "message.timeout.ms": DELIVERY_TIMEOUT_MS, "log.connection.close": False,
                  "allow.auto.create.topics": False, "logger": log, **overrides}
        self.bootstrap = bootstrap
        self._producer: Producer | None = Producer(config)
        self._topics: set[str] = set()   # those known to exist (`_exists`)
        self.closed = False

    def send(self, topic: str, value: bytes | None = None, key: bytes | None = None,
             headers: list[tuple[str, bytes]] | None = None, partition: int | None = None,
             timestamp_ms: int | None = None) -> Delivery:
        delivery = Delivery(self)
        producer = self._live()
        if topic not in self._topics:
            self._exists(producer, topic)
        kwargs: dict[str, Any] = {"on_delivery": delivery.answered}
        if partition is not None:
            kwargs["partition"] = partition
        if timestamp_ms is not None:
            kwargs["timestamp"] = timestamp_ms
        if headers:
            kwargs["headers"] = headers
        while True:
            try:
                producer.produce(topic, value=value, key=key, **kwargs)
                return delivery
            except BufferError:   # its queue is full: answers first, then room
                producer.poll(0.1)

    def flush(self, timeout: float | None = None) -> int:
        """Send what waits and serve the answers; the messages still unanswered."""
        return self._live().flush(-1 if timeout is None else timeout)

    def close(self, timeout: float | None = None) -> None:
        """Deliver what waits (within `timeout` seconds; none: no wait), then let go; what did not go fails."""
        producer, self._producer, self.closed = self._producer, None, True
        if producer is None:
            return
        if timeout:
            producer.flush(timeout)
        producer.purge()
        producer.flush(0)   # the purged messages' reports: their futures fail

    def forget(self, topics: list[str]) -> None:
        """The next send to one of `topics` checks that it exists (it may be deleted now)."""
        self._topics.difference_update(topics)

    def _exists(self, producer: Producer, topic: str) -> None:
        """The topic made if the broker does not have it (one metadata request, once a topic)."""
        found = producer.list_topics(topic, timeout=10).topics.get(topic)
        if found is None or found.error is not None:
            ensure_topics(self.bootstrap, [topic])
        self._topics.add(topic)

    def _live(self) -> Producer:
        if self._producer is None:
            raise KafkaException(KafkaError(KafkaError._DESTROY, "the producer was closed"))
        return self._producer
