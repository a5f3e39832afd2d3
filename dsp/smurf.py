"""Adaptive per-tag smoothing in the manner of SMURF (Jeffery, Garofalakis, Franklin, VLDB 2006).
Pure: the state machine of one (reader, tag) pair, epoch by epoch; the DSP runs it per key.

An epoch is `cycles` read cycles of a reader. In epoch t the tag answered in some of them, a
per-epoch read rate p_t = answered / cycles. SMURF treats each epoch of a window as a Bernoulli
trial with the tag's average read rate p (the mean of p_t over the epochs that saw the tag) and
keeps a window of w epochs per tag such that:

- **completeness**: a present tag is read at least once in the window with probability 1 - δ,
  which takes w* = ceil(ln(1/δ) / p) epochs; a window smaller than w* grows toward it, by 2
  epochs at a time (a tag that is read rarely gets a longer window);
- **transitions**: otherwise, when the epochs with reads fall more than two standard deviations
  below what the rate predicts (|S| < w p - 2 sqrt(w p (1 - p))), the tag has most likely left,
  and the window halves (at most to w*), so an absence is reported quickly.

The order (grow, else check for a transition) and the reset of an empty window to one epoch are
the paper's Algorithm 1. The tag is reported present in an epoch when its window holds a read.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field


@dataclass
class TagWindow:
    """One (reader, tag) pair's smoothing state."""

    size: int = 1                                           # w, in epochs
    rates: deque[float] = field(default_factory=deque)      # p_t of the last `max_window` epochs, newest last


def completeness_window(rate: float, delta: float) -> int:
    """w*: epochs needed to read a tag of per-epoch read rate `rate` at least once w.p. 1 - delta."""
    if rate <= 0:
        raise ValueError("a tag never read has no completeness window")
    if rate >= 1:
        return 1
    return max(1, math.ceil(math.log(1 / delta) / rate))


def transition_detected(seen_epochs: int, window: int, rate: float) -> bool:
    """Fewer epochs with reads than a Bernoulli(rate) window of `window` epochs would give, by
    more than two standard deviations."""
    expected = window * rate
    return seen_epochs < expected - 2 * math.sqrt(expected * (1 - rate))


def smurf_step(state: TagWindow, answered: int, cycles: int, delta: float = 0.05,
               max_window: int = 50) -> bool:
    """Advance one epoch in which the tag answered `answered` of `cycles` read cycles; update
    `state` in place and say whether the tag is reported present in this epoch."""
    if not 0 <= answered <= cycles or cycles <= 0:
        raise ValueError(f"answered {answered} of {cycles} read cycles is not possible")
    state.rates.append(answered / cycles)
    while len(state.rates) > max_window:
        state.rates.popleft()
    window = list(state.rates)[-state.size:]
    seen = [p for p in window if p > 0]
    if not seen:
        state.size = 1   # an empty window: absent, and the next sighting starts afresh
        return False
    rate = sum(seen) / len(seen)
    needed = min(completeness_window(rate, delta), max_window)
    if needed > state.size:
        state.size = min(state.size + 2, needed)
    elif transition_detected(len(seen), len(window), rate):
        state.size = max(min(state.size // 2, needed), 1)
    return any(p > 0 for p in list(state.rates)[-state.size:])
