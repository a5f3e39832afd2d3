"""Per-tag smoothing of RFID presence over epochs: an adaptive window after SMURF (Jeffery,
Garofalakis, Franklin, VLDB 2006) and the fixed window it is measured against. Pure: the model of
one (reader, tag) pair, `ReaderSmoother` for all tags of one reader, which the DSP's sink
(dsp.spark.smoothing), the reference evaluator and `hifi bench cleaning` run alike.

An epoch is a few read cycles of a reader; the tag is read in it or not. As in SMURF, each tag gets
its own window from its observed read rate, and a transition test shortens it when the tag has
most likely left: a tag is reported present while it was read within its last `w` epochs. Unlike
SMURF, `w` is not grown and halved step by step; it is where the evidence turns:

- **the gaps between a tag's reads** are of two kinds: a *stay* (the tag stayed and was missed
  `g - 1` times: geometric in its read rate q) or a *departure* (it left, and came back after an
  absence: geometric in a return rate d), mixed in a share π of departures. The three are fitted
  per tag by expectation-maximisation over its recent gaps; a gap still open once the tag is
  surely gone counts as a censored departure.
- **the window** is the number of misses after which "it left" becomes likelier than "it stayed
  and was missed": P(present | k misses) = (1-π) S_q(k) / ((1-π) S_q(k) + π S_d(k)) < ½, with the
  survival functions S taken over the uncertainty of q and d (Beta posteriors), so a tag little
  known gets the longer window its uncertain rate deserves. That is the Bayes decision for
  fewest errors per epoch; `delta` keeps SMURF's completeness floor (a present tag missed in its
  window with chance at most δ).
- **the reader pools its tags** (empirical Bayes): each tag's fit is shrunk toward the reader's
  fit over all its gaps, with a strength estimated from how much the tags truly differ (their
  spread beyond sampling noise: of departure shares from their fits, of read rates from their
  shares of one-epoch gaps, which departures barely touch). Tags alike (pallets that stay, a conveyor's cases) borrow
  strength from each other from their first epochs; tags that differ keep their own windows.
"""

from __future__ import annotations

import itertools
import json
import math
from collections import Counter, deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

DEFAULT_DELTA = 0.25        # the most a tag's chance of being missed in its window may be
DEFAULT_MAX_WINDOW = 50     # epochs
PRIOR = (0.005, 0.5, 0.1)   # (π, q, d) before any gap is seen
READER_STRENGTH = 2.0       # pseudo-gaps of PRIOR in the reader's fit
TAG_STRENGTH = 30.0         # pseudo-gaps of the reader's fit in a tag's, until the reader can say
RETURN_STRENGTH = 2.0       # pseudo-gaps of the reader's return rate in a tag's
STRENGTH_LIMITS = (1.0, 1000.0)
KEEP_GAPS = 200             # a tag's recent gaps that its fit reads
TAG_ROUNDS, READER_ROUNDS, SPREAD_ROUNDS = 3, 10, 5   # EM iterations, warm-started from the last fit
REFIT_EVERY, WARM_UP = 10, 50       # epochs between the reader's refits (every epoch in the first WARM_UP)
MIN_GAPS = 5                # a tag's gaps before its spread counts toward the reader's strength
GONE = 0.01                 # P(present) below which an open gap is a (censored) departure


class Gap(NamedTuple):
    """Epochs from one read of a tag to its next (`censored`: still unread, and surely gone)."""

    epochs: int
    censored: bool = False


