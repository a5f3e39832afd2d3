"""Window arithmetic every tier agrees on (DESIGN §5, §7): windows, their panes, durations. Pure.

A window of range R sliding by S (aligned to the epoch) is the union of the tumbling panes of
size gcd(R, S) it covers, so children emit panes and the parent assembles windows from them; a
view whose rows are W-windows can feed any window whose range and slide are multiples of W.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from dataclasses import dataclass

from wire.errors import HiFiError


class WindowError(HiFiError):
    """A window whose range or slide is not positive, or slides further than it reaches."""


class DurationError(HiFiError):
    """A duration that cannot be read ('5 seconds', '500 ms', '2 minutes')."""


@dataclass(frozen=True)
class Window:
    range_ms: int
    slide_ms: int  # == range_ms for a tumbling window

    def __post_init__(self) -> None:
        if self.range_ms <= 0 or self.slide_ms <= 0:
            raise WindowError(f"window range and slide must be positive (got {self.range_ms}, {self.slide_ms} ms)")
        if self.slide_ms > self.range_ms:
            raise WindowError(f"window slide {self.slide_ms} ms exceeds its range {self.range_ms} ms")

    def describe(self) -> str:
        if self.slide_ms == self.range_ms:
            return f"tumbling {self.range_ms / 1000:g}s"
        return f"range {self.range_ms / 1000:g}s slide {self.slide_ms / 1000:g}s"


def pane_of(window: Window) -> Window:
    """The tumbling pane every window of `window` is made of."""
    size = math.gcd(window.range_ms, window.slide_ms)
    return Window(size, size)


def window_starts(t_ms: int, window: Window) -> range:
    """Starts of every window of `window` that holds time `t_ms`: s <= t < s + R, s a multiple of S."""
    first = (t_ms - window.range_ms) // window.slide_ms * window.slide_ms + window.slide_ms
    return range(first, t_ms // window.slide_ms * window.slide_ms + 1, window.slide_ms)


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*"
                       r"(ms|milliseconds?|s|secs?|seconds?|m|mins?|minutes?|h|hours?|d|days?)\s*$")
_UNIT_MS = {"ms": 1, "milli": 1, "s": 1000, "sec": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000,
            "hour": 3_600_000, "d": 86_400_000}


def duration_ms(text: str | int | float) -> int:
    """'5 seconds' -> 5000; a bare number is seconds."""
    if isinstance(text, int | float):
        return int(text * 1000)
    match = _DURATION.match(str(text))
    if not match:
        raise DurationError(f"not a duration: {text!r} (write e.g. '500 ms', '5 seconds', '2 minutes')")
    value, unit = float(match.group(1)), match.group(2)
    for prefix in ("milli", "ms", "hour", "min", "sec", "h", "m", "s", "d"):
        if unit.startswith(prefix):
            return int(value * _UNIT_MS[prefix])
    raise DurationError(f"not a duration: {text!r}")


def time_at(text: str, now_ms: int, ago: bool) -> int:
    """Epoch ms of a time a user gives (`--since`, `--until`): a UTC ISO 8601 time (a zone or
    offset allowed), or a duration before now (`ago`) or after it."""
    try:
        at = dt.datetime.fromisoformat(text.strip())
        at_ms = int((at if at.tzinfo else at.replace(tzinfo=dt.UTC)).timestamp() * 1000)
    except ValueError:
        try:
            span = duration_ms(text)
        except DurationError:
            raise DurationError(f"{text[:60]!r} is neither a time (2026-11-25T19:00:00) nor a duration "
                                f"('10 minutes')") from None
        at_ms = now_ms - span if ago else now_ms + span
    if not 0 <= at_ms <= LATEST_MS:
        raise DurationError(f"{text[:60]!r} is {'before 1970' if at_ms < 0 else 'after the year 9999'}")
    return at_ms


LATEST_MS = 253_402_300_799_999   # 9999-12-31T23:59:59.999Z: the latest time a query can name
