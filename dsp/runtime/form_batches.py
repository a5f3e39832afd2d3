"""One form's share of a micro-batch through the parts that read it, and into the archive.

Who computes it: the driver's Arrow engine (dsp.operators) over its rows (dsp.operators.topic_batch); or — on a
cluster, and locally above HIFI_SPARK_BATCH_RECORDS — Spark over the batch's DataFrame for the
parts it can compute, only their partials coming back (dsp.spark.partials), the others taking
the rows. Every form's batch the node's own stream takes in is archived (dsp.runtime.archive) inside its
micro-batch, for queries over the past.
"""

from __future__ import annotations

import functools
import logging
import shutil
import threading
import time
from collections.abc import Callable

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame

from dsp.operators.expressions import epoch_ms
from dsp.operators.topic_batch import TOPIC_COLUMN, TopicBatch
from dsp.operators.tree import sources_under
from dsp.runtime.archive import Archive
from dsp.runtime.inputs import Reader
from dsp.runtime.parts import Part, Parts, Reports, push_tagged
from dsp.spark import kafka_read
from dsp.spark import partials as spark_partials

log = logging.getLogger("hifi.dsp")

# A batch of this many rows is archived on a thread of its own while the parts take it in (Parquet
# writes without the interpreter's lock: 0.3 s of a 2 M-row batch), and before the batch is
# recorded; a smaller one here, first. Measured 2026-11-28: a 16-row write 0.5 ms, 20 000 rows
# 10 ms, a thread's start 0.25 ms alone — but ~2.4 ms in a process of 33 lanes, where the new
# thread queues for the interpreter's lock (py-spy: 15 % of the 32 doors' batch thread).
ARCHIVE_APART_ROWS = 20_000
LATE_SPAN_MS = 60_000   # how far back a live batch Spark could not archive is taken to reach


