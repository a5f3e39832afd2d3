"""The DSP manager: one node's set of streaming queries on the shared Spark session.

Queries are added, cancelled, suspended and resumed on the fly. Each has its own checkpoint
under `<state_dir>/<node>/<query_id>`, so suspend/resume (and a node restart) continue from the
last committed micro-batch.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from base.part_spec import PartError, PartSpec
from base.plan import RAW_RFID_SOURCE_COLUMNS, Plan, Smooth, Source
from base.plan_schema import event_time_column, output_columns, sources, window_of
from dsp.spark.compiler import CompileContext, Ingest, compile_plan, read_source
from dsp.spark.kafka_sink import BatchTransform, RowBatchSink
from dsp.spark.progress import MarkerTarget, markers_for
from dsp.spark.smoothing import SMOOTH_INPUT_COLUMNS, SmoothingState
from dsp.status import BatchHook, ManagedQuery
from wire.intake import IntakeRules


class QueryExists(ValueError):
    """A deploy of a query id that already runs on the node (a shared view deployed twice)."""


# Waits before each restart of a query that died (the last one repeats: no lifetime cap, since no
# record can kill a query now, only a transient fault: a start-up burst, a broker away). A query
# that then ran RESTART_FORGOTTEN_S starts over from the first wait.
RESTART_AFTER_S = (2.0, 10.0, 30.0, 60.0, 120.0)
RESTART_FORGOTTEN_S = 300.0
DROPPED = "#dropped"   # cancelled parts' directories being deleted ('#' is in no part's id)
log = logging.getLogger("hifi.dsp")


def _sink_transform(plan: Plan, state_path: str) -> tuple[BatchTransform | None, Sequence[str] | None]:
    """The stateful operators that run in the sink (their state saved at `state_path`), with the
    columns they take from Spark."""
    if isinstance(plan, Smooth):
        return SmoothingState(plan, state_path), SMOOTH_INPUT_COLUMNS
    return None, None


class DSPManager:
    """`ingest`, when given, makes exactly one running query the data listener of the raw topic:
    the first deployed plan that reads it, or else a standalone listener query."""

    def __init__(self, spark: SparkSession, node_id: str, bootstrap: str, state_dir: str,
                 relations: Callable[[], Mapping[str, Sequence[tuple]]] = dict,
                 trigger_ms: int = 1000, ingest: Ingest | None = None,
                 intake: Callable[[], IntakeRules] = IntakeRules, mdr_url: str = "") -> None:
        """`intake`: the rules every source checks records against, read at each (re)start;
        `mdr_url`: where refused records of children's views are counted."""
        self.spark, self.node_id, self.bootstrap = spark, node_id, bootstrap
        self.state_dir = os.path.join(state_dir, node_id)
        self.relations = relations
        self.intake = intake
        self.mdr_url = mdr_url
        self.trigger_ms = trigger_ms
        self.ingest = ingest
        self._ingest_owner: str | None = None
        self._queries: dict[str, ManagedQuery] = {}
        self._lock = threading.RLock()
        shutil.rmtree(os.path.join(self.state_dir, DROPPED), ignore_errors=True)   # what a stop left

    # ------------------------------------------------------------ starting queries

    def checkpoint(self, query_id: str) -> str:
        """The query's directory under the node's state (never outside it: its state is deleted
        with it on cancel)."""
        name = query_id.replace("/", "_")
        if name in ("", ".", ".."):
            raise PartError(f"query id {query_id!r} names no directory of its own")
        return os.path.join(self.state_dir, name)

    def _drop_checkpoint(self, query_id: str) -> None:
        """Move the query's directory aside at once (a part deployed again under its id starts
        clean) and delete it in the background: a Spark checkpoint is hundreds of small files, and
        deleting them in the cancel took 11 of the 90 s the suite's cancels spent on the nodes."""
        path = self.checkpoint(query_id)
        if not os.path.isdir(path):
            return
        aside = os.path.join(self.state_dir, DROPPED, f"{os.path.basename(path)}-{uuid.uuid4().hex[:8]}")
        os.makedirs(os.path.dirname(aside), exist_ok=True)
        os.rename(path, aside)
        threading.Thread(target=shutil.rmtree, args=(aside,), kwargs={"ignore_errors": True},
                         name="drop-checkpoint", daemon=True).start()

    def spark_checkpoint(self, query_id: str) -> str:
        """Spark's own checkpoint of the query (its offset and commit logs, its state store)."""
        return os.path.join(self.checkpoint(query_id), "spark")

    def _launch(self, managed: ManagedQuery) -> None:
        assert managed.start is not None
        managed.handle = managed.start()
        managed.status, managed.error, managed.started_at = "running", "", time.monotonic()

    def _name(self, query_id: str) -> str:
        return f"{self.node_id}/{query_id}"

    def _writer(self, df, query_id: str):
        return (df.writeStream.queryName(self._name(query_id))
                .option("checkpointLocation", self.spark_checkpoint(query_id))
                .trigger(processingTime=f"{self.trigger_ms} milliseconds"))

    def _claims_ingest(self, plan: Plan, skips_backlog: bool) -> bool:
        # The listener must count the whole raw topic, so a query that starts later cannot be it.
        return (self.ingest is not None and self._ingest_owner is None and not skips_backlog
                and any(s.topics == (self.ingest.raw_topic,) for s in sources(plan)))

    def deploy(self, spec: PartSpec, on_batch: BatchHook | None = None) -> None:
        """Compile and start `spec`'s plan as a Spark query of its own, writing its rows to its
        topic; its sources are read from its `start_offsets` ({"topic:partition": offset}, see
        CompileContext), else from their beginning."""
        query_id, plan, output_topic = spec.query_id, spec.plan, spec.topic
        start_offsets = spec.start_offsets or None
        with self._lock:
            if query_id in self._queries:
                raise QueryExists(f"query {query_id!r} is already deployed on {self.node_id}")
            columns = [name for name, _ in output_columns(plan)]
            transform, inputs = _sink_transform(plan, os.path.join(self.checkpoint(query_id), "sink.state"))
            sink = RowBatchSink(self.bootstrap, output_topic, self.node_id, query_id, columns,
                                os.path.join(self.checkpoint(query_id), "sink.fence"), event_time_column(plan),
                                on_batch, transform, inputs)
            ingest = self.ingest if self._claims_ingest(plan, start_offsets is not None) else None

            def start() -> StreamingQuery:
                ctx = CompileContext(self.spark, self.bootstrap, self.relations(), ingest, intake=self.intake(),
                                     mdr_url=self.mdr_url, start_offsets=start_offsets)
                df = compile_plan(plan, ctx)
                return self._writer(df, query_id).outputMode("append").foreachBatch(sink).start()

            managed = ManagedQuery(query_id, plan, output_topic, start=start, sinks=[sink])
            window = window_of(plan)
            if window is not None and "window_start" in columns:
                markers_for(self.spark).watch(self._name(query_id), MarkerTarget(
                    self.bootstrap, output_topic, self.node_id, query_id, window))
            self._launch(managed)
            self._queries[query_id] = managed
            if ingest is not None:
                self._ingest_owner = query_id

    def ensure_ingest(self) -> None:
        """Start a standalone data listener when no running query is the raw topic's listener."""
        with self._lock:
            if self.ingest is None or self._ingest_owner is not None:
                return
            query_id = "ingest"
            source = Source((self.ingest.raw_topic,), "rfid", RAW_RFID_SOURCE_COLUMNS, "ts", 0)

            def start(writer: Callable) -> StreamingQuery:
                df = read_source(source, CompileContext(self.spark, self.bootstrap, ingest=self.ingest,
                                                        intake=self.intake(), mdr_url=self.mdr_url),
                                 valid_only=False)
                return writer(df).format("noop").start()

            self.run(query_id, start)
            self._ingest_owner = query_id

    def run(self, query_id: str, start: Callable[[Callable], StreamingQuery]) -> None:
        """Run a streaming query this manager did not compile (a shared reader, dsp.runtime.shared):
        `start(writer)` starts it from `writer(df)`, the node's writeStream with its checkpoint
        and trigger; it is restarted like any other when it dies."""
        with self._lock:
            if query_id in self._queries:
                raise QueryExists(f"query {query_id!r} is already deployed on {self.node_id}")
            managed = ManagedQuery(query_id, None, "", start=lambda: start(lambda df: self._writer(df, query_id)))
            self._launch(managed)
            self._queries[query_id] = managed

    # ------------------------------------------------------------ lifecycle

    def _get(self, query_id: str) -> ManagedQuery:
        managed = self._queries.get(query_id)
        if managed is None:
            raise KeyError(f"no query {query_id!r} on node {self.node_id}")
        return managed

    def suspend(self, query_id: str) -> None:
        with self._lock:
            managed = self._get(query_id)
            if managed.handle is not None:
                managed.handle.stop()
            managed.status = "suspended"

    def resume(self, query_id: str) -> None:
        with self._lock:
            managed = self._get(query_id)
            if managed.status != "running" or managed.handle is None or not managed.handle.isActive:
                self._launch(managed)

    def cancel(self, query_id: str, drop_state: bool = True) -> None:
        with self._lock:
            managed = self._queries.pop(query_id, None)
            if managed is None:
                raise KeyError(f"no query {query_id!r} on node {self.node_id}")
            was_listener = self._ingest_owner == query_id
            if was_listener:
                self._ingest_owner = None
        # Outside the lock: a stop waits for the batch in flight, and status and progress
        # (the node's heartbeat gauges) must not wait with it.
        self._stop(managed)
        markers_for(self.spark).unwatch(self._name(query_id))
        if drop_state:
            self._drop_checkpoint(query_id)
        if was_listener:
            self.ensure_ingest()

    def _stop(self, managed: ManagedQuery) -> None:
        if managed.handle is not None:
            try:
                managed.handle.stop()
            except Exception as exc:  # noqa: BLE001 - a failed query still has to be torn down
                managed.error = str(exc)
        for sink in managed.sinks:
            sink.close()
        managed.status = "stopped"

    def stop_all(self) -> None:
        """Stop every query at once: each stop waits for its query's batch to end, so in turn
        they would add up."""
        with self._lock:
            running = list(self._queries.values())
            if running:
                with ThreadPoolExecutor(max_workers=len(running), thread_name_prefix=f"stop-{self.node_id}") as pool:
                    list(pool.map(self._stop, running))
            self._queries.clear()
            self._ingest_owner = None

    # ------------------------------------------------------------ inspection

    def plans(self) -> list[Plan]:
        """The plans of the queries it compiled (not the readers it runs), whatever their state."""
        with self._lock:
            return [q.plan for q in self._queries.values() if q.plan is not None]

    def queries(self) -> list[ManagedQuery]:
        """The node's queries; one found dead with an error is restarted from its checkpoint (its
        sink's fence keeps the replayed batch from being written twice) after the next wait of
        RESTART_AFTER_S: on a saturated machine Spark can give up on a Python worker that was
        only slow to start (it waits a fixed 10 s for it to connect back). Until then it shows
        as failed, with its cause."""
        with self._lock:
            now = time.monotonic()
            for managed in self._queries.values():
                handle = managed.handle
                if managed.status == "running" and handle is not None and not handle.isActive:
                    exc = handle.exception()
                    managed.status, managed.error = "failed", failure_cause(str(exc) if exc else "stopped")
                    managed.failed_at = now if exc is not None else None
                    if now - managed.started_at >= RESTART_FORGOTTEN_S:
                        managed.restarts = 0
                wait = RESTART_AFTER_S[min(managed.restarts, len(RESTART_AFTER_S) - 1)]
                if managed.status == "failed" and managed.failed_at is not None and now - managed.failed_at >= wait:
                    managed.restarts += 1
                    log.warning("node %s: query %s died (%s); restart %d", self.node_id, managed.query_id,
                                managed.error, managed.restarts)
                    try:
                        self._launch(managed)
                    except Exception as again:  # noqa: BLE001 - it stays failed, with the reason
                        managed.error, managed.failed_at = failure_cause(str(again)), now
            return list(self._queries.values())

    def progress(self, leave_out: str = "") -> dict[str, float]:
        """Input rate (rows/s read from the node's inputs) and rows dropped as late by watermarks,
        of the queries but those whose id starts with `leave_out` (if given).

        An edge node's input is its raw topic, read by the data-listener query; other nodes'
        inputs are their children's views, read by all their queries.
        """
        running = [m for m in self.queries() if m.status == "running" and m.handle is not None
                   and not (leave_out and m.query_id.startswith(leave_out))]
        rate, late = 0.0, 0
        for managed in running:
            last = last_progress(managed.handle)
            if self._ingest_owner in (None, managed.query_id):
                rate += float(last.get("processedRowsPerSecond") or 0.0)
            late += sum(int(op.get("numRowsDroppedByWatermark", 0)) for op in last.get("stateOperators", []))
        return {"input_rate": rate, "late_rows": float(late)}


def last_progress(handle: StreamingQuery) -> dict:
    """A query's last progress as Spark's JSON, parsed (~1 ms; `handle.lastProgress` builds a
    Python object from the JVM's graph through py4j: ~300 ms wall, ~600 ms CPU, DESIGN §11)."""
    found = handle._jsq.lastProgress()   # a private handle of pyspark 4.0's StreamingQuery
    return json.loads(found.json()) if found is not None else {}


def failure_cause(text: str) -> str:
    """The line of a query's exception that says what went wrong: for an error raised in Python
    (foreachBatch, a data source) the exception line of its traceback, not py4j's wrapper; else
    the first line without Spark's "query ... terminated with exception" prefix."""
    lines = text.strip().splitlines()
    if not lines:
        return text
    for i, line in enumerate(lines):
        if line.rstrip().endswith("Traceback (most recent call last):"):
            found = next((later.strip() for later in lines[i + 1:] if later.strip() and not later[0].isspace()), None)
            if found:
                return found
    return re.sub(r"^\[[A-Z_]+\] Query \[[^\]]*\] terminated with exception: ", "", lines[0])
