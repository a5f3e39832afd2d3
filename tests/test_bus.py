"""The Kafka client helpers against a real broker of their own (it is stopped mid-test)."""

import time
from collections import deque

import pytest

from services.embedded import _stop, start_broker
from wire import bus


def test_deliver_raises_for_messages_the_broker_never_took(tmp_path):
    bootstrap, proc = start_broker(str(tmp_path))
    try:
        bus.ensure_topics(bootstrap, ["t"])
        producer = bus.make_producer(bootstrap, request_timeout_ms=1000, delivery_timeout_ms=2000, retries=1)
        bus.deliver(producer, [producer.send("t", b"taken")])       # a live broker takes it: no error
    finally:
        _stop(proc)
    futures = [producer.send("t", b"lost 1"), producer.send("t", b"lost 2")]
    with pytest.raises(bus.DeliveryError, match="2 of 2 messages not delivered"):
        bus.deliver(producer, futures)
    producer.close(timeout=1)


def test_a_producer_forgets_a_deleted_topic_instead_of_asking_the_broker_about_it_for_ever(tmp_path):
    """kafka-python's sender keeps every partition it ever wrote and, once one has no leader (its
    topic deleted: a cancelled query's), asks for metadata every 100 ms for ever (a full core in the
    suite); HiFi's producers drop such a partition when it holds nothing to send. (A producer that
    asked for the topic by name instead has the embedded broker make it again, empty.)"""
    bootstrap, proc = start_broker(str(tmp_path))
    bus.ensure_topics(bootstrap, ["kept", "gone"])   # before the producer: it learns them among all topics
    producer = bus.make_producer(bootstrap, metadata_max_age_ms=500)   # the refresh that finds it gone, soon
    try:
        bus.deliver(producer, [producer.send("kept", b"1"), producer.send("gone", b"2")])
        assert {tp.topic for tp in producer._accumulator._batches} == {"kept", "gone"}
        assert bus.delete_topics(bootstrap, ["gone"]) == ["gone"]
        deadline = time.monotonic() + 15
        while "gone" in {tp.topic for tp in producer._accumulator._batches} or producer._metadata._need_update:
            assert time.monotonic() < deadline, "the producer still tracks the deleted topic"
            time.sleep(0.2)
        bus.deliver(producer, [producer.send("kept", b"3")])   # the others are written as before
    finally:
        producer.close(timeout=1)
        _stop(proc)


def test_a_producer_keeps_a_partition_a_send_is_appending_to():
    """kafka-python's append takes a partition's queue under its lock, lets go, and adds the new
    batch to that queue under the lock again: dropping the queue in between would lose the batch
    (it waits unsent, then expires). No broker: the accumulator and its metadata alone."""
    from kafka import TopicPartition

    producer = bus.make_producer("127.0.0.1:9", api_version=(2, 5))   # nothing listens: nothing is sent
    try:
        accumulator, cluster = producer._accumulator, producer._metadata
        gone, sending = TopicPartition("gone", 0), TopicPartition("sending", 0)
        accumulator._batches[gone], accumulator._batches[sending] = deque(), deque()   # no leader known for either
        accumulator._appends_in_progress.increment()   # a send between taking the queue and adding to it
        assert accumulator.ready(cluster)[2]   # unknown leaders: the accumulator says so
        assert {gone, sending} <= set(accumulator._batches)   # nothing dropped while a send appends
        accumulator._appends_in_progress.decrement()
        accumulator.ready(cluster)
        assert not {gone, sending} & set(accumulator._batches)   # no send: empty and leaderless, dropped
    finally:
        producer.close(timeout=0)
