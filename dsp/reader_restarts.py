"""Readers whose topics changed, restarted on their checkpoints together once the changes stop.

A shared reader (dsp.shared) takes a topic added or dropped by stopping its Spark query and
starting it again; a stop waits for the batch in flight and a start plans the query anew, ~1-2 s
on the 2-core machine. A node taking many parts at once — its start, which deploys what it ran
part by part, a query of several parts, a child's views one after another — restarted its reader
once a part; here it restarts each reader once, QUIET_S after the last change.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable

log = logging.getLogger("hifi.dsp")

QUIET_S = 0.3


class ReaderRestarts:
    def __init__(self, restart: Callable[[str], None], quiet_s: float = QUIET_S) -> None:
        self._restart, self.quiet_s = restart, quiet_s
        self._pending: set[str] = set()
        self._quiet_at = 0.0
        self._changed = threading.Condition()
        self._stopped = False
        self._thread: threading.Thread | None = None

    def add(self, keys: Iterable[str]) -> None:
        """Restart these readers once no change has come for quiet_s."""
        keys = set(keys)
        if not keys:
            return
        with self._changed:
            self._pending |= keys
            self._quiet_at = time.monotonic() + self.quiet_s
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="reader-restarts", daemon=True)
                self._thread.start()
            self._changed.notify_all()

    def flush(self) -> None:
        """Restart what waits now, in this thread."""
        with self._changed:
            keys, self._pending = self._pending, set()
        self._restart_all(keys)

    def stop(self) -> None:
        """What waits is left (the readers stop with the node; each starts anew with it)."""
        with self._changed:
            self._stopped, self._pending = True, set()
            self._changed.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=60)

    def _run(self) -> None:
        while True:
            with self._changed:
                while not self._stopped and (not self._pending or time.monotonic() < self._quiet_at):
                    self._changed.wait(max(0.0, self._quiet_at - time.monotonic()) if self._pending else None)
                if self._stopped:
                    return
                keys, self._pending = self._pending, set()
            self._restart_all(keys)

    def _restart_all(self, keys: set[str]) -> None:
        for key in sorted(keys):
            try:
                self._restart(key)
            except Exception:  # noqa: BLE001 - one reader's failed start must not stop the others'
                log.exception("restarting reader %s failed", key)
