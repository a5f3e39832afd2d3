"""Replay of the real Intel Berkeley Lab mote readings (a copy of `../shared/data/intel-lab/`
is kept in `deploy/data/intel-lab/`), time-compressed, with injected faults recorded as ground
truth.

The reduced data set holds, per mote, temperature (°C) and relative humidity (%) in 30-minute
steps: 144 steps in the *Train* files and the 96 after them in the *Test* files, 240 in all. Row i
of every CSV is the i-th mote; it is given the i-th position of `mote_locs.txt` (the copy lost
the original ids, see the data README). The data has no voltage: a healthy mote's voltage is
modelled as a slow discharge from 2.75 V.

Faults (edge.faults: fail-stop, stuck, spike, battery) are planned per mote and recorded with
every sample they touch.
"""

from __future__ import annotations

import gzip
import os
import random
from collections.abc import Iterator
from dataclasses import dataclass, field

from edge.faults import FAULT_KINDS, faulty_values
from wire.errors import HiFiError

# The real readings, kept in the repository (48 KB) so a replay runs from any checkout.
INTEL_LAB_DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "deploy", "data",
                              "intel-lab")
STEP_MS = 30 * 60 * 1000
HEALTHY_VOLTAGE = 2.75
_SERIES = {"temperature": ("intelTemperatureTrain.csv.gz", "intelTemperatureTest.csv.gz"),
           "humidity": ("intelHumidityTrain.csv.gz", "intelHumidityTest.csv.gz")}


class IntelLabError(HiFiError):
    """The data files are missing or unreadable; the message names the file, line and problem."""


@dataclass(frozen=True)
class MoteSeries:
    mote_id: int
    x: float
    y: float
    temperature: tuple[float, ...]
    humidity: tuple[float, ...]

    @property
    def steps(self) -> int:
        return len(self.temperature)


@dataclass(frozen=True)
class Fault:
    mote_id: int
    kind: str
    start_step: int
    end_step: int     # exclusive


@dataclass(frozen=True)
class MoteSample:
    mote_id: int
    step: int
    t_ms: int
    values: dict[str, float]                          # what the mote reports
    true_values: dict[str, float] = field(default_factory=dict)   # what the room really was
    fault: str = ""                                   # the injected fault behind `values`, if any


def _rows(path: str) -> list[list[float]]:
    try:
        with gzip.open(path, "rt") as fh:
            lines = fh.read().splitlines()
    except (OSError, EOFError) as exc:
        raise IntelLabError(f"{path}: cannot be read ({exc})") from None
    rows = []
    for number, line in enumerate(lines, 1):
        try:
            rows.append([float(cell) for cell in line.split(",")])
        except ValueError:
            raise IntelLabError(f"{path}, line {number}: not a comma-separated list of numbers") from None
    return rows


def _positions(path: str) -> list[tuple[int, float, float]]:
    try:
        with gzip.open(path, "rt") as fh:
            lines = [line.split() for line in fh.read().splitlines() if line.strip()]
    except (OSError, EOFError) as exc:
        raise IntelLabError(f"{path}: cannot be read ({exc})") from None
    try:
        return [(int(mote), float(x), float(y)) for mote, x, y in lines]
    except ValueError:
        raise IntelLabError(f"{path}: lines must be 'moteid x y'") from None


def load_intel_lab(directory: str) -> list[MoteSeries]:
    """Every mote's full series (Train then Test steps) with its position."""
    series: dict[str, list[list[float]]] = {}
    for name, files in _SERIES.items():
        parts = [_rows(os.path.join(directory, f)) for f in files]
        if len({len(p) for p in parts}) != 1:
            raise IntelLabError(f"{directory}: {files[0]} and {files[1]} hold different numbers of motes")
        series[name] = [a + b for a, b in zip(*parts, strict=True)]
    temperature, humidity = series["temperature"], series["humidity"]
    if len(temperature) != len(humidity):
        raise IntelLabError(f"{directory}: temperature has {len(temperature)} motes, humidity {len(humidity)}")
    positions = _positions(os.path.join(directory, "mote_locs.txt.gz"))
    if len(positions) < len(temperature):
        raise IntelLabError(f"{directory}: mote_locs.txt.gz has {len(positions)} motes, the series {len(temperature)}")
    return [MoteSeries(mote, x, y, tuple(t), tuple(h))
            for (mote, x, y), t, h in zip(positions, temperature, humidity, strict=False)]


def plan_faults(motes: list[MoteSeries], seed: int, share: float = 0.2, kinds: tuple[str, ...] = FAULT_KINDS,
                min_steps: int = 6) -> list[Fault]:
    """Faults on `share` of the motes, kinds in turn, each starting somewhere in the second half
    of the series and lasting to its end (spikes: 6 steps). Deterministic for a seed."""
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"fault share {share} is outside [0, 1]")
    unknown = [k for k in kinds if k not in FAULT_KINDS]
    if unknown:
        raise ValueError(f"unknown fault kind(s) {', '.join(unknown)} (known: {', '.join(FAULT_KINDS)})")
    rng = random.Random(seed)
    chosen = sorted(rng.sample([m.mote_id for m in motes], round(share * len(motes))))
    steps = min(m.steps for m in motes)
    faults = []
    for i, mote in enumerate(chosen):
        kind = kinds[i % len(kinds)]
        start = rng.randrange(steps // 2, steps - min_steps)
        end = start + min_steps if kind == "spike" else steps
        faults.append(Fault(mote, kind, start, end))
    return faults


def _voltage(step: int) -> float:
    return round(HEALTHY_VOLTAGE - 0.0005 * step, 4)


def replay(motes: list[MoteSeries], faults: list[Fault], start_ms: int, speed: float,
           seed: int = 0) -> Iterator[MoteSample]:
    """Every mote's samples in time order; a 30-minute step lasts STEP_MS / speed of replay time.
    Samples without a fault carry exactly the recorded values."""
    if speed <= 0:
        raise ValueError(f"replay speed must be positive (got {speed})")
    rng = random.Random(seed)
    by_mote = {f.mote_id: f for f in faults}
    for step in range(min(m.steps for m in motes)):
        t_ms = start_ms + int(step * STEP_MS / speed)
        for mote in motes:
            true = {"temperature": mote.temperature[step], "humidity": mote.humidity[step], "voltage": _voltage(step)}
            fault = by_mote.get(mote.mote_id)
            if fault is None or not fault.start_step <= step < fault.end_step:
                yield MoteSample(mote.mote_id, step, t_ms, dict(true), true)
                continue
            at_start = {"temperature": mote.temperature[fault.start_step],
                        "humidity": mote.humidity[fault.start_step]}
            progress = (step - fault.start_step + 1) / max(fault.end_step - fault.start_step, 1)
            values = faulty_values(fault.kind, true, at_start, progress, rng)
            if values is not None:
                yield MoteSample(mote.mote_id, step, t_ms, values, true, fault.kind)
