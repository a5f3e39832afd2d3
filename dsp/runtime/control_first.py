"""A node runtime's lock, taken by a control operation (deploy, cancel, suspend) before the next batch.

Every reader's batch holds the runtime's lock while the parts take it in (dsp.runtime.shared); on a busy
node one batch follows another, and Python's lock is not fair: a deploy waited 70 s behind them
(measured: test_queries' 20 submissions at once, a node with five readers, 2 cores). Here a
control operation announces itself; a batch about to start waits until no control operation
waits (at most `yield_s`, so a control operation that itself waits for a batch cannot deadlock).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from dsp.turns import stepping_aside

YIELD_S = 10.0


class ControlFirstLock:
    def __init__(self, yield_s: float = YIELD_S) -> None:
        self.lock = threading.RLock()   # what a Condition over the runtime's state waits on
        self.yield_s = yield_s
        self._waiting = 0
        self._gate = threading.Condition()

    @contextmanager
    def control(self) -> Iterator[None]:
        """Hold the lock for a control operation; batches not yet started wait for it."""
        with self._gate:
            self._waiting += 1
        try:
            with self.lock:
                yield
        finally:
            with self._gate:
                self._waiting -= 1
                self._gate.notify_all()

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Hold the lock for a batch, once no control operation waits for it; a lane that must wait
        steps aside meanwhile (dsp.turns: the other nodes' lanes go on)."""
        with self._gate:
            free = self._waiting == 0
        if not (free and self.lock.acquire(blocking=False)):
            with stepping_aside():
                with self._gate:
                    self._gate.wait_for(lambda: self._waiting == 0, self.yield_s)
                self.lock.acquire()
        try:
            yield
        finally:
            self.lock.release()

    def waiting(self) -> int:
        """Control operations waiting for or holding the lock."""
        with self._gate:
            return self._waiting
