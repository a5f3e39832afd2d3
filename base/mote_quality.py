"""Faulty sensor detection and a confidence per value, in the manner of the paper's virtual
devices: beside each mote's data stream, a quality stream. Pure: a step function over the samples
of one sampling period; the DSP or the benchmark drives it.

A mote is judged faulty in a period when
  - it is **silent** (fail-stop): no sample although one was due;
  - a value is outside **physical limits** (fail-dirty: a dying battery reads past 100 °C; a fire
    heats a mote near it to 60-100 °C, which is no fault);
  - it is **stuck**: the same values `stuck_run` periods in a row (healthy readings drift);
  - it **disagrees with its neighbours**: motes near each other agree, so a value far from the
    median of its nearest neighbours, beyond the offset it usually has from them, is suspect —
    unless temperature and humidity moved apart together, as sunlight on one mote does (the real
    Intel Lab data has such a mote: 10 °C warmer than its neighbours every afternoon).
Confidence is 1 for a value in line with its neighbours, falls toward 0.5 as it nears the
disagreement threshold and below it beyond; 0 for out-of-limits and stuck values.
"""

from __future__ import annotations

import json
import math
import statistics
from collections import defaultdict, deque
from collections.abc import Mapping
from dataclasses import dataclass, field

from base.plan import SAMPLE_QUANTITIES
from wire.codec import ms_to_datetime

LIMITS = {"temperature": (-40.0, 100.0), "humidity": (0.0, 100.0), "voltage": (2.2, 3.3)}
DISAGREEMENT = {"temperature": 6.0, "humidity": 8.0, "voltage": 0.02}   # beyond a mote's usual offset


@dataclass(frozen=True)
class Verdict:
    receptor_id: str
    t_ms: int
    faulty: bool
    reasons: tuple[str, ...]          # silent | limits:<q> | stuck | neighbours:<q>
    confidence: float                 # of the mote's values this period, in [0, 1]


@dataclass
class MoteQuality:
    """Judges every mote of `positions` once per sampling period (`add` makes a mote known)."""

    positions: dict[str, tuple[float, float]]
    neighbours: int = 6
    stuck_run: int = 3                       # identical samples in a row that make a mote stuck
    baseline_periods: int = 24               # how many periods a mote's usual offset is taken over
    limits: Mapping[str, tuple[float, float]] = field(default_factory=lambda: dict(LIMITS))
    disagreement: Mapping[str, float] = field(default_factory=lambda: dict(DISAGREEMENT))
    _last: dict[str, tuple] = field(default_factory=dict)
    _repeats: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    _offsets: dict[tuple[str, str], deque[float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.positions = dict(self.positions)
        self._place()

    def _place(self) -> None:
        self._near = {mote: sorted((other for other in self.positions if other != mote),
                                   key=lambda other: (math.dist(self.positions[mote], self.positions[other]), other)
                                   )[:self.neighbours]
                      for mote in self.positions}

    def add(self, mote: str, x: float, y: float) -> None:
        """A mote seen for the first time: judged from now on (silence included)."""
        if mote not in self.positions:
            self.positions[mote] = (x, y)
            self._place()

    def to_json(self) -> str:
        return json.dumps({"positions": self.positions, "last": self._last, "repeats": dict(self._repeats),
                           "offsets": [[m, q, list(d)] for (m, q), d in self._offsets.items()]})

    @classmethod
    def from_json(cls, text: str) -> MoteQuality:
        data = json.loads(text)
        quality = cls({m: tuple(p) for m, p in data["positions"].items()})
        quality._last = {m: tuple(tuple(pair) for pair in sig) for m, sig in data["last"].items()}
        quality._repeats.update(data["repeats"])
        quality._offsets = {(m, q): deque(d, maxlen=quality.baseline_periods) for m, q, d in data["offsets"]}
        return quality

    def step(self, t_ms: int, samples: Mapping[str, Mapping[str, float]]) -> list[Verdict]:
        """Verdicts for every known mote in the period at `t_ms`, given the samples that arrived."""
        verdicts: dict[str, list[str]] = {}
        confidence: dict[str, float] = {}
        for mote in self.positions:
            values = samples.get(mote)
            if values is None:
                verdicts[mote], confidence[mote] = ["silent"], 0.0
                self._repeats[mote] = 0
                continue
            reasons = [f"limits:{q}" for q, v in sorted(values.items())
                       if q in self.limits and not self.limits[q][0] <= v <= self.limits[q][1]]
            signature = tuple(sorted((q, v) for q, v in values.items() if q != "voltage"))
            self._repeats[mote] = self._repeats[mote] + 1 if self._last.get(mote) == signature else 0
            self._last[mote] = signature
            if self._repeats[mote] >= self.stuck_run - 1:
                reasons.append("stuck")
            verdicts[mote], confidence[mote] = reasons, 0.0 if reasons else 1.0
        # Neighbours are judged against the motes that passed the checks above.
        sound = {m: samples[m] for m, reasons in verdicts.items() if not reasons}
        for mote, values in sound.items():
            excess: dict[str, float] = {}
            for quantity, threshold in self.disagreement.items():
                around = [sound[n][quantity] for n in self._near[mote] if n in sound and quantity in sound[n]]
                if quantity in values and around:
                    offset = values[quantity] - statistics.median(around)
                    history = self._offsets.setdefault((mote, quantity), deque(maxlen=self.baseline_periods))
                    excess[quantity] = (offset - (statistics.median(history) if history else 0.0)) / threshold
                    if abs(excess[quantity]) <= 1:
                        history.append(offset)   # a suspect value does not move the baseline
            if _room_explains(excess):
                excess = {q: e for q, e in excess.items() if q not in ("temperature", "humidity")}
            verdicts[mote] += [f"neighbours:{q}" for q, e in sorted(excess.items()) if abs(e) > 1]
            confidence[mote] = max(0.0, 1.0 - max((abs(e) for e in excess.values()), default=0.0) / 2)
        return [Verdict(mote, t_ms, bool(verdicts[mote]), tuple(verdicts[mote]), round(confidence[mote], 3))
                for mote in sorted(self.positions)]


def _room_explains(excess: Mapping[str, float]) -> bool:
    """A mote in the sun (or a draught) reads warmer and drier than its neighbours at once: relative
    humidity falls as the air warms. A temperature and humidity excess of opposite signs and
    comparable size is the room, not the mote (a spiking or dying mote moves temperature alone)."""
    t, h = excess.get("temperature", 0.0), excess.get("humidity", 0.0)
    return t * h < 0 and min(abs(t), abs(h)) >= 0.5 * max(abs(t), abs(h))


def judge_periods(quality: MoteQuality, samples: dict[int, dict[str, tuple[float, float, dict[str, float]]]],
                  first: int, last: int, period_ms: int) -> list[tuple]:
    """QUALITY_COLUMNS rows for periods first..last; `samples` {period: {mote: (x, y, values)}}.
    One code path for the sink and the reference evaluator."""
    rows = []
    for period in range(first, last + 1):
        arrived = samples.get(period, {})
        for mote, (x, y, _) in sorted(arrived.items()):
            quality.add(mote, x, y)
        values = {mote: v for mote, (_, _, v) in arrived.items()}
        start, end = ms_to_datetime(period * period_ms), ms_to_datetime((period + 1) * period_ms)
        for verdict in quality.step(period * period_ms, values):
            seen = values.get(verdict.receptor_id, {})
            rows.append((start, end, verdict.receptor_id, verdict.faulty, ",".join(verdict.reasons),
                         verdict.confidence, *(seen.get(q) for q in SAMPLE_QUANTITIES)))
    return rows
