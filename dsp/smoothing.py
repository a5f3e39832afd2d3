"""The stateful half of adaptive smoothing (dsp.plan.Smooth): per receptor, a
dsp.smurf.ReaderSmoother stepped over every closed epoch, in the node's sink, with its state kept
beside the query's checkpoint so a restarted or replayed micro-batch continues exactly.

Spark hands over, per micro-batch, the reads per receptor, tag and epoch of the epochs the
watermark closed, and one heartbeat row (no tag) per receptor and epoch in which it cycled. The
newest epoch in a batch is closed for every receptor (the watermark is the node's), so each known
receptor is stepped up to it, through the epochs in which it read nothing too. Epochs before the
plan's `from_ms` are left out: smoothing starts with the query.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from collections import defaultdict
from collections.abc import Sequence

from dsp.codec import ms_to_datetime
from dsp.plan import Smooth
from dsp.smurf import ReaderSmoother

SMOOTH_INPUT_COLUMNS = ("window_start", "window_end", "receptor_id", "tag_id", "reads")   # dsp.compiler._smooth


def _ms(value: dt.datetime) -> int:
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return round(value.timestamp() * 1000)


class SmoothingState:
    """Receptor -> (last epoch stepped, its smoother), saved per micro-batch: the state before and
    after batch N, so a replay of N starts again from before it."""

    def __init__(self, plan: Smooth, path: str) -> None:
        self.plan, self.path = plan, path
        self.first_epoch = -(-plan.from_ms // plan.epoch_ms)
        self.receptors: dict[str, tuple[int, ReaderSmoother]] = {}
        self._loaded = False

    def _dump(self) -> dict:
        return {r: [stepped, smoother.to_json()] for r, (stepped, smoother) in self.receptors.items()}

    def _load(self, data: dict) -> None:
        self.receptors = {r: (stepped, ReaderSmoother.from_json(text, self.plan.delta, self.plan.max_window))
                          for r, (stepped, text) in data.items()}

    def _restore(self, batch_id: int) -> None:
        try:
            with open(self.path) as fh:
                saved = json.load(fh)
        except FileNotFoundError:
            return
        self._load(saved["before"] if saved["batch"] == batch_id else saved["after"])

    def __call__(self, rows: Sequence[tuple], batch_id: int) -> list[tuple]:
        """(window_start, window_end, receptor_id, tag_id, reads) in -> SMOOTH_COLUMNS rows out."""
        if not self._loaded:
            self._restore(batch_id)
            self._loaded = True
        reads: dict[tuple[int, str], dict[str, int]] = defaultdict(dict)
        firsts: dict[str, int] = {}   # each receptor's first epoch in this batch
        for window_start, _, receptor, tag, n in rows:
            epoch = _ms(window_start) // self.plan.epoch_ms
            if epoch < self.first_epoch:
                continue
            firsts[receptor] = min(firsts.get(receptor, epoch), epoch)
            if tag is not None:
                reads[(epoch, receptor)][tag] = n
        if not firsts:
            return []
        before = self._dump()
        closed = max(_ms(row[0]) // self.plan.epoch_ms for row in rows)
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
        self._save(batch_id, before)
        return out

    def _save(self, batch_id: int, before: dict) -> None:
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        tmp = self.path + ".tmp"
        with open(tmp, "w") as fh:
            json.dump({"batch": batch_id, "before": before, "after": self._dump()}, fh)
        os.replace(tmp, self.path)
