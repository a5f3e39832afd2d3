"""The benchmarks' publisher: read cycles offered at a rate, from a process of its own.

Run it in a spawned process (`multiprocessing.get_context("spawn").Pool(1)`): its CPU is then not
the node's, and the parent's Spark JVM is not forked. librdkafka (the client the node's readers
fetch with) sends: kafka-python's producer tops out near 40 k readings/s on this machine.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Sequence

from wire.codec import TagObservation

TICK_S = 0.05   # the publisher paces itself twenty times a second

Cycle = tuple[str, Sequence[TagObservation]]   # (receptor, the reads of one read cycle)


def publish(bootstrap: str, topic: str, pool: Sequence[Cycle], rate: float, seconds: float,
            resent: float = 0.0) -> int:
    """Offer `rate` readings/s of the pool's cycles, in turn, for `seconds`, each stamped as it is
    sent (its cycle number counting up), a share `resent` of them sent twice (an outbox's retry,
    which the node's intake drops); the readings sent, each cycle counted once."""
    from confluent_kafka import Producer

    from wire.codec import encode_read_cycle
    from wire.range_fetch import librdkafka_client

    producer = Producer({**librdkafka_client(bootstrap), "linger.ms": 20,
                         "queue.buffering.max.messages": 1_000_000})
    per_cycle = statistics.mean(len(reads) for _, reads in pool) or 1.0
    rng, cycle, readings, due = random.Random(1), 0, 0, 0.0
    started = time.monotonic()
    while (elapsed := time.monotonic() - started) < seconds:
        due = elapsed * rate / per_cycle
        now_ms = int(time.time() * 1000)
        while cycle < due:
            receptor, reads = pool[cycle % len(pool)]
            key, value = encode_read_cycle(receptor, cycle, now_ms, reads)
            for _ in range(2 if resent and rng.random() < resent else 1):
                producer.produce(topic, value, key)
            producer.poll(0)
            readings += len(reads)
            cycle += 1
        time.sleep(TICK_S)
    producer.flush()
    return readings