@dataclass(frozen=True)
class GapModel:
    """A tag's (or a reader's) gaps: a share `departure_share` of departures, stays geometric in
    `read_rate` per epoch, absences geometric in `return_rate`; `reads` and `returns` are the Beta
    pseudo-counts (successes, failures) behind the two rates, `evidence` the fit's own expected
    (departures, gaps, stays, epochs of stays), without the prior's."""

    departure_share: float = PRIOR[0]
    read_rate: float = PRIOR[1]
    return_rate: float = PRIOR[2]
    reads: tuple[float, float] | None = None
    returns: tuple[float, float] | None = None
    evidence: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)

    def likelihoods(self, gap: Gap) -> tuple[float, float]:
        """(as a stay, as a departure): the gap's probability, or its survival if censored."""
        q, d, g = self.read_rate, self.return_rate, gap.epochs
        if gap.censored:
            return (1 - q) ** g, (1 - d) ** max(g - 1, 0)
        return q * (1 - q) ** (g - 1), d * (1 - d) ** (g - 2) if g >= 2 else 0.0

    def present(self, misses: int) -> float:
        """P(still present | read `misses` epochs ago), the rates at their point estimates."""
        return self._posterior((1 - self.read_rate) ** misses, (1 - self.return_rate) ** max(misses - 1, 0))

    def presence(self) -> Iterator[float]:
        """P(still present | read 1, 2, ... epochs ago), over the rates' uncertainty: the survival
        products built up one miss at a time."""
        stay = away = 1.0
        for k in itertools.count(1):
            stay *= _beta_step(self.reads, self.read_rate, k - 1)
            if k >= 2:
                away *= _beta_step(self.returns, self.return_rate, k - 2)
            yield self._posterior(stay, away)

    def _posterior(self, stay: float, away: float) -> float:
        stay, away = (1 - self.departure_share) * stay, self.departure_share * away
        return stay / (stay + away) if stay + away > 0 else 0.0

    def to_json(self) -> list:
        return [self.departure_share, self.read_rate, self.return_rate, self.reads, self.returns, self.evidence]

    @classmethod
    def from_json(cls, data: list) -> GapModel:
        pi, q, d, reads, returns, evidence = data
        return cls(pi, q, d, tuple(reads) if reads else None, tuple(returns) if returns else None, tuple(evidence))


def _beta_step(counts: tuple[float, float] | None, rate: float, i: int) -> float:
    """E[(1 - p)^(i+1)] / E[(1 - p)^i] for p ~ Beta(counts), or 1 - rate without them."""
    if counts is None:
        return 1 - rate
    a, b = counts
    return (b + i) / (a + b + i)


def fit_gaps(gaps: Iterable[tuple[Gap, float]], prior: GapModel, strength: tuple[float, float, float],
             rounds: int, start: GapModel) -> GapModel:
    """EM over weighted gaps, from `start`, each parameter shrunk toward `prior` by its strength
    (pseudo-gaps of π, q, d)."""
    gaps = list(gaps)
    m_share, m_read, m_return = strength
    model = start
    for _ in range(rounds):
        departures = total = stays = stay_epochs = returns = away_epochs = 0.0
        for gap, weight in gaps:
            stay, away = model.likelihoods(gap)
            stay, away = (1 - model.departure_share) * stay, model.departure_share * away
            r = away / (stay + away) if stay + away > 0 else 1.0
            total += weight
            departures += weight * r
            stay_epochs += weight * (1 - r) * gap.epochs
            away_epochs += weight * r * max(gap.epochs - 1, 0)
            if not gap.censored:
                stays += weight * (1 - r)
                returns += weight * r
        reads = (stays + m_read, max(stay_epochs - stays, 0.0) + m_read * (1 / prior.read_rate - 1))
        comebacks = (returns + m_return, max(away_epochs - returns, 0.0) + m_return * (1 / prior.return_rate - 1))
        model = GapModel(
            _clamp((departures + m_share * prior.departure_share) / (total + m_share), 1e-6, 1 - 1e-6),
            _clamp(reads[0] / sum(reads), 1e-3, 0.999), _clamp(comebacks[0] / sum(comebacks), 1e-4, 0.999),
            reads, comebacks, (departures, total, stays, stay_epochs))
    return model


def _clamp(x: float, low: float, high: float) -> float:
    return min(max(x, low), high)


def shrinkage(shares: Sequence[tuple[float, float]],
              reads: Sequence[tuple[float, float]]) -> tuple[float, float] | None:
    """How strongly tags should be pooled: (π, q) pseudo-gaps, each from the tags' spread of a share
    (successes, trials) beyond sampling noise; None with too few tags to say. `shares`: each tag's
    fitted (departures, gaps); `reads`: each tag's (gaps of one epoch, gaps of one or two), whose
    share 1 / (2 - q) departures barely touch (a departure takes at least two epochs), so a
    tag's read rate is judged apart from how its fit split its gaps."""
    if len(shares) < 5:
        return None
    share, read = concentration(shares), concentration(reads)
    return None if share is None or read is None else (share, read)


