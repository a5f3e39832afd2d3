"""kafka-python's consumer, assigned partitions only: partitions, their ends, ranges polled, tails."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping, Sequence

from kafka import KafkaConsumer, TopicPartition
from kafka.errors import KafkaTimeoutError

from wire.kafka.config import client_security


def make_consumer(bootstrap: str, **overrides) -> KafkaConsumer:
    # Manual assignment only: a group join costs ~20 s on the embedded broker (DESIGN §11).
    return KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None,
                         max_partition_fetch_bytes=8 * 1024 * 1024, fetch_max_bytes=64 * 1024 * 1024,
                         **{**client_security(), **overrides})


def partitions_of(consumer: KafkaConsumer, topics: Sequence[str]) -> list[TopicPartition]:
    tps = []
    for topic in topics:
        parts = consumer.partitions_for_topic(topic)
        if not parts:
            consumer.topics()  # refresh metadata once; the topic may have just been created
            parts = consumer.partitions_for_topic(topic) or set()
        tps.extend(TopicPartition(topic, p) for p in sorted(parts))
    return tps


ENDS_TIMEOUT_MS = 5_000   # a partition the broker answers for answers in milliseconds


def end_offsets(consumer: KafkaConsumer, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
    """The next offset of each partition (its high watermark). A partition the broker no longer
    answers for (its topic deleted: services.placement) is left out: the consumer's metadata
    still lists it, and kafka-python asks for it again until its timeout (Apache Kafka answers
    UNKNOWN_TOPIC_OR_PARTITION), so the ends are asked again, of the partitions that exist now."""
    if not tps:
        return {}
    try:
        return consumer.end_offsets(list(tps), timeout_ms=ENDS_TIMEOUT_MS)
    except (KeyError, KafkaTimeoutError):
        consumer.topics()   # the broker's topics afresh: only the partitions that exist now
        tps = [tp for tp in tps if tp.partition in (consumer.partitions_for_topic(tp.topic) or ())]
        return consumer.end_offsets(tps) if tps else {}


def fetch_only(consumer: KafkaConsumer, tps: Sequence[TopicPartition], keep_assigned: bool = False) -> None:
    """Make `consumer` fetch `tps` only. `keep_assigned`: the partitions it read before stay
    assigned, paused. An assignment that changes leaves nothing fetchable for ~100 ms (kafka-python
    3 on the embedded broker, measured 2026-11-28: a consumer reading 33 topics one after another
    102 ms a read, with the others kept assigned and paused 4.5 ms); for a consumer that reads the
    same few topics again and again (wire.kafka.ranges' owners). A paused topic deleted meanwhile
    costs nothing (measured: reads go on, no CPU while idle)."""
    wanted = set(tps)
    if not keep_assigned:
        consumer.assign(list(wanted))
        return
    assigned = consumer.assignment()
    if not wanted <= assigned:
        consumer.assign(list(assigned | wanted))
    if others := assigned - wanted:
        consumer.pause(*others)
    consumer.resume(*wanted)


def poll_range(consumer: KafkaConsumer, tp: TopicPartition, start: int, end: int,
               idle_timeout_ms: int = 5000, keep_assigned: bool = False) -> Iterator:
    """Yield the records of one partition with start <= offset < end, in order (`keep_assigned`:
    `fetch_only`'s)."""
    if start >= end:
        return
    fetch_only(consumer, [tp], keep_assigned)
    consumer.seek(tp, start)
    position = start
    while position < end:
        fetched = consumer.poll(timeout_ms=idle_timeout_ms, max_records=100_000).get(tp, [])
        if not fetched:
            raise TimeoutError(f"{tp.topic}[{tp.partition}]: no records at offset {position} (< {end})")
        for record in fetched:
            if record.offset >= end:
                return
            if record.offset >= position:
                position = record.offset + 1
                yield record


def poll_ranges(consumer: KafkaConsumer, ranges: Mapping[TopicPartition, tuple[int, int]],
                idle_timeout_ms: int = 5000, keep_assigned: bool = False) -> dict[TopicPartition, list]:
    """The records of several partitions' ranges (start <= offset < end), fetched together: a
    reader of many topics reads a small micro-batch in one fetch, not one per partition (16
    partitions of one record each, one after another: 25 ms, and now and then 1.5 s).
    `keep_assigned`: `fetch_only`'s."""
    wanted = {tp: bounds for tp, bounds in ranges.items() if bounds[0] < bounds[1]}
    found: dict[TopicPartition, list] = {tp: [] for tp in ranges}
    if not wanted:
        return found
    fetch_only(consumer, list(wanted), keep_assigned)
    for tp, (start, _) in wanted.items():
        consumer.seek(tp, start)
    position = {tp: start for tp, (start, _) in wanted.items()}
    while left := [tp for tp, (_, end) in wanted.items() if position[tp] < end]:
        fetched = consumer.poll(timeout_ms=idle_timeout_ms, max_records=100_000)
        if not fetched:
            raise TimeoutError(f"{left[0].topic}[{left[0].partition}]: no records at offset {position[left[0]]} "
                               f"(< {wanted[left[0]][1]})")
        for tp, records in fetched.items():
            if tp not in wanted:
                continue
            end = wanted[tp][1]
            for record in records:
                if position[tp] <= record.offset < end:
                    found[tp].append(record)
                    position[tp] = record.offset + 1
    return found


def topic_bytes(bootstrap: str, topics: Sequence[str]) -> int:
    """Key and value bytes of every record now in `topics` (their payload on the wire)."""
    consumer = make_consumer(bootstrap)
    try:
        tps = partitions_of(consumer, topics)
        ends = end_offsets(consumer, tps)
        return sum(len(r.key or b"") + len(r.value or b"") for tp in tps for r in poll_range(consumer, tp, 0, ends[tp]))
    finally:
        consumer.close()


TAIL_RECHECK_S = 1.0   # how often a tail asks whether a topic it waits for has been made


def tail(bootstrap: str, topics: Sequence[str], stop: threading.Event, from_beginning: bool = True,
         poll_ms: int = 200) -> Iterator:
    """Yield records of `topics` as they arrive until `stop` is set (manual assignment, no group).
    A topic not made yet (a view's is made at its first write; a consumer's metadata request makes
    none) is asked about again every TAIL_RECHECK_S and read from its beginning once it is there."""
    consumer = make_consumer(bootstrap)
    try:
        tps = partitions_of(consumer, topics)
        consumer.assign(tps)
        if from_beginning:
            consumer.seek_to_beginning(*tps)
        waiting, checked = [t for t in dict.fromkeys(topics) if t not in {tp.topic for tp in tps}], time.monotonic()
        while not stop.is_set():
            if waiting and time.monotonic() - checked >= TAIL_RECHECK_S:
                checked = time.monotonic()
                made = _made(consumer, waiting)
                if made:
                    positions = {tp: consumer.position(tp) for tp in tps}
                    tps = [*tps, *made]
                    consumer.assign(tps)
                    for tp, offset in positions.items():
                        consumer.seek(tp, offset)
                    consumer.seek_to_beginning(*made)
                    waiting = [t for t in waiting if t not in {tp.topic for tp in made}]
            for records in consumer.poll(timeout_ms=poll_ms).values():
                yield from records
    finally:
        consumer.close()


def _made(consumer: KafkaConsumer, topics: Sequence[str]) -> list[TopicPartition]:
    """The partitions of those of `topics` the broker has now (its metadata asked afresh once)."""
    existing = consumer.topics()
    return [TopicPartition(topic, partition) for topic in topics if topic in existing
            for partition in sorted(consumer.partitions_for_topic(topic) or ())]
