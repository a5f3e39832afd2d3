"""The lanes of a process's stream take turns: one runs at a time, and one that must wait for its
node (a deploy or cancel goes first: dsp.runtime.control_first) steps aside meanwhile.

A lane's Python work is many small pyarrow calls, and each gives the interpreter's lock up and
takes it back; lanes running at once queue for it at every call and pay for the switching.
Measured on the 2-core machine (2026-11-28), the 32 doors under one warehouse in one `hifi up`:
four lanes at once 114.8 ms of wall and 15.9 ms of CPU a lane, the process's batch 1.29 s; one
at a time on one thread 18.4 ms and 9.8 ms, the batch 0.69 s; one at a time but each on a thread
of its own, handed over by a semaphore, 0.89 s (each hand-over waits for the interpreter's
switch). Hence one thread runs a batch's lanes in turn, and another starts only when a lane
steps aside.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

_held = threading.local()   # (the Turns whose turn this thread holds, what to do when it steps aside)


class Turns:
    """Turns of `at_once` lanes at a time."""

    def __init__(self, at_once: int = 1) -> None:
        self._slots = threading.Semaphore(at_once)

    @contextmanager
    def taking(self, when_aside: Callable[[], object] = lambda: None) -> Iterator[None]:
        """Run the block in a turn; `when_aside` is called when it steps aside (another thread may
        serve the lanes waiting meanwhile: dsp.runtime.process_stream)."""
        with self._slots:
            _held.turn = (self, when_aside)
            try:
                yield
            finally:
                _held.turn = None


@contextmanager
def stepping_aside() -> Iterator[None]:
    """The thread's turn, if it holds one, given up while the block waits, and taken back after."""
    held: tuple[Turns, Callable[[], object]] | None = getattr(_held, "turn", None)
    if held is None:
        yield
        return
    turns, when_aside = held
    _held.turn = None
    turns._slots.release()
    when_aside()
    try:
        yield
    finally:
        turns._slots.acquire()
        _held.turn = held
