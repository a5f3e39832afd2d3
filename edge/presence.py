"""Tags entering and leaving one reader's range, epoch by epoch, with ground truth: the
settings the cleaning benchmark scores smoothing on. Pure and deterministic for a seed.

A tag has a read rate: the chance that, while present, it answers at least once in an epoch of
`cycles` read cycles (the reader's per-cycle detection is drawn so that this holds). A static tag
is present throughout; a moving tag alternates stays in range and absences of random length
around its dwell time, so it enters and leaves.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass


@dataclass(frozen=True)
class TagTrace:
    tag_id: str
    epoch_rate: float                 # chance of at least one read in an epoch while present
    present: tuple[bool, ...]         # truly in range, per epoch


def cycle_rate(epoch_rate: float, cycles: int) -> float:
    """The per-cycle detection that reads a present tag at least once an epoch w.p. `epoch_rate`."""
    if not 0.0 <= epoch_rate <= 1.0:
        raise ValueError(f"read rate {epoch_rate} is outside [0, 1]")
    return 1 - (1 - epoch_rate) ** (1 / cycles)


def _stays(epochs: int, dwell: float, rng: random.Random) -> tuple[bool, ...]:
    """In range for ~dwell epochs, away for ~dwell epochs, and so on (exponential lengths, at
    least one epoch each), starting in or out at random."""
    present: list[bool] = []
    here = rng.random() < 0.5
    while len(present) < epochs:
        present += [here] * max(1, round(rng.expovariate(1 / dwell)))
        here = not here
    return tuple(present[:epochs])


def static_traces(tags: int, epochs: int, epoch_rate: float) -> list[TagTrace]:
    return [TagTrace(f"tag-{i}", epoch_rate, (True,) * epochs) for i in range(tags)]


def moving_traces(tags: int, epochs: int, epoch_rate: float, dwell: float, seed: int) -> list[TagTrace]:
    rng = random.Random(seed)
    return [TagTrace(f"tag-{i}", epoch_rate, _stays(epochs, dwell, rng)) for i in range(tags)]


def mixed_traces(tags: int, epochs: int, seed: int, rates: tuple[float, float] = (0.4, 0.95),
                 dwells: tuple[float, float] = (3.0, 300.0)) -> list[TagTrace]:
    """Heterogeneous tags: read rates uniform in `rates`, dwell times log-uniform in `dwells`
    epochs (seconds to minutes at one-second epochs): no single window suits them all."""
    rng = random.Random(seed)
    traces = []
    for i in range(tags):
        rate = rng.uniform(*rates)
        dwell = math.exp(rng.uniform(math.log(dwells[0]), math.log(dwells[1])))
        traces.append(TagTrace(f"tag-{i}", rate, _stays(epochs, dwell, rng)))
    return traces


def answered_cycles(trace: TagTrace, cycles: int, rng: random.Random) -> list[int]:
    """Read cycles per epoch in which the tag answered: binomial while present, none while away."""
    p = cycle_rate(trace.epoch_rate, cycles)
    return [sum(rng.random() < p for _ in range(cycles)) if here else 0 for here in trace.present]
