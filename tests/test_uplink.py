"""A node's constrained uplink (dsp.uplink) on the real broker: a message of a higher priority
overtakes a flood of lower ones, the link's rate holds, and what waits survives a restart."""

from __future__ import annotations

import time

from dsp.uplink import BURST_S, Uplink
from tests.conftest import topic_records, wait_for
from wire import bus

RATE = 20_000   # bytes/s


def test_a_higher_priority_overtakes_a_flood_at_the_links_rate_and_what_waits_survives_a_restart(servers, tmp_path):
    stamp = int(time.time() * 1000)
    detail, alerts = f"hifi.test.uplink.detail.{stamp}", f"hifi.test.uplink.alerts.{stamp}"
    bus.ensure_topics(servers.bootstrap, [detail, alerts])
    uplink = Uplink(str(tmp_path / "uplink"), RATE, servers.bootstrap)
    started, started_at = time.monotonic(), time.time()
    for n in range(100):   # 100 KB: five seconds of the link
        uplink.lane(0).send(detail, key=f"d{n}".encode(), value=b"x" * 998)
    time.sleep(1.0)
    queued_at = time.time()
    uplink.lane(5).send(alerts, key=b"alert", value=b"fire at dock 1")
    alert = wait_for(lambda: topic_records(servers.bootstrap, alerts), 30, "the alert through the flood")[0]
    # what went first by the records' own send times, not by when this test looked (a loaded
    # machine looks late): no more than the link could carry until the alert went (~1 s of a 5 s
    # flood, more when the machine is loaded), one message in flight; and the alert did not wait
    # for the flood (which takes 5 s)
    sent_s = alert.timestamp / 1000
    overtaken = sum(1 for r in topic_records(servers.bootstrap, detail) if r.timestamp < alert.timestamp)
    could = RATE * (sent_s - started_at + BURST_S) / 1000 + 1
    assert overtaken <= could and overtaken < 100, f"{overtaken} detail messages went first (the link: {could:.0f})"
    assert sent_s - queued_at < 3.0, f"the alert went {sent_s - queued_at:.1f} s after it was queued"
    time.sleep(1.0)
    uplink.stop()
    elapsed = time.monotonic() - started
    assert uplink.stats.sent_bytes <= RATE * (elapsed + BURST_S) + 1000, "the link's rate holds"
    assert uplink.queued_bytes()[0] > 0 and uplink.stats.dropped == 0

    again = Uplink(str(tmp_path / "uplink"), 10 * RATE, servers.bootstrap)   # the node started again
    try:
        wait_for(lambda: len({r.key for r in topic_records(servers.bootstrap, detail)}) == 100, 20,
                 "what waited sent after the restart")
    finally:
        again.stop()
    keys = list(dict.fromkeys(r.key for r in topic_records(servers.bootstrap, detail)))
    assert keys == [f"d{n}".encode() for n in range(100)], "in order, each once (a repeat is dropped by readers)"
