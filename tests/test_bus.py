"""The Kafka client helpers against a real broker of their own (it is stopped mid-test)."""

import time
from collections import deque

import pytest

from services.embedded import start_broker
from tests.conftest import topic_names
from wire.kafka import admin, clients, consumers, producers


def stop(proc) -> None:
    """The broker gone at once (SIGKILL: a controlled shutdown takes seconds and proves nothing here)."""
    if proc.poll() is None:
        proc.kill()
        proc.wait(10)


@pytest.fixture()
def own_broker(tmp_path, monkeypatch):
    """An embedded broker of the test's own, this process's clients its admin while the test runs."""
    broker = start_broker(str(tmp_path))
    for key, value in broker.client_environment().items():
        monkeypatch.setenv(key, value)
    yield broker
    stop(broker.proc)


def test_deliver_raises_for_messages_the_broker_never_took(own_broker):
    bootstrap, proc = own_broker.bootstrap, own_broker.proc
    try:
        admin.ensure_topics(bootstrap, ["t"])
        producer = producers.make_producer(bootstrap, request_timeout_ms=1000, delivery_timeout_ms=2000, retries=1)
        producers.deliver(producer, [producer.send("t", b"taken")])       # a live broker takes it: no error
    finally:
        stop(proc)
    futures = [producer.send("t", b"lost 1"), producer.send("t", b"lost 2")]
    with pytest.raises(producers.DeliveryError, match="2 of 2 messages not delivered"):
        producers.deliver(producer, futures)
    producer.close(timeout=1)


def test_the_nodes_librdkafka_producer_delivers_in_order_and_raises_for_what_the_broker_never_took(own_broker):
    """wire.kafka.rd_producer behind producers.deliver: its futures read as kafka-python's do."""
    from wire.kafka.ranges import read_range
    from wire.kafka.rd_producer import RdProducer

    bootstrap, proc = own_broker.bootstrap, own_broker.proc
    producer = RdProducer(bootstrap, **{"message.timeout.ms": 2000})
    try:
        admin.ensure_topics(bootstrap, ["t"])
        sent = [producer.send("t", f"m{i}".encode(), key=b"k", headers=[("h", b"1")], timestamp_ms=1_000 + i)
                for i in range(5)]
        producers.deliver(producer, sent)
        assert all(f.is_done and f.succeeded() and not f.failed() for f in sent)
        records = list(read_range(bootstrap, "t", 0, 0, 5))
        assert [(r.value, r.key, r.timestamp, r.headers) for r in records] == [
            (f"m{i}".encode(), b"k", 1_000 + i, [("h", b"1")]) for i in range(5)]
    finally:
        stop(proc)
    futures = [producer.send("t", b"lost 1"), producer.send("t", b"lost 2")]
    with pytest.raises(producers.DeliveryError, match="2 of 2 messages not delivered"):
        producers.deliver(producer, futures)
    assert producer.closed and all(f.failed() for f in futures)
    with pytest.raises(Exception, match="closed"):
        producer.send("t", b"after")


def test_the_librdkafka_producer_does_not_make_a_deleted_topic_again_and_makes_it_at_its_next_send(own_broker):
    """librdkafka asks about every topic it wrote at each refresh; the embedded broker makes a topic
    it is asked about. A deleted part's topic stays deleted; a part that writes it again has it."""
    from wire.kafka.rd_producer import RdProducer

    bootstrap, proc = own_broker.bootstrap, own_broker.proc
    producer = RdProducer(bootstrap, **{"topic.metadata.refresh.interval.ms": 500})
    try:
        admin.ensure_topics(bootstrap, ["kept", "gone"])
        producers.deliver(producer, [producer.send("kept", b"1"), producer.send("gone", b"2")])
        producers.forget_topics(producer, ["gone"])
        assert clients.delete_topics(bootstrap, ["gone"]) == ["gone"]
        time.sleep(2)   # refreshes come and go
        assert "gone" not in topic_names(bootstrap)
        producers.deliver(producer, [producer.send("gone", b"3"), producer.send("kept", b"4")])
        assert "gone" in topic_names(bootstrap)
    finally:
        producer.close(timeout=1)
        stop(proc)


