"""The data plane's Kafka client helpers (kafka-python): topics, producers, offset ranges.

Topic names are built by wire.topics (DESIGN §3), never by hand.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from confluent_kafka import KafkaException
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.errors import KafkaError, KafkaTimeoutError, TopicAlreadyExistsError

if TYPE_CHECKING:
    from wire.rd_producer import RdProducer


CLIENT_VARIABLES = ("HIFI_KAFKA_USERNAME", "HIFI_KAFKA_PASSWORD", "HIFI_KAFKA_CA")   # what client_security reads


def client_security(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """SASL/SCRAM settings of every client of this process, from HIFI_KAFKA_USERNAME and
    HIFI_KAFKA_PASSWORD (compose's broker takes no other client; services.kafka_acls says what each
    user may do), over TLS checked against the CA file HIFI_KAFKA_CA names, if any (as compose and
    the embedded broker do: services.embedded sets them); none without a user (a PLAINTEXT broker).

    >>> client_security({"HIFI_KAFKA_USERNAME": "agents", "HIFI_KAFKA_PASSWORD": "p", "HIFI_KAFKA_CA": "/t/ca.pem"})
    ... # doctest: +NORMALIZE_WHITESPACE
    {'security_protocol': 'SASL_SSL', 'sasl_mechanism': 'SCRAM-SHA-512', 'sasl_plain_username': 'agents',
     'sasl_plain_password': 'p', 'ssl_cafile': '/t/ca.pem'}
    >>> client_security({"HIFI_KAFKA_USERNAME": "agents"})["security_protocol"], client_security({})
    ('SASL_PLAINTEXT', {})
    """
    environ = os.environ if environ is None else environ
    user, ca = environ.get("HIFI_KAFKA_USERNAME", ""), environ.get("HIFI_KAFKA_CA", "")
    if not user:
        return {}
    return {"security_protocol": "SASL_SSL" if ca else "SASL_PLAINTEXT", "sasl_mechanism": "SCRAM-SHA-512",
            "sasl_plain_username": user, "sasl_plain_password": environ.get("HIFI_KAFKA_PASSWORD", ""),
            **({"ssl_cafile": ca} if ca else {})}


def ensure_topics(bootstrap: str, topics: Sequence[str], partitions: int = 1) -> None:
    """Create the topics that do not exist yet (idempotent)."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="hifi-admin", **client_security())
    try:
        existing = set(admin.list_topics())
        missing = [t for t in dict.fromkeys(topics) if t not in existing]
        if missing:
            with contextlib.suppress(TopicAlreadyExistsError):
                admin.create_topics([NewTopic(t, partitions, 1) for t in missing])
    finally:
        admin.close()


def delete_topics(bootstrap: str, topics: Sequence[str]) -> list[str]:
    """Delete those of `topics` that exist; those of `topics` gone now (deleted, or there was none).
    Raises KafkaError when the broker refuses or cannot be reached."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="hifi-admin", **client_security())
    try:
        existing = set(admin.list_topics())
        present = [t for t in dict.fromkeys(topics) if t in existing]
        with _clients_lock:   # this process's writers forget them (other processes' nodes did at the cancel)
            local = [p for address, p in _producers.items() if address == bootstrap]
        for producer in local:
            forget_topics(producer, present)
        if present:
            admin.delete_topics(present)
        return list(dict.fromkeys(topics))
    finally:
        admin.close()


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
        producer.forget(list(topics))   # librdkafka's (wire.rd_producer): its next send checks the topic
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
        with _clients_lock:   # a shared producer that lost messages is replaced, not trusted again
            for key in [k for k, p in _producers.items() if p is producer]:
                del _producers[key]
        producer.close(timeout=0)
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


def make_consumer(bootstrap: str, **overrides) -> KafkaConsumer:
    # Manual assignment only: a group join costs ~20 s on the embedded broker (DESIGN §11).
    return KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None,
                         max_partition_fetch_bytes=8 * 1024 * 1024, fetch_max_bytes=64 * 1024 * 1024,
                         **{**client_security(), **overrides})


# One client of each kind per bootstrap per process: Spark reuses Python workers across tasks.
_consumers: dict[str, KafkaConsumer] = {}
_producers: dict[str, KafkaProducer | RdProducer] = {}
_clients_lock = threading.Lock()


def _shared(clients: dict, bootstrap: str, make: Callable[[str], Any]) -> Any:
    with _clients_lock:
        client = clients.get(bootstrap)
        if client is None:
            client = clients[bootstrap] = make(bootstrap)
        return client


def drop_clients(bootstrap: str) -> None:
    """Close and forget this process's shared clients of `bootstrap` and what they learned (its
    broker is gone: an embedded one stopped). A benchmark runs hierarchy after hierarchy in one
    process, each on a broker of its own; the clients of the ones before kept retrying theirs."""
    with _clients_lock:
        clients = [cache.pop(bootstrap) for cache in (_producers, _consumers) if bootstrap in cache]
    for client in clients:
        with contextlib.suppress(Exception):   # a client of a dead broker: nothing to flush
            client.close() if isinstance(client, KafkaConsumer) else client.close(timeout=0)


def shared_consumer(bootstrap: str) -> KafkaConsumer:
    return _shared(_consumers, bootstrap, make_consumer)


def shared_producer(bootstrap: str) -> RdProducer:
    """The process's producer of `bootstrap` for its nodes' batches (librdkafka: wire.rd_producer)."""
    from wire.rd_producer import RdProducer

    return _shared(_producers, bootstrap, RdProducer)


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
    same few topics again and again (wire.range_fetch's owners). A paused topic deleted meanwhile
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


def read_range(consumer: KafkaConsumer, tp: TopicPartition, start: int, end: int,
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


def read_ranges(consumer: KafkaConsumer, ranges: Mapping[TopicPartition, tuple[int, int]],
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
        return sum(len(r.key or b"") + len(r.value or b"") for tp in tps for r in read_range(consumer, tp, 0, ends[tp]))
    finally:
        consumer.close()


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
