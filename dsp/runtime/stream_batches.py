"""A micro-batch of a node's stream, exactly once: the batch in flight recorded before it starts
(`BatchCheckpoint.intend`), its forms through the parts in key order, its output delivered, then
its fence, the stream's position and the parts' state saved together. A batch Spark replays after
the save is skipped; one that fails midway puts the parts back to the last save and runs again,
over its own logged ends, before the next one: it makes the same messages, and sends only those
its topics do not hold yet (dsp.runtime.unrepeated), so each stands once in the log; every reader of the
project still drops what it has seen (wire.codec's identities).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import pyarrow as pa
from pyspark.sql import DataFrame

from dsp.runtime.checkpoint import BatchCheckpoint
from dsp.runtime.control_first import ControlFirstLock
from dsp.runtime.faults import AFTER_FLUSH, crash_point
from dsp.runtime.form_batches import FormBatches
from dsp.runtime.inputs import NodeInputs, Reader, RecentInput, lane_name
from dsp.runtime.lane_fetch import Fetched, oldest_record_ms
from dsp.runtime.parts import Parts, Reports
from dsp.runtime.process_stream import ProcessStream
from dsp.runtime.unrepeated import Unrepeated
from dsp.spark.handoff import sweep_handoff
from dsp.spark.lane_offsets import OffsetRange
from dsp.spark.offset_log import Offsets
from dsp.turns import stepping_aside
from wire.kafka import producers

log = logging.getLogger("hifi.dsp")


class StreamBatches:
    """Runs the node's streams' micro-batches through its forms and parts."""

    def __init__(self, node_id: str, inputs: NodeInputs, parts: Parts, forms: FormBatches,
                 checkpoint: BatchCheckpoint, locks: ControlFirstLock, stream: ProcessStream,
                 producer: Callable[[], object], bootstrap: str, handoff_dir: str) -> None:
        self.node_id, self.inputs, self.parts, self.forms = node_id, inputs, parts, forms
        self.checkpoint, self.locks, self.stream, self.producer = checkpoint, locks, stream, producer
        self.bootstrap, self.handoff_dir = bootstrap, handoff_dir
        self.recent_input = RecentInput()
        # (fence key, batch id) that failed after it started: run again before the next (`run`)
        self.pending: tuple[str, int] | None = checkpoint.unfinished()

    def ranges(self, stream: str, batch_id: int, ends: Offsets, identity: str) -> list[OffsetRange]:
        """The ranges `run` reads in this process for the batch (none for a batch it skips, or when
        one that failed runs first: its own ranges are others)."""
        fence_key = f"{stream}@{identity}"
        if batch_id <= self.checkpoint.fences.get(fence_key, -1) or self.pending is not None:
            return []
        return [r for reader, start, end in self.inputs.forms_in(stream, self.inputs.bounds(stream, ends))
                for r in self.inputs.ranges_here(reader, start, end)]

    def run(self, stream: str, batch_id: int, ends: Offsets, identity: str, fetched: Fetched | None = None) -> None:
        """Batch `batch_id` of the process's stream (`identity`: its checkpoint's id) for the node's
        stream `stream`, up to `ends`; `fetched`: records of its ranges fetched already
        (dsp.runtime.lane_fetch). A batch that failed after it started runs first, with its own ends: what
        it delivered before goes out again alike."""
        fence_key = f"{stream}@{identity}"
        pending = self.pending
        if pending is not None and pending[0] == fence_key and pending[1] < batch_id:
            earlier = self.stream.ends(pending[1], lane_name(self.node_id, stream))
            if earlier is None:
                log.warning("node %s: batch %d of %s failed and is no longer logged; the stream goes on",
                            self.node_id, pending[1], stream)
                self.pending = None
            else:
                self._run_one(stream, pending[1], earlier, fence_key)
        self._run_one(stream, batch_id, ends, fence_key, fetched)

    def forget(self, idle: set[str]) -> None:
        """Streams that read nothing any more: a batch of theirs that failed will not come again."""
        if self.pending is not None and self.pending[0].rpartition("@")[0] in idle:
            self.pending = None

    def _run_one(self, stream: str, batch_id: int, ends: Offsets, fence_key: str, fetched: Fetched | None = None
                 ) -> None:
        """One micro-batch of the node's stream: form by form (in key order), topic by topic,
        through every part that reads them. Its forms are read before the lock is taken (and again
        under it for a form that came or changed meanwhile)."""
        if batch_id <= self.checkpoint.fences.get(fence_key, -1):
            return   # a replay of a batch whose effects were saved: not read again
        if self.handoff_dir and batch_id % 100 == 0:   # files of tasks that failed and ran again
            sweep_handoff(self.handoff_dir, older_than_s=600)
        forms = self.inputs.forms_in(stream, self.inputs.bounds(stream, ends))
        if not forms:
            return   # nothing new for the node: nothing to save
        fetched = dict(fetched or {})   # the batch's records by range, fetched once for all its forms (read_here)
        persisted: list[DataFrame] = []   # the forms Spark reads, unpersisted once the batch is done

        def take(reader: Reader, start: Offsets, end: Offsets) -> tuple[DataFrame | None, pa.Table | None, str]:
            frame, table, archived_in = self.inputs.take(reader, start, end, fetched,
                                                         lambda: self.forms.archive_folder(reader))
            if frame is not None:
                persisted.append(frame)
            return frame, table, archived_in

        taken = {reader.key: ((start, end), take(reader, start, end)) for reader, start, end in forms}
        with self.locks.batch():
            bounds = self.inputs.bounds(stream, ends)   # the starts as they are now (a deploy may have set some)
            producer, sent = self.producer(), []
            # a batch that failed after it started sends only what its topics lack (dsp.runtime.unrepeated)
            sender = Unrepeated(producer, self.bootstrap, self.node_id) if self.pending == (fence_key, batch_id) \
                else producer
            reports: Reports = []
            self.checkpoint.intend(fence_key, batch_id)
            rows = 0
            try:
                for reader, start, end in self.inputs.forms_in(stream, bounds):   # the forms as they are now
                    read_at, read = taken.get(reader.key, (None, None))
                    frame, table, archived_in = read if read_at == (start, end) else take(reader, start, end)
                    if frame is not None:
                        with stepping_aside():   # Spark's jobs: the other nodes' lanes go on meanwhile
                            rows += self.forms.on_cluster(reader, batch_id, frame, sender, sent, reports,
                                                          archived_in)
                    else:
                        rows += self.forms.on_driver(reader, batch_id, table, sender, sent, reports)
                producers.deliver(producer, sent)
                if isinstance(sender, Unrepeated):
                    sender.report(batch_id)
                if sent:
                    crash_point(AFTER_FLUSH, self.node_id)
            except BaseException:
                # the parts took the batch in but did not record it: back to the saved state,
                # and failing the stream makes Spark replay the batch. What was delivered goes out
                # again alike (same run, batch ids and chunks) and every reader drops it: exactly
                # once. A process that dies here does the same when it starts again.
                log.warning("node %s: batch %s of %s failed with %d messages sent; it runs again from the saved "
                            "state", self.node_id, batch_id, stream, len(sent))
                self.parts.restore(self.checkpoint.at_last_save())
                self.pending = (fence_key, batch_id)
                raise
            finally:
                for frame in persisted:
                    frame.unpersist()
            self.checkpoint.fences[fence_key] = batch_id
            self.inputs.advance(stream, bounds)
            self.save()
            oldest_ms = oldest_record_ms(fetched)   # None: Spark's tasks read the batch
            self.recent_input.add(rows, time.monotonic(), None if oldest_ms is None else time.time() * 1000 - oldest_ms)
            self.pending = None
        # the parts' hooks (the node's statistics) once the batch is recorded: a batch that
        # failed and runs again counts once
        self.parts.run_hooks(reports)

    def save(self) -> None:
        """The parts' state with the fences and positions (the batch checkpoint)."""
        self.checkpoint.save(self.parts.saved())