def test_a_producer_that_forgot_a_deleted_topic_does_not_ask_the_broker_about_it_for_ever(own_broker):
    """kafka-python's sender keeps every partition it ever wrote and, once one has no leader (its
    topic deleted: a cancelled query's), asks for metadata every 100 ms for ever (a full core in the
    suite). A node forgets its part's topic at the cancel; the deletion comes a minute later."""
    bootstrap, proc = own_broker.bootstrap, own_broker.proc
    admin.ensure_topics(bootstrap, ["kept", "gone"])   # before the producer: it learns them among all topics
    producer = producers.make_producer(bootstrap, metadata_max_age_ms=500)   # the refresh that finds it gone, soon
    try:
        producers.deliver(producer, [producer.send("kept", b"1"), producer.send("gone", b"2")])
        assert {tp.topic for tp in producer._accumulator._batches} == {"kept", "gone"}
        producers.forget_topics(producer, ["gone"])
        assert {tp.topic for tp in producer._accumulator._batches} == {"kept"}   # a live topic's entry stays
        assert clients.delete_topics(bootstrap, ["gone"]) == ["gone"]
        time.sleep(2)   # refreshes come and go
        assert not producer._metadata._need_update and "gone" not in {tp.topic for tp in producer._accumulator._batches}
        producers.deliver(producer, [producer.send("kept", b"3")])   # the others are written as before
    finally:
        producer.close(timeout=1)
        stop(proc)


def test_a_producer_keeps_asking_about_a_topic_it_wrote_while_it_knew_every_topic(own_broker):
    """kafka-python's first metadata holds every topic; a topic first written then was never
    tracked, and the next refresh lost its leader: its sender asked for metadata in a busy loop."""
    from kafka import TopicPartition

    bootstrap, proc = own_broker.bootstrap, own_broker.proc
    admin.ensure_topics(bootstrap, ["early"])
    producer = producers.make_producer(bootstrap, metadata_max_age_ms=500)
    try:
        deadline = time.monotonic() + 10
        while producer._metadata.partitions_for_topic("early") is None and time.monotonic() < deadline:
            producer._metadata.request_update()   # the producer's first metadata: every topic
            time.sleep(0.05)
        producers.deliver(producer, [producer.send("early", b"1")])
        admin.ensure_topics(bootstrap, ["later"])   # unknown to that metadata: tracked from its first send
        producers.deliver(producer, [producer.send("later", b"2")])
        time.sleep(2)   # refreshes of the topics it tracks come and go
        assert producer._metadata.leader_for_partition(TopicPartition("early", 0)) not in (None, -1)
        assert not producer._metadata._need_update
    finally:
        producer.close(timeout=1)
        stop(proc)


def test_a_producer_keeps_a_partition_a_send_is_appending_to():
    """kafka-python's append takes a partition's queue under its lock, lets go, and adds the new
    batch to that queue under the lock again: dropping the queue in between would lose the batch
    (it waits unsent, then expires). No broker: the accumulator alone."""
    from kafka import TopicPartition

    producer = producers.make_producer("127.0.0.1:9", api_version=(2, 5))   # nothing listens: nothing is sent
    try:
        accumulator = producer._accumulator
        gone, live = TopicPartition("gone", 0), TopicPartition("live", 0)
        accumulator._batches[gone], accumulator._batches[live] = deque(), deque()
        accumulator._appends_in_progress.increment()   # a send between taking the queue and adding to it
        producers.forget_topics(producer, ["gone"])
        assert {gone, live} <= set(accumulator._batches)   # nothing dropped while a send appends
        accumulator._appends_in_progress.decrement()
        producers.forget_topics(producer, ["gone"])
        assert gone not in accumulator._batches and live in accumulator._batches   # only the topic named
    finally:
        producer.close(timeout=0)


