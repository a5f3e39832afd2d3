"""Per-tag smoothing of RFID presence over epochs: SMURF's adaptive window (Jeffery, Garofalakis,
Franklin, VLDB 2006) and the fixed window it is measured against. Pure: the state machine of one
(reader, tag) pair, epoch by epoch, and `ReaderSmoother`, all tags of one reader, which the DSP's
sink (dsp.smoothing), the reference evaluator and `hifi bench cleaning` run alike.

An epoch is a few read cycles of a reader; the tag is read in it or not. SMURF keeps a window of
w epochs per tag such that:

- **completeness**: a present tag is read at least once in the window with probability 1 - δ,
  which takes w* epochs at its read rate q; a window smaller than w* grows toward it, 2 epochs
  at a time (a tag that is read rarely gets a longer window);
- **transitions**: otherwise, when the epochs with reads fall statistically below what the rate
  predicts, the tag has most likely left, and the window halves (at most to w*), so an absence
  is reported quickly.

The order (grow, else check for a transition) and the reset of an empty window to one epoch are
the paper's Algorithm 1. The tag is reported present in an epoch when its window holds a read.

Where this departs from the paper, and why (each measured by `hifi bench cleaning`):
- q is estimated from the gaps between the tag's reads while it stayed (geometric, mean 1/q),
  over its recent history, not from the per-cycle read fractions of the epochs that saw it: an
  epoch with a read has a fraction >= 1/cycles, which overstates a weak tag's rate, and the
  window may be one epoch long. Gaps too long for a present tag are departures, not misses.
- A tag's first epochs borrow its reader's rate over all its tags as a prior (`ReaderRates`):
  a tag that passes a reliable reader in a few epochs would otherwise leave before its window
  had shrunk to what the reader deserves.
- w* is the exact ln(1/δ) / -ln(1 - q) rather than ln(1/δ) / q (longer, by far for reliable tags).
- The transition test is the binomial tail P(S <= |S|) < δ, not |S| < wq - 2 sqrt(wq(1 - q)),
  whose normal approximation fires on two misses in a row of a 90 % tag.
- δ is per tag (`tag_delta`): δ = h / q from the tag's own departure rate h, so a tag that
  stays gets a long window and one that comes and goes a short one, instead of one δ for all.
"""

from __future__ import annotations

import json
import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

DEFAULT_DELTA = 0.25        # the most a tag's completeness target may be (a tag that comes and goes)
DEFAULT_MIN_DELTA = 0.001   # the least (a tag that stays)
DEFAULT_MAX_WINDOW = 50     # epochs
DEFAULT_PRIOR_STAY = 10.0   # epochs: a tag not yet seen to leave is expected to stay about this long
PRIOR_EPOCHS = 2.0          # weight of the reader's rate in a tag's rate
MIN_ABSENCE = 5             # epochs without a read before a departure is certain, at the least


@dataclass
class TagWindow:
    """One (reader, tag) pair's smoothing state."""

    size: int = 1                                           # w, in epochs
    seen: deque[bool] = field(default_factory=deque)        # read or not, last `max_window` epochs, newest last
    gaps: deque[int] = field(default_factory=deque)         # epochs between reads while it stayed, recent ones
    since_read: int | None = None                           # epochs since the last read (None: never read)
    present_epochs: int = 0                                 # epochs reported present so far
    departures: int = 0                                     # absences long enough that the tag surely left

    def epoch_rate(self, prior: float = 0.5) -> float:
        """q: the chance that the tag, while present, is read in an epoch. Each gap between its
        reads while it stayed is misses then a read; before many are known, PRIOR_EPOCHS epochs
        read at the rate `prior` (the reader's, over all its tags)."""
        return (len(self.gaps) + PRIOR_EPOCHS * prior) / (sum(self.gaps) + PRIOR_EPOCHS)


