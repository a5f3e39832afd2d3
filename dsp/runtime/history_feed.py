"""The past of a part deployed with `history_from_ms` (a query `--since`, a replay, a live query
from just before its submission): the archived batches of the forms it joins, from that time on,
fed in the order they came (dsp.runtime.archive) before it joins the live stream at the next batch (the
runtime holds its lock: no batch missing or doubled at the seam); or, over a long past, computed by
Spark over the archive's files as one batch (dsp.spark.past).
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Mapping, Sequence

from pyspark.sql import SparkSession

from dsp.operators.build import lateness_seen
from dsp.operators.topic_batch import TopicBatch
from dsp.operators.tree import raw_sources, sources_under
from dsp.runtime.archive import Archive
from dsp.runtime.inputs import Reader
from dsp.runtime.parts import Part, Parts, Reports, push_tagged
from dsp.spark import partials as spark_partials
from dsp.spark import past as spark_past
from dsp.spark.partials import SparkBatches
from wire.kafka import producers

log = logging.getLogger("hifi.dsp")

# A part fed more history than this is over the past (`--since`, a replay): it reads its node's
# own parts' outputs from their topics. A live query's parts are fed the seconds since their
# submission and take those outputs in process, as they come.
PAST_MS = 10_000

# A query over the past keeps rows that came this late for their windows (the intake refuses
# rows further behind than its max_behind, 10 minutes by default; the windows wait this long).
HISTORY_LATENESS_CAP_MS = 10 * 60_000


class HistoryFeed:
    """Feeds new parts the node's archived batches."""

    def __init__(self, node_id: str, spark: SparkSession, archive: Archive, parts: Parts,
                 spark_batches: SparkBatches, producer: Callable[[], object]) -> None:
        self.node_id, self.spark, self.archive, self.parts = node_id, spark, archive, parts
        self.spark_batches, self.producer = spark_batches, producer
        self.on_spark = 0   # pasts Spark computed

    def feed(self, part: Part, since_ms: int, past: bool, readers: Mapping[str, Reader]) -> None:
        """Feed a new part the batches the `readers` it joins archived from `since_ms` on; `past`:
        a query over the past, whose raw sources first wait as long as the archive's latest row
        came late."""
        joined = {key: reader for key, reader in readers.items()
                  if not reader.owner and any((t, reader.format) in part.inputs for t in reader.topics)}
        archived: dict[str, list[str]] = {}   # archive key -> the part's topics among its rows
        for reader in joined.values():
            for topic in [t for t in reader.topics if (t, reader.format) in part.inputs]:
                for archive_key in reader.archive_keys(topic):
                    archived.setdefault(archive_key, []).append(topic)
        if past and self._on_spark(part, since_ms, archived):
            return
        late_ms = self._lateness_seen(joined, since_ms) if past else 0
        sources = raw_sources(part.root)
        for source in sources:   # a row that came too late for its window live is in it over the past
            source.history_lateness_ms = max(0, late_ms - source.plan.watermark_ms)
        producer, sent, reports = self.producer(), [], []
        batches = 0
        for key, table in self.archive.batches(since_ms, archived):
            batch = TopicBatch(table, archived[key])   # a whole batch's file: the part's topics of it
            self.parts.feed(part, functools.partial(push_tagged, batch), producer, sent, reports)
            batches += 1
        for source in sources:   # the live stream's own lateness from the seam on
            source.history_lateness_ms = 0
        self._delivered(producer, sent, reports)
        log.info("node %s: part %s fed %d archived batches from %d on (rows up to %d ms late kept)", self.node_id,
                 part.managed.query_id, batches, since_ms, late_ms)

    def _on_spark(self, part: Part, since_ms: int, archived: Mapping[str, Sequence[str]]) -> bool:
        """The part's past computed by Spark over the archive's files as one batch (dsp.spark.past)
        when Spark can compute the part and `SparkBatches.past` says so; whether it was."""
        if not spark_partials.computable(part.root) or not self.spark_batches.past(int(time.time() * 1000) - since_ms):
            return False
        producer, sent, reports = self.producer(), [], []
        with self.archive.held():
            stored = self.archive.stored(since_ms, archived)
            frame = spark_past.archived_frame(self.spark, stored, archived)
            if frame is not None:
                batch = spark_partials.BatchOnSpark.progress(frame, sorted({t for ts in archived.values() for t in ts}),
                                                             sources_under(part.root))
                self.parts.feed(part, functools.partial(spark_partials.push, batch=batch, together=True),
                                producer, sent, reports)
                self.on_spark += 1
        self._delivered(producer, sent, reports)
        log.info("node %s: part %s fed its past from %d on by Spark (%d archived files or row groups)",
                 self.node_id, part.managed.query_id, since_ms, len(stored))
        return True

    def _delivered(self, producer, sent: list, reports: Reports) -> None:
        producers.deliver(producer, sent)
        self.parts.run_hooks(reports)   # what it emitted counts in the node's statistics like the rest

    def _lateness_seen(self, joined: Mapping[str, Reader], since_ms: int) -> int:
        """How late the latest raw row the archive holds from `since_ms` on came (capped)."""
        raw = [key for key, reader in joined.items() if reader.format in ("rfid", "samples")]
        found = max((lateness_seen((table for _, table in self.archive.batches(since_ms, [key])), "ts")
                     for key in raw), default=0)
        return min(found, HISTORY_LATENESS_CAP_MS)
