"""The records a reader refuses, dead-lettered once to hifi.dead.<node> with the reason (keyed
<topic>:<partition>:<offset>, fenced in the MDR so a replayed range sends none again), and the
recent read cycles a range's duplicates are found against."""

from __future__ import annotations

from dataclasses import dataclass

from dsp.spark.worker_mdr import shared_mdr
from wire.codec import batch_identity, cycle_key, encode_dead_letter, is_sensor_batch
from wire.intake import DUPLICATE_LOOKBACK, RecentCycles
from wire.kafka import clients, producers
from wire.kafka.ranges import read_range
from wire.topics import dead_topic


@dataclass(frozen=True)
class Refusal:
    """A record a reader refused: where it stands, why, and its bytes (for the dead letter)."""

    offset: int
    reason: str
    payload: bytes
    part: int = -1     # which sample (or histogram) of a sensor batch; -1: the whole record
    histogram: bool = False

    def key(self, topic: str, partition: int) -> str:
        suffix = f":{'histogram' if self.histogram else ''}{self.part}" if self.part >= 0 else ""
        return f"{topic}:{partition}:{self.offset}{suffix}"


def send_dead_letters(bootstrap: str, node: str, topic: str, partition: int, refused: list[Refusal]) -> None:
    producer = clients.shared_producer(bootstrap)
    producers.deliver(producer, [producer.send(dead_topic(node), key=refusal.key(topic, partition).encode(),
                                         value=encode_dead_letter(node, topic, partition, refusal.offset,
                                                                  refusal.reason, refusal.payload))
                           for refusal in refused])


def dead_letter_once(bootstrap: str, mdr_url: str, node: str, topic: str, partition: int,
                     refused: list[Refusal]) -> None:
    """Dead-letter and count records that every reader of a topic refuses alike (a child's view
    is read by each query that uses it): the MDR remembers which it has counted, and only those
    new to it are sent, so each bad record is one dead letter however many queries met it."""
    keys = [r.key(topic, partition) for r in refused]
    new = set(shared_mdr(mdr_url).count_dead_letters(node, keys)) if mdr_url else set(keys)
    fresh = [r for r in refused if r.key(topic, partition) in new]
    if fresh:
        send_dead_letters(bootstrap, node, topic, partition, fresh)


def record_key(record, format: str) -> tuple | None:
    """What makes a record the same as an earlier one: a read cycle's (receptor, cycle, time), a
    RowBatch's identity (wire.codec.DecodedBatch.identity)."""
    if format == "rfid":
        return None if is_sensor_batch(record.headers) else cycle_key(record.value)
    return batch_identity(record.value)


# Each partition's recent read cycles (raw topics) or batch identities (views) in this worker
# process, shared by the queries reading it.
_recent: dict[tuple[str, int], RecentCycles] = {}


def recent_keys(bootstrap: str, topic: str, partition: int, start: int, format: str) -> RecentCycles | None:
    """The partition's recent keys (record_key), covering what deciding offsets from `start` on
    needs: what this process has not read yet is read now (a range another worker took: a short
    gap; a cold start or a query far behind the rest: the whole look-back, DUPLICATE_LOOKBACK
    records). None for sensor samples, which have no duplicates to find."""
    if format not in ("rfid", "rows"):
        return None
    recent = _recent.get((topic, partition))
    if recent is None or not recent.serves(start):
        recent = _recent[(topic, partition)] = RecentCycles(max(0, start - DUPLICATE_LOOKBACK))
    for record in read_range(bootstrap, topic, partition, recent.hi, start):
        key = record_key(record, format)
        if key is not None:
            recent.seen(key, record.offset)
    recent.reached(start)
    return recent
