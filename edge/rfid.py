"""RFID readers as real deployments see them: antennas whose detection probability falls with a
tag's distance and orientation, read strength with noise, ghost reads, overlapping neighbours,
and reader faults. Pure.

A tag truly at the reader's location is reported by each antenna per read cycle with
probability `read_rate × orientation × distance falloff` (the default averages 60-70 %, the
figure deployments report); a tag at a neighbouring location (the next dock door) with that
times `overlap`. Ghost reads (tags that are not there) arrive at `ghost_rate` per cycle. A tag
read by several antennas is reported once, by the antenna that read it strongest. Every read
says whether it was a ghost or an overlap, so cleaning can be scored.
"""

from __future__ import annotations

import functools
import hashlib
import math
import random
from dataclasses import dataclass

from edge.faults import in_span
from wire.codec import TagObservation

READER_FAULTS = ("stop", "flap", "degrade")


@dataclass(frozen=True)
class Antenna:
    x: float = 0.0
    y: float = 0.0
    range_m: float = 5.0


@dataclass(frozen=True)
class ReaderFault:
    kind: str                   # stop: no cycles; flap: off every other period; degrade: read rate × factor
    start_ms: int
    end_ms: int | None = None
    factor: float = 0.3         # degrade
    period_ms: int = 2000       # flap: on for a period, off for the next

    def __post_init__(self) -> None:
        if self.kind not in READER_FAULTS:
            raise ValueError(f"unknown reader fault {self.kind!r} (known: {', '.join(READER_FAULTS)})")

    def active(self, t_ms: int) -> bool:
        return in_span(t_ms, self.start_ms, self.end_ms)


@dataclass(frozen=True)
class Read:
    observation: TagObservation
    ghost: bool = False
    overlap: bool = False       # the tag is truly at a neighbouring location


@functools.lru_cache(maxsize=65_536)
def tag_pose(tag_id: str, location: str) -> tuple[float, float, float]:
    """Where in the location a tag sits (x, y within 3 m of the reader) and how it faces
    (radians), fixed per tag and location: a hash, so it is the same on every run."""
    digest = hashlib.blake2b(f"{tag_id}@{location}".encode(), digest_size=12).digest()
    u = [int.from_bytes(digest[i:i + 4], "big") / 2**32 for i in (0, 4, 8)]
    return 3.0 * u[0], 3.0 * u[1] - 1.5, 2 * math.pi * u[2]


@dataclass(frozen=True)
class RfidReader:
    receptor_id: str
    location: str
    edge_node: str
    antennas: tuple[Antenna, ...] = (Antenna(),)
    read_rate: float = 0.9            # at the antenna, facing it; the average over poses is ~0.65
    ghost_rate: float = 0.0           # expected ghost reads per cycle
    overlap: float = 0.0              # detection factor for tags at the neighbouring locations
    neighbours: tuple[str, ...] = ()
    strength_mean: float = 0.6
    strength_stddev: float = 0.1
    faults: tuple[ReaderFault, ...] = ()

    def __post_init__(self) -> None:
        for name in ("read_rate", "overlap"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"reader {self.receptor_id}: {name} {getattr(self, name)} is outside [0, 1]")
        if self.ghost_rate < 0:
            raise ValueError(f"reader {self.receptor_id}: ghost_rate {self.ghost_rate} is negative")

    def cycles_at(self, t_ms: int) -> bool:
        """Whether the reader runs a read cycle at `t_ms` (a stopped or flapping reader does not)."""
        for fault in self.faults:
            if fault.active(t_ms) and (fault.kind == "stop" or
                                       (fault.kind == "flap" and (t_ms - fault.start_ms) // fault.period_ms % 2)):
                return False
        return True

    def rate_factor(self, t_ms: int) -> float:
        factor = 1.0
        for fault in self.faults:
            if fault.kind == "degrade" and fault.active(t_ms):
                factor *= fault.factor
        return factor

    def detection(self, antenna: Antenna, tag_id: str, location: str) -> float:
        """Per-cycle probability that `antenna` reads `tag_id` sitting at `location`."""
        x, y, facing = tag_pose(tag_id, location)
        distance = math.hypot(x - antenna.x, y - antenna.y)
        falloff = max(0.0, 1.0 - (distance / antenna.range_m) ** 2)
        orientation = 0.55 + 0.45 * abs(math.cos(facing))   # edge-on tags couple worst
        return self.read_rate * falloff * orientation

    def read_cycle(self, present: list[str], nearby: list[tuple[str, str]], t_ms: int, rng: random.Random,
                   ghost_pool: tuple[str, ...] = ()) -> list[Read]:
        """One read cycle: `present` tags are at this location, `nearby` (tag, location) at a
        neighbouring one; ghosts are drawn from `ghost_pool`. Empty when the reader is down."""
        if not self.cycles_at(t_ms):
            return []
        factor = self.rate_factor(t_ms)
        candidates = [(tag, self.location, 1.0, False) for tag in present]
        candidates += [(tag, where, self.overlap, True) for tag, where in nearby]
        reads = []
        for tag, where, scale, overlapped in candidates:
            best: tuple[float, int] | None = None
            for number, antenna in enumerate(self.antennas, 1):
                if rng.random() < self.detection(antenna, tag, where) * scale * factor:
                    strength = max(0.0, rng.gauss(self.strength_mean * (0.6 if overlapped else 1.0),
                                                  self.strength_stddev))
                    best = max(best or (strength, number), (strength, number))
            if best is not None:
                reads.append(Read(TagObservation(tag, best[1], round(best[0], 4)), overlap=overlapped))
        if ghost_pool and self.ghost_rate > 0:
            here = set(present)
            for _ in range(_poisson(self.ghost_rate, rng)):
                tag = rng.choice(ghost_pool)
                if tag in here:
                    continue   # not a ghost: the tag is there (so a tiny pool thins the ghost rate)
                ghost = TagObservation(tag, rng.randrange(len(self.antennas)) + 1,
                                       round(max(0.0, rng.gauss(0.25, self.strength_stddev)), 4))
                reads.append(Read(ghost, ghost=True))
        return reads


def _poisson(mean: float, rng: random.Random) -> int:
    """Knuth's method: fine for the small means of ghost rates."""
    limit, k, product = math.exp(-mean), 0, rng.random()
    while product > limit:
        k += 1
        product *= rng.random()
    return k
