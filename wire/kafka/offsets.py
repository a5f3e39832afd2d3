"""Offsets as queries and checkpoints name them ("topic:partition"), and where partitions begin and end."""

from __future__ import annotations

from collections.abc import Sequence

from kafka import TopicPartition
from kafka.errors import KafkaTimeoutError

from wire.kafka.clients import shared_consumer
from wire.kafka.consumers import ENDS_TIMEOUT_MS, end_offsets, partitions_of


def offset_key(topic: str, partition: int) -> str:
    """How offsets are keyed in a query's startingOffsets and checkpoints: "topic:partition"."""
    return f"{topic}:{partition}"


def current_ends(bootstrap: str, topics: Sequence[str]) -> dict[str, int]:
    """{"topic:partition": end offset} of every existing partition of `topics`: where a query
    that answers from now on starts reading them."""
    consumer = shared_consumer(bootstrap)
    ends = end_offsets(consumer, partitions_of(consumer, topics))
    return {offset_key(tp.topic, tp.partition): int(offset) for tp, offset in ends.items()}


def beginnings(bootstrap: str, keys: Sequence[str]) -> dict[str, int]:
    """{"topic:partition": first offset} of the partitions `keys` name ("topic:partition"): where a
    reader told nothing else starts (0 for a partition the broker does not answer for yet)."""
    tps = [TopicPartition(topic, int(partition)) for topic, _, partition in (key.rpartition(":") for key in keys)]
    try:
        found = shared_consumer(bootstrap).beginning_offsets(tps, timeout_ms=ENDS_TIMEOUT_MS)
    except (KeyError, KafkaTimeoutError):   # a partition the broker did not answer for (a topic just made)
        return {key: 0 for key in keys}
    return {offset_key(tp.topic, tp.partition): int(offset) for tp, offset in found.items()}
