"""A node's constrained uplink (dsp.runtime.uplink) on the real broker: a message of a higher priority
overtakes a flood of lower ones, the link's rate holds, and what waits survives a restart."""

from __future__ import annotations

import time

from dsp.runtime.uplink import BURST_S, Uplink
from tests.conftest import topic_records, wait_for
from wire.kafka import admin

RATE = 20_000   # bytes/s


def test_a_higher_priority_overtakes_a_flood_at_the_links_rate_and_what_waits_survives_a_restart(servers, tmp_path):
    link = f"hifi.test.uplink.{int(time.time() * 1000)}"
    admin.ensure_topics(servers.bootstrap, [link])   # one partition: its order is the order things went
    uplink = Uplink(str(tmp_path / "uplink"), RATE, servers.bootstrap)
    started = time.monotonic()
    for n in range(100):   # 100 KB: five seconds of the link
        uplink.lane(0).send(link, key=f"d{n}".encode(), value=b"x" * 998)
    time.sleep(1.0)
    queued_at = time.monotonic()
    uplink.lane(5).send(link, key=b"alert", value=b"fire at dock 1")
    wait_for(lambda: any(r.key == b"alert" for r in topic_records(servers.bootstrap, link)), 30,
             "the alert through the flood")
    seen_s = time.monotonic() - queued_at
    # what went first by the topic's own order, not by when this test looked: no more than the
    # link could carry until the alert was queued (~1 s of a 5 s flood) and the one in flight then
    keys = [r.key for r in topic_records(servers.bootstrap, link)]
    overtaken = keys.index(b"alert")
    could = RATE * (queued_at - started + BURST_S) / 1000 + 1
    assert overtaken <= could and overtaken < 100, f"{overtaken} detail messages went first (the link: {could:.0f})"
    assert seen_s < 4.0, f"the alert arrived {seen_s:.1f} s after it was queued (the flood's rest takes 4 s)"
    time.sleep(1.0)
    uplink.stop()
    elapsed = time.monotonic() - started
    assert uplink.stats.sent_bytes <= RATE * (elapsed + BURST_S) + 1000, "the link's rate holds"
    assert uplink.queued_bytes()[0] > 0 and uplink.stats.dropped == 0

    again = Uplink(str(tmp_path / "uplink"), 10 * RATE, servers.bootstrap)   # the node started again
    try:
        wait_for(lambda: len({r.key for r in topic_records(servers.bootstrap, link)}) == 101, 20,
                 "what waited sent after the restart")
    finally:
        again.stop()
    keys = list(dict.fromkeys(r.key for r in topic_records(servers.bootstrap, link) if r.key != b"alert"))
    assert keys == [f"d{n}".encode() for n in range(100)], "in order, each once (a repeat is dropped by readers)"