@dataclass
class ReaderRates:
    """A reader's read rate over all its tags, from their recent gaps between reads."""

    gaps: deque[int] = field(default_factory=deque)
    keep: int = 1000

    def add(self, gap: int) -> None:
        self.gaps.append(gap)
        while len(self.gaps) > self.keep:
            self.gaps.popleft()

    def epoch_rate(self) -> float:
        return (len(self.gaps) + 1) / (sum(self.gaps) + 2)


def completeness_window(epoch_rate: float, delta: float, limit: int = DEFAULT_MAX_WINDOW) -> int:
    """w*: epochs needed to read a tag read in a share `epoch_rate` of epochs at least once
    w.p. 1 - delta (at most `limit`)."""
    if epoch_rate <= 0:
        raise ValueError("a tag never read has no completeness window")
    if epoch_rate >= 1:
        return 1
    return min(max(1, math.ceil(math.log(1 / delta) / -math.log(1 - epoch_rate))), limit)


def transition_detected(seen_epochs: int, window: int, epoch_rate: float, delta: float) -> bool:
    """Fewer epochs with reads than a present tag's window of `window` Bernoulli(epoch_rate) epochs
    gives with probability `delta` or more: the binomial tail P(S <= seen) < delta."""
    tail = sum(math.comb(window, k) * epoch_rate ** k * (1 - epoch_rate) ** (window - k)
               for k in range(seen_epochs + 1))
    return tail < delta


def tag_delta(state: TagWindow, rate: float, delta: float, min_delta: float, prior_stay: float) -> float:
    """The completeness target for this tag: δ = h / q, clamped to [min_delta, delta], where h is
    the tag's departure rate per epoch present (a prior of one departure in `prior_stay` epochs).
    One more epoch of window saves q (1 - q)^w missed epochs and costs h falsely present ones, so
    the window that errs least is the one where (1 - q)^w = h / q."""
    hazard = (state.departures + 1) / (state.present_epochs + prior_stay)
    return min(delta, max(min_delta, hazard / rate))


