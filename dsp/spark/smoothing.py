"""The stateful half of adaptive smoothing (base.plan.Smooth): per receptor, a
base.smurf.ReaderSmoother stepped over every closed epoch, in the node's sink, with its state kept
beside the query's checkpoint so a restarted or replayed micro-batch continues exactly.

Spark hands over, per micro-batch, the reads per receptor, tag and epoch of the epochs the
watermark closed, and one heartbeat row (no tag) per receptor and epoch in which it cycled. The
newest epoch in a batch is closed for every receptor (the watermark is the node's), so each known
receptor is stepped up to it, through the epochs in which it read nothing too. Epochs before the
plan's `from_ms` are left out: smoothing starts with the query.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from base.plan import Smooth
from base.smurf import ReaderSmoother
from dsp.spark.sink_state import BatchState
from wire.codec import datetime_ms, ms_to_datetime

SMOOTH_INPUT_COLUMNS = ("window_start", "window_end", "receptor_id", "tag_id", "reads")   # dsp.spark.compiler._smooth


class SmoothingState(BatchState):
    """Receptor -> (last epoch stepped, its smoother)."""

    def __init__(self, plan: Smooth, path: str) -> None:
        super().__init__(path)
        self.plan = plan
        self.first_epoch = -(-plan.from_ms // plan.epoch_ms)
        self.receptors: dict[str, tuple[int, ReaderSmoother]] = {}

    def dump(self) -> dict:
        return {r: [stepped, smoother.to_json()] for r, (stepped, smoother) in self.receptors.items()}

    def load(self, data: dict) -> None:
        self.receptors = {r: (stepped, ReaderSmoother.from_json(text, self.plan.delta, self.plan.max_window))
                          for r, (stepped, text) in data.items()}

    def __call__(self, rows: Sequence[tuple], batch_id: int) -> list[tuple]:
        """(window_start, window_end, receptor_id, tag_id, reads) in -> SMOOTH_COLUMNS rows out."""
        before = self.begin(batch_id)
        reads: dict[tuple[int, str], dict[str, int]] = defaultdict(dict)
        firsts: dict[str, int] = {}   # each receptor's first epoch in this batch
        for window_start, _, receptor, tag, n in rows:
            epoch = datetime_ms(window_start) // self.plan.epoch_ms
            if epoch < self.first_epoch:
                continue
            firsts[receptor] = min(firsts.get(receptor, epoch), epoch)
            if tag is not None:
                reads[(epoch, receptor)][tag] = n
        if not firsts:
            return []
        closed = max(datetime_ms(row[0]) // self.plan.epoch_ms for row in rows)
        out = []
        epoch_ms = self.plan.epoch_ms
        for receptor in sorted(self.receptors.keys() | firsts.keys()):
            stepped, smoother = self.receptors.get(receptor, (firsts[receptor] - 1, None))
            smoother = smoother or ReaderSmoother(self.plan.delta, self.plan.max_window)
            for epoch in range(stepped + 1, closed + 1):
                start, end = ms_to_datetime(epoch * epoch_ms), ms_to_datetime((epoch + 1) * epoch_ms)
                out += [(start, end, receptor, tag, n, window)
                        for tag, n, window in smoother.step(reads.get((epoch, receptor), {}))]
            self.receptors[receptor] = (max(stepped, closed), smoother)
        self.commit(batch_id, before)
        return out
