"""The stateful half of faulty-mote detection (base.plan.Qualify): one
base.mote_quality.MoteQuality per query, stepped over every closed sampling period in the node's
sink, its state saved per micro-batch (dsp.sink_state).

Spark hands over, per micro-batch, each mote's mean values per period of the periods the watermark
closed, with the mote's position. A mote is known from its first sample on; the newest period in
a batch is closed for every mote, so every period from the first seen to it is judged, each known
mote in it — a mote with no sample in a period is silent.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from base.mote_quality import MoteQuality, judge_periods
from base.plan import SAMPLE_QUANTITIES, Qualify
from dsp.sink_state import BatchState
from wire.codec import datetime_ms

QUALIFY_INPUT_COLUMNS = ("window_start", "receptor_id", "x", "y", *SAMPLE_QUANTITIES)   # dsp.compiler._qualify


class QualityState(BatchState):
    def __init__(self, plan: Qualify, path: str) -> None:
        super().__init__(path)
        self.plan = plan
        self.first_period = -(-plan.from_ms // plan.period_ms)
        self.quality = MoteQuality({})
        self.judged: int | None = None     # the last period judged

    def dump(self) -> list:
        return [self.judged, self.quality.to_json()]

    def load(self, data: list) -> None:
        self.judged, self.quality = data[0], MoteQuality.from_json(data[1])

    def __call__(self, rows: Sequence[tuple], batch_id: int) -> list[tuple]:
        """QUALIFY_INPUT_COLUMNS rows in -> QUALITY_COLUMNS rows out."""
        before = self.begin(batch_id)
        samples: dict[int, dict[str, tuple[float, float, dict[str, float]]]] = defaultdict(dict)
        for window_start, mote, x, y, *values in rows:
            period = datetime_ms(window_start) // self.plan.period_ms
            if period >= self.first_period and x is not None and y is not None:   # positions are needed
                samples[period][mote] = (x, y, {q: v for q, v in zip(SAMPLE_QUANTITIES, values, strict=True)
                                                if v is not None})
        if not samples:
            return []
        first = self.judged + 1 if self.judged is not None else min(samples)
        last = max(samples)
        out = judge_periods(self.quality, samples, first, last, self.plan.period_ms)
        self.judged = max(last, self.judged if self.judged is not None else last)
        self.commit(batch_id, before)
        return out