def concentration(counts: Sequence[tuple[float, float]]) -> float | None:
    """The concentration of a Beta the per-tag shares (successes, trials) were drawn from, by
    moments: their spread beyond binomial noise (a small spread: tags alike, pooled strongly)."""
    counts = [(x, n) for x, n in counts if n > 0]
    if not counts:
        return None
    mean = sum(x for x, _ in counts) / sum(n for _, n in counts)
    spread = sum((x / n - mean) ** 2 for x, n in counts) / len(counts)
    noise = sum(mean * (1 - mean) / n for _, n in counts) / len(counts)
    between = max(spread - noise, 1e-9)
    return _clamp(mean * (1 - mean) / between - 1, *STRENGTH_LIMITS)


def completeness_window(epoch_rate: float, delta: float, limit: int = DEFAULT_MAX_WINDOW) -> int:
    """Epochs needed to read a tag read in a share `epoch_rate` of epochs at least once
    w.p. 1 - delta (at most `limit`): SMURF's w*."""
    if epoch_rate <= 0:
        raise ValueError("a tag never read has no completeness window")
    if epoch_rate >= 1:
        return 1
    return min(max(1, math.ceil(math.log(1 / delta) / -math.log(1 - epoch_rate))), limit)


def window_of(model: GapModel, delta: float, max_window: int) -> int:
    """Epochs a read keeps the tag present: up to the misses at which it more likely left, and at
    least the completeness window for `delta`."""
    misses = 0
    for present in model.presence():
        if misses + 1 >= max_window or present <= 0.5:
            break
        misses += 1
    return max(misses + 1, completeness_window(model.read_rate, delta, max_window))


@dataclass
class TagState:
    """One (reader, tag) pair: epochs since its last read, its recent gaps, its fit and window."""

    since_read: int | None = None
    gaps: deque[Gap] = field(default_factory=deque)
    model: GapModel | None = None
    window: int = 1
    counts: deque[int] = field(default_factory=deque)   # reads per epoch, the last max_window

    @property
    def gone(self) -> bool:
        return bool(self.gaps) and self.gaps[-1].censored


def _short_gaps(state: TagState) -> tuple[int, int]:
    """(gaps of one epoch, gaps of one or two): a share 1 / (2 - q) of a tag's stays."""
    return (sum(g == Gap(1) for g in state.gaps), sum(g.epochs <= 2 and not g.censored for g in state.gaps))


