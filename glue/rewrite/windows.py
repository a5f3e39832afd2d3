"""Rewrite rule: window algebra for pane partials (DESIGN §7). Pure.

A window of range R sliding by S (aligned to the epoch) is the union of the tumbling panes of
size gcd(R, S) it covers, so children emit panes and the parent assembles windows from them; a
view whose rows are W-windows can feed any window whose range and slide are multiples of W.
"""

from __future__ import annotations

import math

from dsp.plan import Window


def pane_of(window: Window) -> Window:
    """The tumbling pane every window of `window` is made of."""
    size = math.gcd(window.range_ms, window.slide_ms)
    return Window(size, size)


def window_starts(t_ms: int, window: Window) -> range:
    """Starts of every window of `window` that holds time `t_ms`: s <= t < s + R, s a multiple of S."""
    first = (t_ms - window.range_ms) // window.slide_ms * window.slide_ms + window.slide_ms
    return range(first, t_ms // window.slide_ms * window.slide_ms + 1, window.slide_ms)
