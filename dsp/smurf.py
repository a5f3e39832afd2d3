"""Per-tag smoothing of RFID presence over epochs: SMURF's adaptive window (Jeffery, Garofalakis,
Franklin, VLDB 2006) and the fixed window it is measured against. Pure: the state machine of one
(reader, tag) pair, epoch by epoch; the DSP runs it per key.

An epoch is `cycles` read cycles of a reader. In epoch t the tag answered in some of them,
p_t = answered / cycles. SMURF keeps a window of w epochs per tag such that:

- **completeness**: a present tag is read at least once in the window with probability 1 - δ;
  a window smaller than the w* that takes grows toward it, 2 epochs at a time (a tag that is
  read rarely gets a longer window);
- **transitions**: otherwise, when the epochs with reads fall statistically below what the rate
  predicts, the tag has most likely left, and the window halves (at most to w*), so an absence
  is reported quickly.

The order (grow, else check for a transition) and the reset of an empty window to one epoch are
the paper's Algorithm 1. The tag is reported present in an epoch when its window holds a read.

Where this departs from the paper, and why:
- the paper averages p_t over the epochs that saw the tag, which overstates a weak tag's rate
  (an epoch with a read has p_t >= 1/cycles); the per-cycle rate is solved from that conditional
  mean instead (over the tag's recent history, not only the window, which may be one epoch), and
  an epoch is a Bernoulli trial with q = 1 - (1 - p)^cycles;
- w* is the exact ln(1/δ) / -ln(1 - q) rather than ln(1/δ) / q (longer, by far for reliable tags);
- the transition test is the binomial tail P(S <= |S|) < δ, not |S| < wq - 2 sqrt(wq(1 - q)),
  whose normal approximation fires on two misses in a row of a 90 % tag;
- δ is per tag (`tag_delta`): from the tag's own departure rate, so a tag that stays gets a long
  window and one that comes and goes a short one, instead of one δ for all.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

DEFAULT_DELTA = 0.25       # the most a tag's completeness target may be (a tag that comes and goes)
DEFAULT_MAX_WINDOW = 50
DEFAULT_MIN_DELTA = 0.001
DEFAULT_PRIOR_STAY = 10.0   # epochs: a tag not yet seen to leave is expected to stay about this long


@dataclass
class TagWindow:
    """One (reader, tag) pair's smoothing state."""

    size: int = 1                                           # w, in epochs
    rates: deque[float] = field(default_factory=deque)      # p_t of the last `max_window` epochs, newest last
    present_epochs: int = 0                                 # epochs reported present so far
    departures: int = 0                                     # gaps long enough that the tag surely left
    gap: int = 0                                            # epochs since the last read


def completeness_window(epoch_rate: float, delta: float) -> int:
    """w*: epochs needed to read a tag read in a share `epoch_rate` of epochs at least once w.p. 1 - delta."""
    if epoch_rate <= 0:
        raise ValueError("a tag never read has no completeness window")
    if epoch_rate >= 1:
        return 1
    return max(1, math.ceil(math.log(1 / delta) / -math.log(1 - epoch_rate)))


def transition_detected(seen_epochs: int, window: int, epoch_rate: float, delta: float) -> bool:
    """Fewer epochs with reads than a present tag's window of `window` Bernoulli(epoch_rate) epochs
    gives with probability `delta` or more: the binomial tail P(S <= seen) < delta. (The paper's
    two-deviation test, |S| < w q - 2 sqrt(w q (1 - q)), fires on two misses in a row of a 90 %
    tag: in small windows the normal approximation is poor.)"""
    tail = sum(math.comb(window, k) * epoch_rate ** k * (1 - epoch_rate) ** (window - k)
               for k in range(seen_epochs + 1))
    return tail < delta


