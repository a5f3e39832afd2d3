"""Synthetic sensor motes: temperature, humidity, light, sound and voltage with noise (and gas,
ppm, on motes with a gas sensor), a per-mote calibration offset and drift, a sample period, and
injected faults (edge.faults). Pure.

The true environment is a smooth function of place and time (a daily cycle plus a gentle
spatial gradient), with staged fires: a fire heats the room around it for its duration; and
staged gas releases: a cloud spreading from its source at a known speed (STEAM's hazardous-
materials application), which reaches a point d metres away d / speed seconds after the
release, stays there for its duration and thins with distance. A mote
reports truth + its calibration offset + drift × hours since it started + Gaussian noise; a
faulty mote reports what edge.faults says. Every sample carries the truth and the fault behind
it, so cleaning and fault detection can be scored.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from edge.faults import FAULT_KINDS, faulty_values, in_span

QUANTITIES = ("temperature", "humidity", "light", "sound", "voltage")
GAS = "gas"                  # ppm: only motes with a gas sensor measure it
BACKGROUND_GAS_PPM = 0.4
DAY_MS = 24 * 3600 * 1000
HOUR_MS = 3600 * 1000
DEFAULT_NOISE = {"temperature": 0.2, "humidity": 0.5, "light": 5.0, "sound": 1.0, "voltage": 0.002, GAS: 0.3}


@dataclass(frozen=True)
class Fire:
    x: float
    y: float
    start_ms: int
    end_ms: int
    radius_m: float = 5.0
    peak_c: float = 80.0     # added to the temperature at the fire's centre
    location: str = ""       # the room (a supply-chain location) it burns in, if any: people there are in danger

    def heat(self, x: float, y: float, t_ms: int) -> float:
        if not self.start_ms <= t_ms < self.end_ms:
            return 0.0
        distance = math.hypot(x - self.x, y - self.y)
        return 0.0 if distance >= self.radius_m else self.peak_c * (1 - distance / self.radius_m)


@dataclass(frozen=True)
class GasRelease:
    x: float
    y: float
    start_ms: int
    speed_m_s: float = 2.0       # how fast the cloud's front moves out from the source
    peak_ppm: float = 100.0      # at the source; thinning linearly to nothing at `radius_m`
    duration_ms: int = 10_000    # how long the cloud stays at a point once it got there
    radius_m: float = 100.0

    def arrives_ms(self, x: float, y: float) -> int | None:
        """When the cloud reaches (x, y), or None if it never does."""
        distance = math.hypot(x - self.x, y - self.y)
        return None if distance >= self.radius_m else self.start_ms + int(1000 * distance / self.speed_m_s)

    def ppm(self, x: float, y: float, t_ms: int) -> float:
        arrives = self.arrives_ms(x, y)
        if arrives is None or not arrives <= t_ms < arrives + self.duration_ms:
            return 0.0
        return self.peak_ppm * (1 - math.hypot(x - self.x, y - self.y) / self.radius_m)


@dataclass(frozen=True)
class Environment:
    fires: tuple[Fire, ...] = ()
    releases: tuple[GasRelease, ...] = ()

    def truth(self, x: float, y: float, t_ms: int, started_ms: int) -> dict[str, float]:
        day = math.sin(2 * math.pi * (t_ms % DAY_MS) / DAY_MS)
        heat = sum(f.heat(x, y, t_ms) for f in self.fires)
        return {
            "temperature": round(22.0 + 3.0 * day + 0.05 * x - 0.03 * y + heat, 3),
            "humidity": round(40.0 - 5.0 * day + 0.02 * y, 3),
            "light": round(max(0.0, 300.0 + 250.0 * day), 3),
            "sound": round(45.0 + 5.0 * math.sin(2 * math.pi * (t_ms % 60_000) / 60_000), 3),
            "voltage": round(2.75 - 0.01 * (t_ms - started_ms) / HOUR_MS, 4),
            GAS: round(BACKGROUND_GAS_PPM + sum(r.ppm(x, y, t_ms) for r in self.releases), 3),
        }


@dataclass(frozen=True)
class MoteFault:
    kind: str
    start_ms: int
    end_ms: int | None = None   # None: to the end of the run

    def __post_init__(self) -> None:
        if self.kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault kind {self.kind!r} (known: {', '.join(FAULT_KINDS)})")

    def active(self, t_ms: int) -> bool:
        return in_span(t_ms, self.start_ms, self.end_ms)


@dataclass(frozen=True)
class MoteReading:
    receptor_id: str
    t_ms: int
    values: dict[str, float]
    truth: dict[str, float]
    fault: str = ""


@dataclass(frozen=True)
class MoteModel:
    receptor_id: str
    edge_node: str
    x: float
    y: float
    period_ms: int = 1000
    noise: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_NOISE))
    offset: dict[str, float] = field(default_factory=dict)          # calibration error per quantity
    drift_per_hour: dict[str, float] = field(default_factory=dict)  # added per hour since start
    fault: MoteFault | None = None
    battery_life_ms: int = 10 * 60 * 1000   # how long a battery fault takes to run away
    location: str = ""                      # the room (a supply-chain location) it is in, if given
    quantities: tuple[str, ...] = QUANTITIES   # what it measures (QUANTITIES + (GAS,): a gas sensor too)

    def __post_init__(self) -> None:
        if self.period_ms <= 0:
            raise ValueError(f"mote {self.receptor_id}: sample period must be positive")

    def due(self, t_ms: int, started_ms: int) -> bool:
        """Whether a sample falls at `t_ms` (samples sit on the mote's period from its start)."""
        return (t_ms - started_ms) % self.period_ms == 0

    def sample(self, env: Environment, t_ms: int, started_ms: int, rng: random.Random) -> MoteReading | None:
        """The mote's reading at `t_ms`; None when it is silent (fail-stop)."""
        truth = {q: v for q, v in env.truth(self.x, self.y, t_ms, started_ms).items() if q in self.quantities}
        hours = (t_ms - started_ms) / HOUR_MS
        measured = {q: round(v + self.offset.get(q, 0.0) + self.drift_per_hour.get(q, 0.0) * hours
                             + rng.gauss(0.0, self.noise.get(q, 0.0)), 4) for q, v in truth.items()}
        if self.fault is None or not self.fault.active(t_ms):
            return MoteReading(self.receptor_id, t_ms, measured, truth)
        fault = self.fault
        at_start = {q: v for q, v in env.truth(self.x, self.y, fault.start_ms, started_ms).items()
                    if q in self.quantities}
        progress = min(1.0, (t_ms - fault.start_ms + self.period_ms) / self.battery_life_ms)
        values = faulty_values(fault.kind, measured, at_start, progress, rng)
        return None if values is None else MoteReading(self.receptor_id, t_ms, values, truth, fault.kind)


def calibrated_motes(count: int, edge_node: str, seed: int, period_ms: int = 1000, spacing_m: float = 3.0,
                     offset_stddev: float = 0.5, drift_stddev: float = 0.05) -> list[MoteModel]:
    """`count` motes on a grid, each with its own calibration offset and drift (deterministic)."""
    rng = random.Random(seed)
    side = max(1, math.ceil(math.sqrt(count)))
    return [MoteModel(f"{edge_node}-m{i + 1}", edge_node, (i % side) * spacing_m, (i // side) * spacing_m, period_ms,
                      offset={"temperature": round(rng.gauss(0, offset_stddev), 3),
                              "humidity": round(rng.gauss(0, 2 * offset_stddev), 3)},
                      drift_per_hour={"temperature": round(rng.gauss(0, drift_stddev), 4)})
            for i in range(count)]
