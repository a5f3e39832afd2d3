"""Mote quality (base.mote_quality): each closed period's means judged."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import pyarrow as pa

from base.mote_quality import MoteQuality, judge_periods
from base.plan import SAMPLE_QUANTITIES, Aggregate, AggSpec, Qualify
from base.plan_schema import output_columns
from dsp.operators.expressions import arrow_schema, epoch_ms
from dsp.operators.rowwise import RowwiseOp
from wire.windows import Window


@dataclass
class QualifyOp(RowwiseOp):
    """Faulty-mote detection (base.plan.Qualify): its child is each mote's mean values per sampling
    period (an AggregateOp, `qualify_means`), emitted as the input's bound closes the period; each
    batch of closed periods is judged in order from the one after the last judged to the newest
    (base.mote_quality.judge_periods), every mote seen so far in each: a mote with no sample in a
    period is silent. Motes with no position are left out (their neighbours are unknown)."""

    plan: Qualify
    quality: MoteQuality = field(default_factory=lambda: MoteQuality({}))
    judged: int | None = None      # the last period judged

    def __post_init__(self) -> None:
        self.columns = output_columns(self.plan)
        self.schema = arrow_schema(self.columns)
        self.first_period = -(-self.plan.from_ms // self.plan.period_ms)

    def apply(self, means: pa.Table | None) -> pa.Table | None:
        if means is None or not means.num_rows:
            return means if means is None else self.schema.empty_table()
        samples: dict[int, dict[str, tuple[float, float, dict[str, float]]]] = defaultdict(dict)
        values = [means[q].to_pylist() for q in SAMPLE_QUANTITIES]
        for i, (start, mote, x, y) in enumerate(zip(epoch_ms(means["window_start"]).to_pylist(),
                                                   *(means[c].to_pylist() for c in ("receptor_id", "x", "y")),
                                                   strict=True)):
            period = start // self.plan.period_ms
            if period >= self.first_period and x is not None and y is not None:
                samples[period][mote] = (x, y, {q: v[i] for q, v in zip(SAMPLE_QUANTITIES, values, strict=True)
                                                if v[i] is not None})
        if not samples:
            return self.schema.empty_table()
        first, last = self.judged + 1 if self.judged is not None else min(samples), max(samples)
        rows = judge_periods(self.quality, samples, first, last, self.plan.period_ms)
        self.judged = last if self.judged is None else max(last, self.judged)
        return pa.Table.from_pylist([dict(zip(self.schema.names, row, strict=True)) for row in rows],
                                    schema=self.schema)

    def bound(self) -> int | None:
        """A period the means closed but no sample has yet followed (every mote silent) is judged
        later: no row to come is older than the period after the last judged."""
        inner = self.child.bound()
        if inner is None or self.judged is None:
            return inner
        return min(inner, (self.judged + 1) * self.plan.period_ms)


def qualify_means(plan: Qualify) -> Aggregate:
    """What a Qualify judges: each mote's mean values, with its position, per sampling period."""
    return Aggregate(plan.child, ("receptor_id", "x", "y"), tuple(AggSpec(q, "avg", q) for q in SAMPLE_QUANTITIES),
                     window=Window(plan.period_ms, plan.period_ms))