class FormBatches:
    """Feeds a form's batch to the node's parts and archives it."""

    def __init__(self, node_id: str, parts: Parts, archive: Archive) -> None:
        self.node_id, self.parts, self.archive = node_id, parts, archive
        self.on_spark = 0   # batches whose parts Spark computed (dsp.spark.partials)

    def on_driver(self, reader: Reader, batch_id: int, table: pa.Table, producer, sent: list, reports: Reports,
                  skip: Callable[[Part], bool] = lambda part: False, archive: bool = True) -> int:
        """The batch's rows, here, through every part reading them (but `skip`'s);
        how many rows it had."""
        batch = TopicBatch(table, reader.topics)
        archiving = None
        if not reader.owner and archive:
            if table.num_rows < ARCHIVE_APART_ROWS:
                self._archive(reader, batch_id, table)
            else:
                archiving = threading.Thread(target=self._archive, args=(reader, batch_id, table),
                                             name="archive-batch")
                archiving.start()
        try:
            for part, topics in self.parts.topics_by_part(reader, batch.topics):
                if not skip(part):
                    self.parts.feed(part, functools.partial(push_tagged, batch.only(topics)), producer, sent, reports)
        finally:
            if archiving is not None:
                archiving.join()
        return table.num_rows

    def on_cluster(self, reader: Reader, batch_id: int, frame: DataFrame, producer, sent: list,
                   reports: Reports, archived_in: str = "") -> int:
        """The batch on Spark (dsp.spark.partials): the parts Spark can compute take its partials,
        the others its rows, here, in the same job (a batch of one topic: with its statistics too);
        archived by Spark's tasks once they have read it (`archived_in`: where they wrote the rows
        as they read them, dsp.spark.kafka_read). How many rows it had."""
        reading = {id(p): p for topic in reader.topics for p in self.parts.reading(reader, topic)}
        on_spark = [p for p in reading.values() if spark_partials.computable(p.root)]
        batch = spark_partials.BatchOnSpark.progress(frame, reader.topics,
                                                     [s for p in on_spark for s in sources_under(p.root)], defer=True)
        planned = {id(part): _planned(part, batch) for part in on_spark}
        ready = [p for p in planned.values() if isinstance(p, spark_partials.Planned)]
        rows_too = len(on_spark) < len(reading)   # the rest need the rows
        found = spark_partials.collect_batch(batch, ready, [frame] if rows_too else [])   # one job for all
        if not reader.owner:
            self._archive_on_spark(reader, batch_id, frame, archived_in)
        partials = dict(zip(map(id, ready), found, strict=False))
        for part in on_spark:
            self.parts.feed(part, functools.partial(_finish, planned[id(part)], partials), producer, sent, reports)
        self.on_spark += 1
        if rows_too:
            rows = found[-1]
            if isinstance(rows, Exception):
                raise rows
            done = {id(p) for p in on_spark}
            self.on_driver(reader, batch_id, rows, producer, sent, reports,
                           skip=lambda part: id(part) in done, archive=False)
        return batch.rows

    def archive_folder(self, reader: Reader) -> str:
        """Where Spark's tasks write the rows of `reader`'s batch as they read them ("" when the
        batch is not archived: a form of parts adopted from another node)."""
        return "" if reader.owner else self.archive.scratch()

    def _archive(self, reader: Reader, batch_id: int, table: pa.Table) -> None:
        """A batch's rows in one file, each with its topic (a shared reader's: its children's
        views). A batch the archive cannot take (a full disk) is logged and the stream goes on:
        the answers of the present come before the record of the past."""
        tagged = TOPIC_COLUMN in table.column_names
        if reader.shared and not tagged:   # a batch of a reader of one topic
            table = table.append_column(TOPIC_COLUMN, pa.array([reader.topics[0]] * table.num_rows, pa.string()))
        elif not reader.shared and tagged:   # a raw topic's rows: the reader's key names the topic
            table = table.drop_columns([TOPIC_COLUMN])
        try:
            self.archive.append(reader.key, batch_id, table)
        except Exception:  # noqa: BLE001 - see the docstring
            self.archive.usage.failed(event_span(table))
            log.exception("node %s: archiving batch %s of %s failed", self.node_id, batch_id, reader.key)

    def _archive_on_spark(self, reader: Reader, batch_id: int, frame: DataFrame, archived_in: str) -> None:
        """The batch archived from what Spark's tasks wrote (`archived_in`; else written by a job
        of its own, a Parquet folder per topic); as `_archive`, a failure is logged and the stream
        goes on."""
        try:
            if archived_in:
                written = kafka_read.archived(archived_in)
            else:
                written = spark_partials.write_by_topic(frame, reader.topics, self.archive.scratch())
            for topic, folder in written.items():
                if topic in reader.topics:
                    self.archive.adopt(reader.topic_archive_key(topic), batch_id, folder)
        except Exception:  # noqa: BLE001 - see _archive
            now = int(time.time() * 1000)   # (the rows' times are Spark's: a live batch's are about now)
            self.archive.usage.failed((now - LATE_SPAN_MS, now))
            log.exception("node %s: archiving batch %s of %s on Spark failed", self.node_id, batch_id, reader.key)
        finally:
            if archived_in:
                shutil.rmtree(archived_in, ignore_errors=True)


def event_span(table: pa.Table) -> tuple[int, int]:
    """The event times a batch's rows span (`ts`, or a view's `window_start`; now, for neither)."""
    column = next((c for c in ("ts", "window_start") if c in table.column_names), None)
    if column is None or not table.num_rows:
        now = int(time.time() * 1000)
        return now, now
    bounds = pc.min_max(epoch_ms(table[column]))
    return bounds["min"].as_py(), bounds["max"].as_py()


def _planned(part: Part, batch: spark_partials.BatchOnSpark) -> spark_partials.Planned | Exception | None:
    """The part's share of the batch planned (dsp.spark.partials.plan), or why it could not be."""
    try:
        return spark_partials.plan(part.root, batch)
    except Exception as exc:  # noqa: BLE001 - the part's failure, raised by `_finish` (Parts.feed fails it)
        return exc


def _finish(planned: spark_partials.Planned | Exception | None, partials: dict, root: object) -> pa.Table | None:
    """The part's output: its partials (as the batch's one job brought them) folded in."""
    if isinstance(planned, Exception):
        raise planned
    return None if planned is None else planned.finish(partials[id(planned)])
