"""Compact histograms of a mote's recent values, one per quantity, that estimate how many of its
samples a threshold keeps (SENSABLE: each receptor's own history). Pure.

Buckets are fixed per quantity (equal widths over the quantity's physical range, one more below
and one above), so a mote, its edge node and the planner agree on them without sending edges. A
mote counts every sample it takes — sent or held back by the sensor proxy, so the history is the
mote's and not what queries let through — and halves its counts as they pass RECENT_SAMPLES, so
older values weigh less and less.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

BUCKETS = 64
# quantity -> (low, high) of its equal-width buckets; a value outside falls in the bucket below
# or above them (BUCKETS + 2 counts in all)
RANGES: dict[str, tuple[float, float]] = {
    "temperature": (-20.0, 108.0), "humidity": (0.0, 128.0), "light": (0.0, 2048.0), "sound": (0.0, 128.0),
    "voltage": (0.0, 4.0), "gas": (0.0, 256.0),
}
RECENT_SAMPLES = 1024   # a histogram whose counts pass this is halved


def bucket_of(quantity: str, value: float) -> int:
    """0 below the range, BUCKETS + 1 above it, else 1..BUCKETS."""
    low, high = RANGES[quantity]
    if value < low:
        return 0
    if value >= high:
        return BUCKETS + 1
    return 1 + min(BUCKETS - 1, int((value - low) / (high - low) * BUCKETS))


def empty() -> list[int]:
    return [0] * (BUCKETS + 2)


def add(counts: list[int], quantity: str, value: float) -> None:
    """Count one sample's value (a value that is not a finite number is not counted)."""
    if not math.isfinite(value):
        return
    counts[bucket_of(quantity, value)] += 1
    if sum(counts) > RECENT_SAMPLES:
        counts[:] = [c // 2 for c in counts]


def fraction(counts: Sequence[int], quantity: str, op: str, value: float) -> float | None:
    """The share of the counted values for which `value_counted op value` holds, assuming values
    spread evenly within a bucket (the buckets below and above the range: at its edges); None
    with nothing counted."""
    total = sum(counts)
    if total == 0:
        return None
    low, high = RANGES[quantity]
    width = (high - low) / BUCKETS
    below = 0.0   # counted values < value
    at = 0.0      # counted values == value (only the edge buckets hold a point mass)
    for bucket, count in enumerate(counts):
        if not count:
            continue
        if bucket == 0 or bucket == BUCKETS + 1:
            edge = low if bucket == 0 else high
            below += count if edge < value else 0
            at += count if edge == value else 0
            continue
        start = low + (bucket - 1) * width
        below += count * min(1.0, max(0.0, (value - start) / width))
    share_below, share_at = below / total, at / total
    return {"<": share_below, "<=": share_below + share_at, ">": 1 - share_below - share_at,
            ">=": 1 - share_below, "=": share_at, "!=": 1 - share_at}[op]
