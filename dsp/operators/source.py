"""Sources: a topic's rows in, their bound (raw: newest event time minus lateness; views: the children's markers)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import pyarrow as pa
import pyarrow.compute as pc

from base.plan import (
    PROGRESS_COLUMN,
    Source,
)
from dsp.operators.core import CLUSTER, WEIGHT, Operator, carry_hidden, none_max, none_min
from dsp.operators.expressions import arrow_schema, epoch_ms
from dsp.operators.topic_batch import TOPIC_COLUMN, TopicBatch

# Event time a parent waits for a child that has never sent a marker before leaving it out. At
# start children come up seconds apart (a parent that went on without the later one assigned
# its tags to the other's location, then dropped its rows as late: seen in the e2e suite).
SILENT_CHILD_GRACE_MS = 30_000


# A column only a raw topic's batches of that form have: a union of raw streams (receptor_stream)
# reads one topic in two forms, each reader's batch is for the source of its form.
FORM_COLUMN = {"rfid": "tag_id", "samples": "temperature"}


@dataclass(frozen=True)
class SourceProgress:
    """What one batch of a topic tells its source about event time."""

    newest_ms: int | None = None        # the newest event time among its rows (raw sources)
    mark_ms: int | None = None          # its newest progress marker (sources of children's views)
    triaged: bool = False               # a raw RFID batch: whether `triaged_span` is this batch's
    triaged_span: tuple[int, int] | None = None


@dataclass
class SourceOp(Operator):
    plan: Source
    newest_ms: int | None = None                       # raw sources: newest event time seen
    marks: dict[str, int] = field(default_factory=dict)  # marker sources: each topic's latest promise
    first_mark_ms: int | None = None                   # marker sources: the first promise of any topic
    triaged_span: tuple[int, int] | None = None        # raw sources: the last batch's, if triaged
    # raw sources fed a node's archive (a query over the past): how much more than the plan's
    # lateness the bound waits, so rows that came too late live are in their windows (dsp.runtime.shared)
    history_lateness_ms = 0

    def __post_init__(self) -> None:
        self.columns = self.plan.columns
        self.schema = arrow_schema(self.plan.columns)

    def reads(self, topic: str, names: Sequence[str]) -> bool:
        """Whether a batch of `topic` with columns `names` is this source's (a raw topic's batch
        of the other form is not: receptor_stream reads both)."""
        form = FORM_COLUMN.get(self.plan.format)
        return topic in self.plan.topics and (form is None or form in names)

    def push(self, topic: str, batch: pa.Table) -> pa.Table | None:
        names = batch.column_names
        if not self.reads(topic, names):
            return None
        progress = SourceProgress()
        hidden: dict[str, pa.ChunkedArray] = {}
        if self.plan.format == "rfid":
            span, hidden = self._triage(batch)
            progress = replace(progress, triaged=True, triaged_span=span)
            valid = pc.is_null(batch["error"]) if "error" in names else None
            if "tag_id" in names:   # heartbeat rows (a cycle, no tag) are for adaptive smoothing only
                tagged = pc.is_valid(batch["tag_id"])
                valid = tagged if valid is None else pc.and_(valid, tagged)
            # the plan's columns only, and filtered only if a row must go: a filter copies what it
            # keeps (2 M raw rows: 0.66 s filtering all twelve columns, most of a node's batch)
            batch = batch.select([name for name, _ in self.plan.columns])
            if hidden:
                batch = batch.append_column(WEIGHT, hidden[WEIGHT]).append_column(CLUSTER, hidden[CLUSTER])
            if valid is not None and not pc.all(valid).as_py():
                batch = batch.filter(valid)
        if PROGRESS_COLUMN in names:
            is_marker = pc.fill_null(batch[PROGRESS_COLUMN], False)
            promises = batch.filter(is_marker)
            if promises.num_rows:
                progress = replace(progress, mark_ms=pc.max(epoch_ms(promises[self.plan.event_time])).as_py())
            batch = batch.filter(pc.invert(is_marker))
        if self.plan.format == "samples" and batch.num_rows:
            # a sample batch's clock row (no receptor: dsp.spark.kafka_source) moves event time, nothing else
            progress = replace(progress, newest_ms=pc.max(epoch_ms(batch[self.plan.event_time])).as_py())
            batch = batch.filter(pc.is_valid(batch["receptor_id"]))
            if self.plan.sample_ms:   # `sample every`: the samples on the period only
                ms = epoch_ms(batch[self.plan.event_time])
                batch = batch.filter(pc.equal(pc.subtract(ms, pc.multiply(pc.divide(ms, self.plan.sample_ms),
                                                                           self.plan.sample_ms)), 0))
        rows = batch.select([name for name, _ in self.plan.columns]).cast(self.schema)
        if hidden:
            rows = carry_hidden(batch, rows)
        if self.plan.format != "samples" and rows.num_rows:
            progress = replace(progress, newest_ms=pc.max(epoch_ms(rows[self.plan.event_time])).as_py())
        self.advance(topic, progress)
        return rows

    def advance(self, topic: str, progress: SourceProgress) -> None:
        """Take in what a batch of `topic` promised (both the driver's path and Spark's, dsp.spark.partials)."""
        if progress.triaged:
            self.triaged_span = progress.triaged_span
        if progress.mark_ms is not None and self.plan.markers:
            self.marks[topic] = max(self.marks.get(topic, progress.mark_ms), progress.mark_ms)
            self.first_mark_ms = none_min(self.first_mark_ms, progress.mark_ms)
        if progress.newest_ms is not None and not self.plan.markers:
            self.newest_ms = none_max(self.newest_ms, progress.newest_ms)

    def tagged_rows(self, batch: TopicBatch, topics: set[str]) -> pa.Table | None:
        """Its rows of `topics` of a batch of children's views, each with its topic (no progress
        taken in: `advance_topics` does that); None when it reads none of them."""
        mine = [t for t in batch.topics if t in topics and self.reads(t, batch.names)]
        if not mine:
            return None
        keep = pc.invert(batch.is_marker)
        if len(mine) < len(batch.whole.topics):
            keep = pc.and_(keep, pc.is_in(batch.table[TOPIC_COLUMN], pa.array(mine, pa.string())))
        rows = batch.table.filter(keep)
        out = rows.select([name for name, _ in self.plan.columns]).cast(self.schema)
        return out.append_column(TOPIC_COLUMN, rows[TOPIC_COLUMN])

    def bound(self) -> int | None:
        if self.plan.markers:
            if not self.marks:
                return None
            heard = min(self.marks.values())
            waiting = self.first_mark_ms is not None and heard - self.first_mark_ms < SILENT_CHILD_GRACE_MS
            if len(self.marks) < len(self.plan.topics) and waiting:
                return None
            return heard
        if self.newest_ms is None:
            return None
        return self.newest_ms - self.plan.watermark_ms - self.history_lateness_ms

    def triaged(self) -> tuple[int, int] | None:
        return self.triaged_span

    def _triage(self, batch: pa.Table) -> tuple[tuple[int, int] | None, dict[str, pa.ChunkedArray]]:
        """A raw batch's triage: the event-time span of its rows if its reader left records out
        (rows of weight other than 1), and then the hidden weight and record columns."""
        if "weight" not in batch.column_names or not batch.num_rows:
            return None, {}
        # every weight 1 (a null is 1) in one pass with nothing allocated: 2 M rows in ~5 ms,
        # against ~60 ms filling nulls and comparing (measured)
        if all(v in (None, 1) for v in pc.min_max(batch["weight"]).as_py().values()):
            return None, {}
        weight = pc.fill_null(batch["weight"], 1)
        stamps = epoch_ms(batch[self.plan.event_time])
        low, high = pc.min(stamps).as_py(), pc.max(stamps).as_py()
        span = (low, high) if low is not None else (self.newest_ms or 0, self.newest_ms or 0)
        record = pc.add(pc.multiply(pc.cast(pc.fill_null(batch["partition"], 0), pa.int64()), 1 << 40),
                        pc.fill_null(batch["offset"], 0))
        return span, {WEIGHT: pc.cast(weight, pa.int64()), CLUSTER: record}


def view_progress(batch: TopicBatch, source: SourceOp, topic: str) -> SourceProgress:
    """What a batch's rows of `topic` tell a source of children's views (as SourceOp.push finds it)."""
    newest, mark = batch.times(source.plan.event_time).get(topic, (None, None))
    return SourceProgress(newest_ms=newest, mark_ms=mark)
