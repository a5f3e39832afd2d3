"""dsp.reader_restarts: readers changed in quick succession are restarted once, together."""

from __future__ import annotations

import threading
import time

from dsp.reader_restarts import ReaderRestarts


def test_changes_in_quick_succession_restart_each_reader_once():
    restarted: list[str] = []
    done = threading.Event()

    def restart(key: str) -> None:
        restarted.append(key)
        if len(restarted) >= 2:
            done.set()

    restarts = ReaderRestarts(restart, quiet_s=0.2)
    for _ in range(5):   # a node's start: part after part, the same readers changed each time
        restarts.add({"read:rows:a", "read:rows:b"})
        time.sleep(0.05)
        assert restarted == [], "restarted before the changes stopped"
    assert done.wait(5)
    time.sleep(0.4)
    assert restarted == ["read:rows:a", "read:rows:b"]
    restarts.add({"read:rows:a"})   # a later change restarts again
    deadline = time.monotonic() + 5
    while len(restarted) < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert restarted == ["read:rows:a", "read:rows:b", "read:rows:a"]
    restarts.stop()


def test_a_failed_restart_does_not_stop_the_others_and_stop_drops_what_waits():
    restarted: list[str] = []

    def restart(key: str) -> None:
        if key == "bad":
            raise RuntimeError("no")
        restarted.append(key)

    restarts = ReaderRestarts(restart, quiet_s=10)
    restarts.add({"bad", "good"})
    restarts.flush()
    assert restarted == ["good"]
    restarts.add({"later"})
    restarts.stop()
    time.sleep(0.1)
    assert restarted == ["good"]