def epoch_rate(rates: Sequence[float], cycles: int) -> float:
    """q: the chance that the tag answers at least once in an epoch, from the per-epoch rates of a
    window (at least one of them non-zero)."""
    seen = [p for p in rates if p > 0]
    if cycles == 1:
        return len(seen) / len(rates)   # one cycle an epoch: the share of epochs with a read
    mean_seen = sum(seen) / len(seen)
    low, high = 0.0, 1.0   # p / (1 - (1 - p)^n) rises from 1/n to 1: solve it for p by bisection
    for _ in range(30):
        p = (low + high) / 2
        if p / (1 - (1 - p) ** cycles) < mean_seen:
            low = p
        else:
            high = p
    return 1 - (1 - (low + high) / 2) ** cycles


def tag_delta(state: TagWindow, rate: float, delta: float, min_delta: float, prior_stay: float) -> float:
    """The completeness target for this tag: δ = h / q, clamped to [min_delta, delta], where h is
    the tag's departure rate per epoch present (a prior of one departure in `prior_stay` epochs).
    One more epoch of window saves q (1 - q)^w missed epochs and costs h falsely present ones, so
    the window that errs least is the one where (1 - q)^w = h / q: a tag that stays gets a long
    window, one that comes and goes a short one."""
    hazard = (state.departures + 1) / (state.present_epochs + prior_stay)
    return min(delta, max(min_delta, hazard / rate))


def smurf_step(state: TagWindow, answered: int, cycles: int, delta: float = DEFAULT_DELTA,
               max_window: int = DEFAULT_MAX_WINDOW, min_delta: float = DEFAULT_MIN_DELTA,
               prior_stay: float = DEFAULT_PRIOR_STAY) -> bool:
    """Advance one epoch in which the tag answered `answered` of `cycles` read cycles; update
    `state` in place and say whether the tag is reported present in this epoch."""
    if not 0 <= answered <= cycles or cycles <= 0:
        raise ValueError(f"answered {answered} of {cycles} read cycles is not possible")
    state.rates.append(answered / cycles)
    while len(state.rates) > max_window:
        state.rates.popleft()
    window = list(state.rates)[-state.size:]
    seen = sum(p > 0 for p in window)
    if seen:
        rate = epoch_rate(state.rates, cycles)
        target = tag_delta(state, rate, delta, min_delta, prior_stay)
        needed = min(completeness_window(rate, target), max_window)
        if needed > state.size:
            state.size = min(state.size + 2, needed)
        elif transition_detected(seen, len(window), rate, target):
            state.size = max(min(state.size // 2, needed), 1)
    present = any(p > 0 for p in list(state.rates)[-state.size:])
    state.present_epochs += present
    state.gap = 0 if answered else state.gap + 1
    if state.gap and state.gap == _certain_absence(state.rates, cycles, min_delta, max_window):
        state.departures += 1
    if not present:
        state.size = 1   # an empty window: absent, and the next sighting starts afresh
    return present


def _certain_absence(rates: Sequence[float], cycles: int, min_delta: float, max_window: int) -> int:
    """Empty epochs in a row after which the tag surely left (a present tag stays unread that
    long with probability below min_delta): only such gaps count as departures, so misses of a
    tag that stayed do not inflate its departure rate (which would shrink its window, which would
    cause more misses)."""
    if not any(rates):
        return max_window
    return min(completeness_window(epoch_rate(rates, cycles), min_delta), max_window)


def smooth_adaptive(answered: Sequence[int], cycles: int, delta: float = DEFAULT_DELTA,
                    max_window: int = DEFAULT_MAX_WINDOW) -> list[bool]:
    """SMURF over one tag's epochs (answered read cycles per epoch): present or not, per epoch."""
    state = TagWindow()
    return [smurf_step(state, a, cycles, delta, max_window) for a in answered]


def smooth_fixed(answered: Sequence[int], window: int, count_t: int = 1) -> list[bool]:
    """The fixed sliding window (the paper's smoothing view, slide one epoch): present in an epoch
    when the last `window` epochs hold at least `count_t` reads."""
    if window < 1:
        raise ValueError(f"a window of {window} epochs is not possible")
    total, reported = 0, []
    for t, a in enumerate(answered):
        total += a - (answered[t - window] if t >= window else 0)
        reported.append(total >= count_t)
    return reported