def smurf_step(state: TagWindow, read: bool, delta: float = DEFAULT_DELTA, max_window: int = DEFAULT_MAX_WINDOW,
               min_delta: float = DEFAULT_MIN_DELTA, prior_stay: float = DEFAULT_PRIOR_STAY,
               reader: ReaderRates | None = None) -> bool:
    """Advance one epoch in which the tag was `read` or not; update `state` (and its `reader`'s
    rate, if given) in place and say whether the tag is reported present in this epoch."""
    state.seen.append(read)
    while len(state.seen) > max_window:
        state.seen.popleft()
    if state.since_read is not None:
        state.since_read += 1
    prior = reader.epoch_rate() if reader is not None else 0.5
    rate = state.epoch_rate(prior)
    # Only absences too long for a present tag count as departures (and their gap is no read
    # rate): otherwise misses of a tag that stayed would lower its rate and raise its departure
    # rate, shortening its window, which causes more misses. Never fewer than MIN_ABSENCE epochs:
    # a rate near 1 would otherwise call every miss a departure, never learn a miss, and stay near 1.
    surely_gone = max(completeness_window(rate, min_delta, max_window), MIN_ABSENCE)
    if read:
        if state.since_read is not None and state.since_read < surely_gone:
            state.gaps.append(state.since_read)
            while len(state.gaps) > max_window:
                state.gaps.popleft()
            if reader is not None:
                reader.add(state.since_read)
            rate = state.epoch_rate(prior)
        state.since_read = 0
    elif state.since_read == surely_gone:
        state.departures += 1
    window = list(state.seen)[-state.size:]
    seen = sum(window)
    if seen:
        target = tag_delta(state, rate, delta, min_delta, prior_stay)
        needed = completeness_window(rate, target, max_window)
        if needed > state.size:
            state.size = min(state.size + 2, needed)
        elif transition_detected(seen, len(window), rate, target):
            state.size = max(min(state.size // 2, needed), 1)
    present = any(list(state.seen)[-state.size:])
    state.present_epochs += present
    if not present:
        state.size = 1   # an empty window: absent, and the next sighting starts afresh
    return present


@dataclass
class ReaderSmoother:
    """One reader's adaptive smoothing: every tag it has read lately, stepped epoch by epoch in
    tag order (they share the reader's rate). The DSP keeps one per receptor as streaming state
    (`to_json`), the reference evaluator and the benchmark run the same code, so the hierarchy's
    answer and the central one agree by construction."""

    delta: float = DEFAULT_DELTA
    max_window: int = DEFAULT_MAX_WINDOW
    forget_after: int = 2 * DEFAULT_MAX_WINDOW     # epochs unread after which a tag is dropped
    rates: ReaderRates = field(default_factory=ReaderRates)
    tags: dict[str, TagWindow] = field(default_factory=dict)
    counts: dict[str, deque[int]] = field(default_factory=dict)   # reads per epoch, last max_window

    def step(self, reads: Mapping[str, int]) -> list[tuple[str, int, int]]:
        """One epoch with `reads` per tag: (tag, reads in its window, window in epochs) for every
        tag reported present."""
        present = []
        for tag in sorted(self.tags.keys() | reads.keys()):
            state = self.tags.setdefault(tag, TagWindow())
            counts = self.counts.setdefault(tag, deque())
            n = reads.get(tag, 0)
            counts.append(n)
            while len(counts) > self.max_window:
                counts.popleft()
            if smurf_step(state, n > 0, self.delta, self.max_window, reader=self.rates):
                present.append((tag, sum(list(counts)[-state.size:]), state.size))
            elif state.since_read is not None and state.since_read >= self.forget_after:
                del self.tags[tag], self.counts[tag]
        return present

    def to_json(self) -> str:
        return json.dumps({
            "rates": list(self.rates.gaps),
            "tags": {tag: [w.size, "".join("1" if r else "0" for r in w.seen), list(w.gaps), w.since_read,
                           w.present_epochs, w.departures, list(self.counts[tag])] for tag, w in self.tags.items()}})

    @classmethod
    def from_json(cls, text: str, delta: float = DEFAULT_DELTA, max_window: int = DEFAULT_MAX_WINDOW) -> ReaderSmoother:
        data = json.loads(text)
        smoother = cls(delta, max_window, rates=ReaderRates(deque(data["rates"])))
        for tag, (size, seen, gaps, since_read, present_epochs, departures, counts) in data["tags"].items():
            smoother.tags[tag] = TagWindow(size, deque(c == "1" for c in seen), deque(gaps), since_read,
                                           present_epochs, departures)
            smoother.counts[tag] = deque(counts)
        return smoother


def smooth_adaptive(reads: Sequence[Sequence[int]], delta: float = DEFAULT_DELTA,
                    max_window: int = DEFAULT_MAX_WINDOW) -> list[list[bool]]:
    """Adaptive smoothing of the tags of one reader (reads per epoch, one sequence per tag, all
    as long): present or not, per tag and epoch."""
    smoother = ReaderSmoother(delta, max_window, forget_after=max((len(r) for r in reads), default=0) + 1)
    names = [f"{i:09d}" for i in range(len(reads))]
    reported: list[list[bool]] = [[] for _ in reads]
    for epoch in range(max((len(r) for r in reads), default=0)):
        present = {tag for tag, _, _ in smoother.step({names[i]: r[epoch] for i, r in enumerate(reads) if r[epoch]})}
        for i, name in enumerate(names):
            reported[i].append(name in present)
    return reported


def smooth_fixed(reads: Sequence[int], window: int, count_t: int = 1) -> list[bool]:
    """The fixed sliding window (the paper's smoothing view, slide one epoch): present in an epoch
    when the last `window` epochs hold at least `count_t` reads."""
    if window < 1:
        raise ValueError(f"a window of {window} epochs is not possible")
    total, reported = 0, []
    for t, n in enumerate(reads):
        total += n - (reads[t - window] if t >= window else 0)
        reported.append(total >= count_t)
    return reported
