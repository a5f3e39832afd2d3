"""dsp.runtime.control_first: a control operation takes the runtime's lock before the next batch."""

import threading
import time

from dsp.runtime.control_first import ControlFirstLock


def _batches(locks: ControlFirstLock, stop: threading.Event, held: list[float]) -> None:
    while not stop.is_set():
        with locks.batch():
            time.sleep(0.05)   # a batch holding the lock, one after another
            held.append(time.monotonic())


def test_a_control_operation_goes_before_the_next_batch_of_busy_readers():
    locks, stop, held = ControlFirstLock(), threading.Event(), []
    readers = [threading.Thread(target=_batches, args=(locks, stop, held)) for _ in range(3)]
    for reader in readers:
        reader.start()
    try:
        time.sleep(0.2)
        waits = []
        for _ in range(20):
            asked = time.monotonic()
            with locks.control():
                waits.append(time.monotonic() - asked)
                batches_before = len(held)
                time.sleep(0.01)
                assert len(held) == batches_before, "a batch ran while the control operation held the lock"
        # at most the batch in flight (and one that had passed the gate) before it
        assert max(waits) < 0.5, waits
        assert locks.waiting() == 0
    finally:
        stop.set()
        for reader in readers:
            reader.join()
    assert len(held) > 3, "the batches went on between control operations"


def test_a_batch_waits_for_a_control_operation_no_longer_than_its_yield():
    locks = ControlFirstLock(yield_s=0.2)
    inside = threading.Event()
    release = threading.Event()

    def control():
        with locks.control():
            inside.set()
            release.wait(2)

    holder = threading.Thread(target=control)
    holder.start()
    inside.wait(2)
    asked = time.monotonic()
    threading.Timer(0.5, release.set).start()
    with locks.batch():   # waits its yield, then for the lock itself
        waited = time.monotonic() - asked
    holder.join()
    assert 0.4 < waited < 2
