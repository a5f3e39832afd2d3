"""An RFID reader's read cycle: which present tags it reports, with what strength. Pure.

Each present tag is reported with probability `read_rate` per cycle (real deployments see
60-70 %); the read strength is Gaussian noise around `strength_mean`, clipped at 0.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from dsp.codec import TagObservation


@dataclass(frozen=True)
class ReaderModel:
    receptor_id: str
    location: str
    edge_node: str
    read_rate: float = 0.7
    strength_mean: float = 0.6
    strength_stddev: float = 0.1
    antennas: int = 1

    def __post_init__(self) -> None:
        if not 0.0 <= self.read_rate <= 1.0:
            raise ValueError(f"reader {self.receptor_id}: read_rate {self.read_rate} is outside [0, 1]")

    def read_cycle(self, present: list[str], rng: random.Random) -> list[TagObservation]:
        reads = []
        for tag_id in present:
            if rng.random() < self.read_rate:
                strength = max(0.0, rng.gauss(self.strength_mean, self.strength_stddev))
                reads.append(TagObservation(tag_id, rng.randrange(self.antennas) + 1, round(strength, 4)))
        return reads