@dataclass
class ReaderSmoother:
    """One reader's adaptive smoothing: every tag it has read lately, stepped epoch by epoch in
    tag order, pooled through the reader's fit over all their gaps. The DSP keeps one per
    receptor as streaming state (`to_json`); the reference evaluator and the benchmark run the
    same code, so the hierarchy's answer and the central one agree by construction."""

    delta: float = DEFAULT_DELTA
    max_window: int = DEFAULT_MAX_WINDOW
    forget_after: int = 2 * DEFAULT_MAX_WINDOW     # epochs unread after which a tag is dropped
    tags: dict[str, TagState] = field(default_factory=dict)
    histogram: dict[Gap, int] = field(default_factory=dict)   # every gap the reader's tags had
    model: GapModel = field(default_factory=GapModel)
    strength: tuple[float, float] | None = None
    epochs: int = 0

    def step(self, reads: Mapping[str, int]) -> list[tuple[str, int, int]]:
        """One epoch with `reads` per tag: (tag, reads in its window, window in epochs) for every
        tag reported present."""
        self.epochs += 1
        if self.histogram and (self.epochs <= WARM_UP or self.epochs % REFIT_EVERY == 0):
            self._refit_reader()
        present = []
        for tag in sorted(self.tags.keys() | reads.keys()):
            state = self.tags.setdefault(tag, TagState())
            n = reads.get(tag, 0)
            state.counts.append(n)
            while len(state.counts) > self.max_window:
                state.counts.popleft()
            self._advance(state, n > 0)
            if state.since_read is not None and state.since_read < state.window:
                present.append((tag, sum(list(state.counts)[-state.window:]), state.window))
            elif state.since_read is not None and state.since_read >= self.forget_after:
                del self.tags[tag]
        return present

    def _advance(self, state: TagState, read: bool) -> None:
        if state.since_read is not None:
            state.since_read += 1
        if read:
            if state.since_read is not None:
                if state.gone:
                    self._count(state.gaps.pop(), -1)
                self._add_gap(state, Gap(state.since_read))
            elif state.model is None:
                state.window = window_of(self.model, self.delta, self.max_window)
            state.since_read = 0
        elif state.since_read is not None and not state.gone:
            if (state.model or self.model).present(state.since_read) < GONE:
                self._add_gap(state, Gap(state.since_read, censored=True))

    def _add_gap(self, state: TagState, gap: Gap) -> None:
        state.gaps.append(gap)
        while len(state.gaps) > KEEP_GAPS:
            state.gaps.popleft()
        self._count(gap, 1)
        state.model = self._fit_tag(state, TAG_ROUNDS)
        state.window = window_of(state.model, self.delta, self.max_window)

    def _count(self, gap: Gap, n: int) -> None:
        self.histogram[gap] = self.histogram.get(gap, 0) + n
        if not self.histogram[gap]:
            del self.histogram[gap]

    def _fit_tag(self, state: TagState, rounds: int) -> GapModel:
        share, read = self.strength or (TAG_STRENGTH, TAG_STRENGTH)
        return fit_gaps(Counter(state.gaps).items(), self.model, (share, read, RETURN_STRENGTH), rounds,
                        state.model or self.model)

    def _refit_reader(self) -> None:
        self.model = fit_gaps(self.histogram.items(), GapModel(), (READER_STRENGTH,) * 3, READER_ROUNDS, self.model)
        known = [s for s in self.tags.values() if s.model is not None and len(s.gaps) >= MIN_GAPS]
        self.strength = shrinkage([self._fit_tag(s, SPREAD_ROUNDS).evidence[:2] for s in known],
                                  [_short_gaps(s) for s in known])

    def to_json(self) -> str:
        return json.dumps({
            "epochs": self.epochs, "model": self.model.to_json(), "strength": self.strength,
            "histogram": [[g.epochs, g.censored, n] for g, n in self.histogram.items()],
            "tags": {tag: [s.since_read, [[g.epochs, g.censored] for g in s.gaps],
                           s.model.to_json() if s.model else None, s.window, list(s.counts)]
                     for tag, s in self.tags.items()}})

    @classmethod
    def from_json(cls, text: str, delta: float = DEFAULT_DELTA, max_window: int = DEFAULT_MAX_WINDOW) -> ReaderSmoother:
        data = json.loads(text)
        if "rates" in data:
            return _from_first_layout(data, delta, max_window)
        smoother = cls(delta, max_window, epochs=data["epochs"], model=GapModel.from_json(data["model"]),
                       strength=tuple(data["strength"]) if data["strength"] else None,
                       histogram={Gap(g, c): n for g, c, n in data["histogram"]})
        for tag, (since_read, gaps, model, window, counts) in data["tags"].items():
            smoother.tags[tag] = TagState(since_read, deque(Gap(g, c) for g, c in gaps),
                                          GapModel.from_json(model) if model else None, window, deque(counts))
        return smoother


def _from_first_layout(data: dict, delta: float, max_window: int) -> ReaderSmoother:
    """State saved by the first smoother (per tag: window, reads seen, stay gaps, ...): its gaps
    and counts carry over; the fits are made anew from them."""
    smoother = ReaderSmoother(delta, max_window)
    for tag, (size, _seen, gaps, since_read, _present, _departures, counts) in data["tags"].items():
        state = smoother.tags[tag] = TagState(since_read, window=size, counts=deque(counts))
        for g in gaps:
            smoother._add_gap(state, Gap(g))
    if smoother.histogram:
        smoother._refit_reader()
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
