"""Data Triage at an edge's raw reader: what a micro-batch decodes exactly, and what it samples.

An edge node with a latency target (topology `latency_target`) gives each read of a raw-topic
range a time budget. Records are decoded exactly while the read is within it; once it is spent,
the rest of the range is sampled: a record is decoded with probability 1/k (a hash of its
position, so the same range samples alike), its rows weighing k, and the others are left out
undecoded. k is chosen so that decoding the sample takes about SAMPLE_SHARE of the budget at
the cost per record measured so far, and the sample keeps at least MIN_SAMPLE records. The next
range starts exact again: when the overload passes the node is exact again, with no restart.

Decoding is what a record costs a node most (issue 15: a reading decoded into Python values and
Arrow costs ~8 µs, fetching it ~1.3 µs), so a record left out costs only its fetch.

Downstream (dsp.operators) counts and sums weigh each row by its weight (the Horvitz-Thompson
estimate, unbiased), and an `approximate` query's windows say whether they were triaged and
bound the error. What was left out is still in the raw topic: the archive's triage rows name
each range sampled (weight 0, from `offset` to `triaged_to`), so the exact answer can be computed
later: the archive's rows of weight 1 and every record of those ranges.
Pure but for the clock (dsp.runtime.archive's exact_rows and sampled_ranges read an archived batch back;
this module stays light: every Python worker imports it).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

# Of the budget, the share decoding the sampled rest of a range should take (the rest of the
# micro-batch — the fetch of what is left out, Spark, the parts — takes the other share).
SAMPLE_SHARE = 0.5

# Of a node's latency target, the share a raw range's read may spend decoding exactly: a reading
# waits up to a trigger interval for its batch, then the read, Spark and the parts; a window
# goes out in the batch after its end.
BUDGET_SHARE = 0.25

# A range sampled keeps at least this many records (fewer left over: they are decoded exactly):
# a sample of a few records would weigh each hundreds of times, and a group none of them fell in
# would look exact (measured: a 1 s overrun at the exact rate sampled 1 in ~500, windows 40 % off
# with bounds of 0).
MIN_SAMPLE = 200

_MASK = (1 << 64) - 1


def read_budget_ms(latency_target_ms: int) -> int:
    """What a range's read may spend decoding exactly, for a node's latency target (0: no triage)."""
    return int(latency_target_ms * BUDGET_SHARE)


def sampled(partition: int, offset: int, every: int) -> bool:
    """Whether a record is in a 1-in-`every` sample: splitmix64 of its position (consecutive
    offsets, and the receptors that take turns on them, must not fall into a pattern)."""
    x = (offset + (partition << 40) + 0x9E3779B97F4A7C15) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return (x ^ (x >> 31)) % every == 0


@dataclass
class Triage:
    """One range's triage: ask `weight` of each record, in order."""

    budget_s: float                       # 0: no latency target, every record is decoded
    partition: int = 0
    clock: Callable[[], float] = time.monotonic
    # when the first record came: waiting for the broker is not work (after a 30 s load at 700 k
    # readings/s the embedded broker took up to 0.5 s to answer a range's first fetch, which had
    # spent the budget before one record was decoded)
    started: float | None = None
    decoded: int = 0                      # records decoded exactly
    every: int = 1                        # 1: exact so far; k: sampling 1 in k
    sampled_from: int | None = None       # offset of the first record not decoded exactly
    left_out: int = 0

    def weight(self, offset: int, end: int) -> int:
        """The weight of the record at `offset`'s rows (1: exact; k: sampled); 0: leave it out.
        `end`: where the range ends (how much is left)."""
        if self.every == 1:
            if self.started is None:
                self.started = self.clock()
            elapsed = self.clock() - self.started
            if not self.budget_s or elapsed < self.budget_s or not self.decoded:
                self.decoded += 1
                return 1
            left = end - offset
            every = min(math.ceil(left * elapsed / self.decoded / (SAMPLE_SHARE * self.budget_s)), left // MIN_SAMPLE)
            if every < 2:   # little left over: decoded exactly
                self.budget_s = 0.0
                self.decoded += 1
                return 1
            self.every, self.sampled_from = every, offset
        if sampled(self.partition, offset, self.every):
            return self.every
        self.left_out += 1
        return 0
