"""Store-and-forward (wire.spool, edge.outbox): the spool on disk alone, then an outbox on the
real broker frozen for seconds in the middle of a stream: every record arrives once the broker is
back, in order, with the time it was first sent."""

from __future__ import annotations

import threading
import time

import pytest

from edge.outbox import PRODUCER_TIMEOUTS, Outbox
from tests.conftest import topic_records, wait_for
from wire.kafka import admin, producers
from wire.spool import Spool, SpooledRecord


def record(n: int, topic: str = "t") -> SpooledRecord:
    return SpooledRecord(topic, f"k{n}".encode(), bytes([n % 256]) * (n % 50), [("hifi-type", b"x")], 1_000 + n)


def test_the_spool_keeps_records_in_order_across_a_restart_and_refuses_past_its_bound(tmp_path):
    spool = Spool(str(tmp_path), max_bytes=10_000)
    assert all(spool.put(record(n)) for n in range(40))
    records, ends = spool.head(25)
    assert records == [record(n) for n in range(25)]
    spool.advance(ends[9])
    again = Spool(str(tmp_path), max_bytes=10_000)   # an agent started again on the directory
    records, ends = again.head(1_000)
    assert records == [record(n) for n in range(10, 40)]
    again.advance(ends[-1])
    assert again.pending_bytes() == 0 and not list(tmp_path.iterdir()), "an empty spool leaves no files"
    small = Spool(str(tmp_path), max_bytes=len(record(1).encode()) * 3)
    assert [small.put(record(1)) for _ in range(5)] == [True, True, True, False, False]
    assert small.dropped == 2, "the newest are refused and counted; the oldest stay"


def test_records_sent_while_the_broker_is_unreachable_arrive_in_order_once_it_is_back(servers, tmp_path):
    if not servers.workdir:
        pytest.skip("an external broker is not ours to freeze")
    topic = f"hifi.test.outbox.{int(time.time() * 1000)}"
    admin.ensure_topics(servers.bootstrap, [topic])
    producer = producers.make_producer(servers.bootstrap, **PRODUCER_TIMEOUTS)
    outbox = Outbox(producer, Spool(str(tmp_path), 1 << 20))
    sent: list[SpooledRecord] = []

    def ticks(first: int, count: int) -> None:
        for n in range(first, first + count):
            tick = [SpooledRecord(topic, f"{n}:{i}".encode(), f"{n}:{i}".encode(), [], int(time.time() * 1000))
                    for i in range(3)]
            outbox.send(tick)
            sent.extend(tick)
            time.sleep(0.1)

    try:
        ticks(0, 10)
        servers.freeze_broker()
        thawed = threading.Timer(6.0, servers.thaw_broker)
        thawed.start()
        ticks(10, 40)   # about 4 s inside the outage, the rest after it
        thawed.join()
        wait_for(lambda: (outbox.forward(), not outbox.spool.pending_bytes())[1], 30, "the spool forwarded")
    finally:
        servers.thaw_broker()
        producer.close(timeout=5)
    assert outbox.stats.outages >= 1 and outbox.stats.spooled > 0, "the outage was met and spooled"
    assert outbox.stats.forwarded == outbox.stats.spooled and outbox.stats.dropped == 0
    arrived = topic_records(servers.bootstrap, topic)
    # the order holds (a repeat of what the broker took during a failed forward may follow)
    firsts = list(dict.fromkeys(r.value for r in arrived))
    assert firsts == [r.value for r in sent], "every record, in the order it was sent"
    stamped = {r.value: r.timestamp_ms for r in sent}
    assert all(r.timestamp == stamped[r.value] for r in arrived), "each keeps the time it was first sent"
