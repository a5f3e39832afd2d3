"""Spark micro-batches out to Kafka, idempotently (foreachBatch with batch-id fencing).

A micro-batch that Spark replays after a failure carries the same batch id; the sink remembers
the last batch id it fully flushed (a file beside the query's checkpoint) and skips replays, so
every row reaches the topic once. Message keys are "<producer>:<batch>:<chunk>" as well, so a
consumer can also drop a duplicate that a broker-level retry created.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Sequence

from pyspark.sql import DataFrame

from dsp.status import BatchHook, BatchReport
from wire.codec import encode_row_batch
from wire.kafka import producers

ROWS_PER_MESSAGE = 5_000


def send_rows(producer, topic: str, producer_name: str, stream: str, columns: Sequence[str], rows: Sequence[tuple],
              batch_id: int, run: str = "") -> list:
    """A batch's rows as RowBatch messages (not flushed: see producers.deliver), keyed
    "<producer>:<batch>:<chunk>", each with its identity (`run`: see the proto); the sends'
    futures. Rows spread over several messages are put in one order first, so a batch sent
    again after a crash is cut into the same chunks and a reader drops each one it has."""
    now_ms = int(time.time() * 1000)
    if len(rows) > ROWS_PER_MESSAGE:
        rows = sorted(rows, key=repr)
    futures = []
    for chunk, start in enumerate(range(0, len(rows), ROWS_PER_MESSAGE)):
        value = encode_row_batch(producer_name, stream, columns, rows[start:start + ROWS_PER_MESSAGE], batch_id, now_ms,
                                 run=run, chunk=chunk)
        futures.append(producer.send(topic, key=f"{producer_name}:{batch_id}:{chunk}".encode(), value=value))
    return futures


def send_marker(producer, topic: str, producer_name: str, stream: str, batch_id: int, promise_ms: int,
                run: str = ""):
    """A progress marker (dsp.spark.progress): every later row of the stream has window_start >= promise_ms.
    The send's future (not flushed: see producers.deliver)."""
    value = encode_row_batch(producer_name, stream, [], [], batch_id, int(time.time() * 1000), promise_ms, run=run)
    return producer.send(topic, key=f"{producer_name}:wm:{batch_id}".encode(), value=value)


def new_run() -> str:
    """A fresh incarnation name for a stream whose batch ids start over."""
    return uuid.uuid4().hex[:12]


class BatchFence:
    """Remembers the last micro-batch id whose effects were completed, in a small file, and the
    run those batch ids belong to (made with the fence; a new fence numbers from 0 again)."""

    def __init__(self, path: str) -> None:
        self.path = path
        try:
            with open(path + ".run") as fh:
                self.run = fh.read().strip()
        except FileNotFoundError:
            self.run = new_run()
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path + ".run", "w") as fh:
                fh.write(self.run)

    def last(self) -> int:
        try:
            with open(self.path) as fh:
                return int(fh.read().strip() or -1)
        except FileNotFoundError:
            return -1

    def done(self, batch_id: int) -> None:
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        tmp = self.path + ".tmp"
        with open(tmp, "w") as fh:
            fh.write(str(batch_id))
        os.replace(tmp, self.path)


# Rows of the micro-batch (input columns) and its id -> the rows to write; may keep state.
BatchTransform = Callable[[list[tuple], int], list[tuple]]


class RowBatchSink:
    """foreachBatch target writing a plan's rows to one topic as RowBatch messages."""

    def __init__(self, bootstrap: str, topic: str, producer: str, stream: str, columns: Sequence[str],
                 fence_path: str, event_time: str | None = None, on_batch: BatchHook | None = None,
                 transform: BatchTransform | None = None, input_columns: Sequence[str] | None = None) -> None:
        self.bootstrap, self.topic, self.producer_name, self.stream = bootstrap, topic, producer, stream
        self.columns = list(columns)
        self.input_columns = list(input_columns or columns)
        self.transform = transform
        self.fence = BatchFence(fence_path)
        self.event_time = event_time
        self.on_batch = on_batch
        self._producer = None

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        if batch_id <= self.fence.last():
            return
        started = time.monotonic()
        rows = [tuple(row) for row in batch.select(*self.input_columns).collect()]
        if self.transform is not None:
            rows = self.transform(rows, batch_id)
        if rows:
            if self._producer is None:
                self._producer = producers.make_producer(self.bootstrap)
            try:
                producers.deliver(self._producer, send_rows(self._producer, self.topic, self.producer_name, self.stream,
                                                      self.columns, rows, batch_id, self.fence.run))
            except producers.DeliveryError:
                self._producer = None   # closed by deliver; Spark replays the batch on a new one
                raise
        self.fence.done(batch_id)
        if self.on_batch is not None:
            report = BatchReport(batch_id, rows_out=len(rows), duration_s=time.monotonic() - started,
                                 emitted_ms=int(time.time() * 1000))
            if rows and self.event_time in self.columns:
                idx = self.columns.index(self.event_time)
                report.max_event_ms = max(int(r[idx].timestamp() * 1000) for r in rows if r[idx] is not None)
            self.on_batch(report)

    def close(self) -> None:
        if self._producer is not None:
            self._producer.close(timeout=5)
            self._producer = None
