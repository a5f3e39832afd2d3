"""Fault injection points: where a drill (`hifi bench chaos`) or a recovery test makes a node
fail at the worst moment, to prove what it does when it comes back.

In a node process, `HIFI_FAULT="<point>@<epoch ms>"` makes the process die (exit code
FAULT_EXIT, no clean-up, as a kill would) the first time it passes `<point>` at or after that
time, if it started before it: the process its supervisor starts again, with the same
environment, runs on. In a process shared with other nodes (a test's hierarchy), `arm(point)`
makes the next pass raise InjectedFault instead, which the runtime meets as it meets a crash.
"""

from __future__ import annotations

import os
import threading
import time

AFTER_FLUSH = "after-flush"   # a micro-batch's rows delivered to Kafka, its fence not yet written
FAULT_EXIT = 86

_STARTED_MS = 0
_ENV_POINT, _ENV_AT_MS = "", 0


def from_environment() -> None:
    """Read HIFI_FAULT, this process counting as started now: at import, and again when a warm
    spare process is given the node it becomes (services.supervisor)."""
    global _STARTED_MS, _ENV_POINT, _ENV_AT_MS
    _STARTED_MS = int(time.time() * 1000)
    _ENV_POINT, _, at = os.environ.get("HIFI_FAULT", "").partition("@")
    _ENV_AT_MS = int(at) if at.isdigit() else 0   # malformed: no fault


from_environment()
_armed: dict[str, int] = {}
_where: dict[str, str] = {}
_lock = threading.Lock()


class InjectedFault(RuntimeError):
    """A failure a test asked for at a fault point."""


def arm(point: str, times: int = 1, where: str = "") -> None:
    """Make the next `times` passes of `point` in this process raise InjectedFault (only those
    at site `where`, when given: a node's id)."""
    with _lock:
        _armed[point] = _armed.get(point, 0) + times
        _where[point] = where


def armed(point: str) -> int:
    """How many passes of `point` are still to fail."""
    return _armed.get(point, 0)


def crash_point(point: str, site: str = "") -> None:
    """A place where failing is worst; does nothing unless a fault is set for it. `site`: where
    in the process it is passed (for `arm`'s `where`)."""
    if _armed.get(point) and _where.get(point, "") in ("", site):
        with _lock:
            _armed[point] -= 1
        raise InjectedFault(f"fault injected at {point} ({site})")
    if _ENV_POINT == point and _STARTED_MS < _ENV_AT_MS <= int(time.time() * 1000):
        os._exit(FAULT_EXIT)