def test_stopping_an_embedded_broker_closes_this_processs_clients_of_it(own_broker):
    """A benchmark runs hierarchy after hierarchy in one process, each on an embedded broker of its
    own: the clients of a stopped one are closed and forgotten (left, the next hierarchy's first
    view batch expired after 20 s in 4 sharing runs of 5; none in 2 runs with this)."""
    from services.embedded import EmbeddedServers

    bootstrap, proc = own_broker.bootstrap, own_broker.proc
    admin.ensure_topics(bootstrap, ["t"])
    producer, consumer = clients.shared_producer(bootstrap), clients.shared_consumer(bootstrap)
    producers.deliver(producer, [producer.send("t", b"x")])
    assert consumers.end_offsets(consumer, consumers.partitions_of(consumer, ["t"]))
    EmbeddedServers(bootstrap=bootstrap, broker=own_broker, _procs=[proc]).stop()
    assert bootstrap not in clients._producers and bootstrap not in clients._consumers
    assert producer.closed


def test_an_end_watch_follows_the_ends_of_the_partitions_it_is_asked_about(servers):
    """wire.kafka.end_watch against the broker: the ends it reports are every partition's true end (the
    next offset: a reader's range stops there), as records are appended in batches of several
    (where the embedded broker's ListOffsets answers otherwise); a partition no longer asked about
    is dropped, and one asked about again is asked of the broker afresh."""
    from wire.kafka.end_watch import EndWatch

    topics = [f"watch.t{i}.{time.time_ns()}" for i in range(3)]
    admin.ensure_topics(servers.bootstrap, topics)
    producer, consumer = producers.make_producer(servers.bootstrap), consumers.make_consumer(servers.bootstrap)
    producers.deliver(producer, [producer.send(topics[0], b"before") for _ in range(3)])   # before it watches
    tps = consumers.partitions_of(consumer, topics)
    watch = EndWatch(servers.bootstrap)
    try:
        assert watch.ends(tps) == {tps[0]: 3, tps[1]: 0, tps[2]: 0}
        sends = [producer.send(topics[0], b"a") for _ in range(4)] + [producer.send(topics[2], b"b")]
        producers.deliver(producer, sends)
        deadline = time.monotonic() + 10
        while watch.ends(tps) != {tps[0]: 7, tps[1]: 0, tps[2]: 1} and time.monotonic() < deadline:
            time.sleep(0.05)
        assert watch.ends(tps) == {tps[0]: 7, tps[1]: 0, tps[2]: 1}
        assert watch.ends(tps[1:]) == {tps[1]: 0, tps[2]: 1}   # the first no longer followed
        producers.deliver(producer, [producer.send(topics[0], b"c")])
        assert watch.ends(tps) == {tps[0]: 8, tps[1]: 0, tps[2]: 1}   # asked afresh: its end now
    finally:
        watch.close()
        producer.close()
        consumer.close()


def test_a_tail_reads_a_topic_made_after_it_began(servers):
    """A view's topic is made at its first write, and a consumer's metadata request makes none:
    a tail that began before (a results follower, the dashboard) reads it once it is made."""
    import threading

    early, late = f"tail.early.{time.time_ns()}", f"tail.late.{time.time_ns()}"
    admin.ensure_topics(servers.bootstrap, [early])
    stop, got = threading.Event(), []
    def follow() -> None:
        got.extend(r.value for r in consumers.tail(servers.bootstrap, [early, late], stop))

    follower = threading.Thread(target=follow, daemon=True)
    follower.start()
    time.sleep(1.5)   # the tail runs with `late` not made yet
    producer = producers.make_producer(servers.bootstrap)
    producers.deliver(producer, [producer.send(late, b"made later"), producer.send(early, b"there before")])
    deadline = time.monotonic() + 15
    while len(got) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    stop.set()
    follower.join(5)
    producer.close()
    assert sorted(got) == [b"made later", b"there before"]
