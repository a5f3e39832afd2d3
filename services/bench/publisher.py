"""The benchmarks' publisher: read cycles offered at a rate, from a process of its own.

Run it in a spawned process (`multiprocessing.get_context("spawn").Pool(1)`): its CPU is then not
the node's, and the parent's Spark JVM is not forked. librdkafka (the client the node's readers
fetch with) sends: kafka-python's producer tops out near 40 k readings/s on this machine.
"""

from __future__ import annotations

import random
import statistics
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from wire.codec import TagObservation

TICK_S = 0.05   # the publisher paces itself twenty times a second

Cycle = tuple[str, Sequence[TagObservation]]   # (receptor, the reads of one read cycle)


@dataclass
class Sent:
    readings: int = 0   # each cycle once (a cycle sent twice is one)
    # with tally_ms: {(time stamped, floored to tally_ms; receptor; antenna): readings} — what was
    # sent, the truth a benchmark holds a node's counts to
    tally: Counter = field(default_factory=Counter)


def publish(bootstrap: str, topic: str, pool: Sequence[Cycle], rate: float, seconds: float,
            resent: float = 0.0, tally_ms: int = 0) -> Sent:
    """Offer `rate` readings/s of the pool's cycles, in turn, for `seconds`, each stamped as it is
    sent (its cycle number counting up), a share `resent` of them sent twice (an outbox's retry,
    which the node's intake drops); what was sent."""
    from confluent_kafka import Producer

    from wire.codec import encode_read_cycle
    from wire.kafka.config import librdkafka_client

    producer = Producer({**librdkafka_client(bootstrap), "linger.ms": 20,
                         "queue.buffering.max.messages": 1_000_000})
    per_cycle = statistics.mean(len(reads) for _, reads in pool) or 1.0
    antennas = [Counter(read.antenna for read in reads) for _, reads in pool] if tally_ms else []
    rng, cycle, sent, due = random.Random(1), 0, Sent(), 0.0
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
            sent.readings += len(reads)
            for antenna, n in antennas[cycle % len(pool)].items() if tally_ms else ():
                sent.tally[now_ms // tally_ms * tally_ms, receptor, antenna] += n
            cycle += 1
        time.sleep(TICK_S)
    producer.flush()
    return sent
