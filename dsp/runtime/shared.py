"""A node's shared runtime: every plan of the node fed from the process's one Spark stream.

The node's *stream* (`stream_key`) is every topic the node reads — its raw topic, every child's
views, partials and markers — read as a *lane* of the process's one Spark streaming query
(dsp.runtime.process_stream), whose source (dsp.spark.kafka_source, format "offsets") yields no rows: Spark
decides each micro-batch (where every lane's partitions end), checkpoints it and replays it, and
the node reads from where it saved its position to there. Each *form* of input (`Reader`: the raw
topic's readings, its motes' samples, the children's views of one shape) is read over those
bounds: a small one (one task's worth of records: a hierarchy's steady state)
by the driver itself (KafkaStreamReader.read_here: a Spark job for a few records cost ~0.3-0.4 s a
level), a larger one by Spark's tasks as a batch read over the same bounds (on a local Spark handed
over in files, dsp.spark.kafka_source's `handoff_dir`; on a cluster through Spark), and every part
reading its topics — standing views and user query parts alike — evaluates them (dsp.operators) and
writes its rows and progress markers to its output topic. Adding a child adds partitions to the
running stream, not a query: the runtime tells the process's stream its lane's topics, which its
source reads at every poll; a topic new to the node starts where the part's start offsets say.
Adding a query adds its operators to the node's pipeline: no new Kafka read, Python data-source
runner, per-batch planning or state store.

Measured, the layouts before this one: a Spark query per input topic (a parent with N children
ran N, each with its offset and commit logs, planning and task per micro-batch, polling twice a
second: issue 23, 8 -> 24 doors put a warehouse 3.7 -> 15.6 s behind), then one per form (a
parent started one for each new shape of child view, and every user query's partials are a new
shape; a change once stopped and started the query, 1-5 s of the node's lock each: the suite's 20
queries took 170 s to submit).

Why this and not one Spark query per plan (the first design, dsp.spark.manager): measured on the 2-core
machine (issue 15), ten identical views on one stream at 1 k readings/s ran 28 s behind as ten
queries with the CPU full, 2.5 s behind as one query computing ten Spark aggregations in
foreachBatch, and 0.6 s behind at 0.87 cores as one query aggregating the batch in Arrow: a
Spark micro-batch costs ~100+ ms of fixed work per query, an Arrow group-by ~1 ms.

A part that reads a topic another part of the same node writes (a query's final over its own
producer at one node) is handed that part's rows and markers in process, in the same
micro-batch: no reader, no Kafka round trip (the topic is still written for everyone else).

Who computes a batch: the driver's Arrow engine (dsp.operators) over its rows, or — on a cluster, and
locally above HIFI_SPARK_BATCH_RECORDS — Spark over the batch's DataFrame for the parts it can
compute, only their partials coming back (dsp.spark.partials; the others take the rows): dsp.runtime.form_batches.

Recovery: the process's stream's batches live in its Spark checkpoint; the parts' state (open
windows, marker positions) is saved after every micro-batch with the node stream's position and
the batch's id (a fence: a batch Spark replays after the save is skipped), and a part deployed
again with the same plan takes its saved state back.

Exactly once across tiers: a part's output messages are identified by (node, query, run,
sequence, chunk) (wire.codec), and readers drop an identity they have seen. A micro-batch that
fails after some of its output went out (a crash between flush and fence) is replayed from the
saved state and sends the same messages again, provided the parts see the same inputs in the
same order: so the batch in flight is recorded before it starts (`shared.intent`), its forms go
through the parts in key order, and the node's next batch of that stream is that one again, over
its logged ends (dsp.runtime.stream_batches).

The past: every form's batch the node's own stream takes in is archived (dsp.runtime.archive) inside its
micro-batch (an edge's readings and samples always), and a part deployed with `history_from_ms`
(a query `--since`, a replay, or a live query from just before its submission) is first fed, in
the same order, the archived batches of the forms it joins from that time on, then joins them at
the next batch: no batch missing or doubled at the seam, since both happen under the runtime's
lock. Topics it reads that the stream does not read yet start where `start_offsets` say (a query
over the past: the topic's beginning). dsp.runtime.history_feed feeds it.

Adaptive smoothing, whose state lives in its sink, still runs as a Spark query of its own
(dsp.spark.manager), which also restarts streams that die; mote quality is a part like the others
(dsp.operators.quality.QualifyOp).
"""

from __future__ import annotations

import functools
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence

from pyspark.sql import SparkSession

from base.part_spec import PartSpec
from base.plan import RAW_SAMPLE_SOURCE_COLUMNS, Plan, PlanError
from base.plan_json import to_json
from base.plan_schema import output_columns, sources
from dsp.operators.build import build, supported
from dsp.runtime.archive import DEFAULT_RETENTION_MS, Archive
from dsp.runtime.bounds import OutputBounds
from dsp.runtime.checkpoint import BatchCheckpoint
from dsp.runtime.control_first import ControlFirstLock
from dsp.runtime.form_batches import FormBatches
from dsp.runtime.history_feed import PAST_MS, HistoryFeed
from dsp.runtime.inputs import READER_PREFIX, NodeInputs, Reader, SourceSettings, lane_name
from dsp.runtime.parts import Part, Parts
from dsp.runtime.process_stream import ProcessStream
from dsp.runtime.stream_batches import StreamBatches
from dsp.runtime.uplink import Uplink
from dsp.spark.compiler import Ingest
from dsp.spark.handoff import sweep_handoff
from dsp.spark.manager import DSPManager, QueryExists
from dsp.spark.partials import SparkBatches
from dsp.status import BatchHook, ManagedQuery
from wire.intake import IntakeRules
from wire.kafka import clients, producers

log = logging.getLogger("hifi.dsp")


class SharedRuntime:
    """The node's DSP: the interface of dsp.spark.manager.DSPManager (deploy, cancel, suspend, resume,
    queries, progress; dsp.status.Runtime), with plans sharing one reader per input. Made of
    what the node reads (`inputs`), its running parts (`parts`), a form's batch through them
    (`forms`), each micro-batch exactly once (`batches`, with the batch `checkpoint`) and the
    past fed to new parts (`history`)."""

    def __init__(self, spark: SparkSession, node_id: str, bootstrap: str, state_dir: str,
                 relations: Callable[[], Mapping[str, Sequence[tuple]]] = dict, trigger_ms: int = 1000,
                 ingest: Ingest | None = None, intake: Callable[[], IntakeRules] = IntakeRules,
                 mdr_url: str = "", archive_retention_ms: int = DEFAULT_RETENTION_MS,
                 uplink_bytes_per_s: int = 0, stream_home: str = "", lane_order: int = 0) -> None:
        """`stream_home`: the process's one stream's directory, shared by the nodes of a process
        (dsp.runtime.process_stream; `hifi up`); default: a stream of the node's own, in its state.
        `lane_order`: the node's place in each of that stream's batches, lower first (its depth)."""
        self.spark, self.node_id, self.bootstrap = spark, node_id, bootstrap
        self.lane_order = lane_order
        self.relations, self.ingest = relations, ingest
        # the stream polls four times as often as the node's trigger, raw topics every other
        # poll (dsp.poll_pace: why, and what it was measured to cost and save)
        self.reader_trigger_ms = max(100, trigger_ms // 4)
        raw_every_ms = max(self.reader_trigger_ms, trigger_ms // 2)
        self.spark_queries = DSPManager(spark, node_id, bootstrap, state_dir, relations, trigger_ms, None, intake,
                                        mdr_url)
        state = self.spark_queries.state_dir
        home = stream_home or os.path.join(state, f"{node_id}.stream")
        self.stream = ProcessStream.at(spark, home, bootstrap, self.reader_trigger_ms, raw_every_ms)
        self._locks = ControlFirstLock()   # a deploy or cancel goes before the next batch
        os.makedirs(state, exist_ok=True)
        self.checkpoint = BatchCheckpoint(state, node_id)   # fences, parts' state, intent
        self.archive = Archive(os.path.join(state, "archive"), archive_retention_ms)
        # readers hand their rows over in files when Spark's workers share this machine (a
        # cluster's workers do not: their rows go through Spark)
        on_cluster = not spark.sparkContext.master.startswith("local")
        spark_batches = SparkBatches.configured(on_cluster)
        self.handoff_dir = "" if not spark_batches.handoff else os.path.join(state, "handoff")
        sweep_handoff(self.handoff_dir)   # what a node that stopped left
        # a constrained link to the parent: messages wait in lanes by priority (none: straight to the broker)
        self.uplink = Uplink(os.path.join(state, "uplink"), uplink_bytes_per_s,
                             bootstrap) if uplink_bytes_per_s > 0 else None
        self.inputs = NodeInputs(node_id, SourceSettings(spark, bootstrap, ingest, intake, mdr_url, self.handoff_dir,
                                                         on_cluster),
                                 self.checkpoint, self.spark_queries.spark_checkpoint, spark_batches)
        self.parts = Parts(node_id, relations, self.uplink)
        self.forms = FormBatches(node_id, self.parts, self.archive)
        self.history = HistoryFeed(node_id, spark, self.archive, self.parts, spark_batches, self._producer)
        self.batches = StreamBatches(node_id, self.inputs, self.parts, self.forms, self.checkpoint, self._locks,
                                     self.stream, self._producer, bootstrap, self.handoff_dir)
        self.recent_input = self.batches.recent_input

    @property
    def spark_batches(self) -> SparkBatches:
        """Which batches and pasts Spark computes (dsp.spark.partials)."""
        return self.inputs.spark_batches

    @spark_batches.setter
    def spark_batches(self, chosen: SparkBatches) -> None:   # the benchmarks compare the two paths
        self.inputs.spark_batches = self.history.spark_batches = chosen

    @property
    def spark_batches_taken(self) -> int:
        """Batches (and pasts) whose parts Spark computed (dsp.spark.partials)."""
        return self.forms.on_spark + self.history.on_spark

    # ------------------------------------------------------------ deploying

    def deploy(self, spec: PartSpec, on_batch: BatchHook | None = None, bounds: OutputBounds | None = None) -> None:
        """Run `spec`: a part adopted from a dead node (`owner`, glue.adoption) gets readers of its
        own, which start where its `start_offsets` say whatever this node already reads; `bounds`:
        what of its output goes out (dsp.runtime.bounds); a part with `history_from_ms` is first fed what
        the readers it joins archived from then on (unless it takes saved state back);
        `on_batch`: told of each batch it emitted."""
        if not supported(spec.plan):
            if spec.owner or bounds is not None:
                raise PlanError(f"part {spec.query_id} runs as a Spark query of its own: it cannot be adopted or "
                                "bounded")
            self.spark_queries.deploy(spec, on_batch)
            return
        with self._locks.control():
            if spec.query_id in self.parts.by_id:
                raise QueryExists(f"query {spec.query_id!r} is already deployed on {self.node_id}")
            part, resumed = self._part_of(spec, on_batch, bounds)
            # inputs written by parts of this node are handed over in process (Parts.feed); not an
            # adopted part's, nor a bounded one's (what it hands must be what goes out), nor a
            # part's over the past (what was handed before it came is not archived here)
            since = spec.history_from_ms
            past = since is not None and time.time() * 1000 - since > PAST_MS
            part.local_topics = frozenset() if spec.owner or past else part.topics & {
                p.managed.output_topic for p in self.parts.by_id.values() if not p.owner and p.bounds is None}
            if since is not None and not resumed:
                self.history.feed(part, since, past, self.inputs.readers)
            self.parts.by_id[spec.query_id] = part
            for source in sources(spec.plan):
                columns = source.columns if source.format != "rfid" else ()
                for topic in [t for t in source.topics if t not in part.local_topics]:
                    self.inputs.ensure(Reader((topic,), source.format, columns, spec.owner), spec.start_offsets or None)
            self._tell_changed()

    def _part_of(self, spec: PartSpec, on_batch: BatchHook | None, bounds: OutputBounds | None) -> tuple[Part, bool]:
        """The part running `spec`, with its saved state if it has some (and whether it had)."""
        plan = spec.plan
        part = Part(ManagedQuery(spec.query_id, plan, spec.topic, started_at=time.monotonic()),
                    build(plan, self.relations()), frozenset(t for s in sources(plan) for t in s.topics),
                    [name for name, _ in output_columns(plan)], on_batch, owner=spec.owner, bounds=bounds,
                    priority=spec.priority, inputs=frozenset((t, s.format) for s in sources(plan) for t in s.topics))
        saved = self.checkpoint.saved_part(spec.query_id)
        resumed = saved is not None and saved[0] == to_json(plan)
        if resumed:
            part.take_back(saved)
        elif os.path.isdir(self.spark_queries.spark_checkpoint(spec.query_id)):
            log.warning("%s: part %s has state of an older layout (a Spark query of its own, before mote quality "
                        "ran in the shared runtime): not resumed, it starts from the node's readers", self.node_id,
                        spec.query_id)
        return part, resumed

    def set_bounds(self, query_id: str, bounds: OutputBounds | None) -> None:
        with self._locks.control():
            self.part(query_id).bounds = bounds

    def ensure_ingest(self) -> None:
        """An edge node's raw topic is always read (it is the node's data listener), its readings
        and its motes' samples: both are archived, for queries over the past."""
        if self.ingest is not None:
            with self._locks.control():
                self.inputs.ensure(Reader((self.ingest.raw_topic,), "rfid"), None)
                self.inputs.ensure(Reader((self.ingest.raw_topic,), "samples", RAW_SAMPLE_SOURCE_COLUMNS), None)

    def _tell_changed(self) -> None:
        """Tell the process's stream the topics of the node's streams that changed (read from its
        next batch on; a stream that reads nothing any more is no lane of it)."""
        with self._locks.control():
            for stream in self.inputs.take_changed():
                self.stream.attach(lane_name(self.node_id, stream), self.inputs.stream_topics(stream),
                                   functools.partial(self.batches.run, stream), self.lane_order,
                                   functools.partial(self.batches.ranges, stream))

    def _producer(self):
        # One producer per process, as the marker listener and the data sources use (kafka-python's
        # producer is thread-safe; each one is a network thread and a connection).
        return clients.shared_producer(self.bootstrap)

    def _save(self) -> None:
        self.batches.save()

    # ------------------------------------------------------------ lifecycle

    def suspend(self, query_id: str) -> None:
        """The part takes no batch until it is resumed (between two batches: the lock is theirs)."""
        with self._locks.control():
            part = self.parts.by_id.get(query_id)
            if part is None:
                return self.spark_queries.suspend(query_id)
            part.managed.status = "suspended"
            part.suspended_ms = part.suspended_ms or int(time.time() * 1000)

    def resume(self, query_id: str) -> None:
        """The part takes batches again, first the ones it missed: what its node's readers archived
        while it was suspended (every batch archived after the suspend came after it, under the same
        lock). Rows handed in process by another part of this node meanwhile are not archived:
        those it misses."""
        with self._locks.control():
            part = self.parts.by_id.get(query_id)
            if part is None:
                return self.spark_queries.resume(query_id)
            part.managed.status = "running"
            since, part.suspended_ms = part.suspended_ms, None
            if since is not None:
                self.history.feed(part, since + 1, False, self.inputs.readers)

    def cancel(self, query_id: str, drop_state: bool = True) -> None:
        with self._locks.control():
            part = self.parts.by_id.pop(query_id, None)
            if part is None:
                return self.spark_queries.cancel(query_id, drop_state)
            part.managed.status = "stopped"
            # nothing writes its topic now: the process's producer forgets it before placement deletes it
            producers.forget_topics(self._producer(), [part.managed.output_topic])
            still_read = self.parts.still_read()
            if self.ingest is not None:   # the data listener
                still_read |= {("", self.ingest.raw_topic, "rfid"), ("", self.ingest.raw_topic, "samples")}
            idle = self.inputs.keep_only(still_read)
            self.batches.forget(idle)
        for stream in idle:   # outside the lock: the process's stream may wait for a batch in flight
            self.stream.detach(lane_name(self.node_id, stream))
        with self._locks.control():
            self.inputs.forget(idle)
            self._tell_changed()   # in the same hold: each takes its turn after a batch in flight

    def stop_all(self) -> None:
        for stream in sorted(self.inputs.streams):   # no lock: the last lane's stop waits for the batch in flight
            self.stream.detach(lane_name(self.node_id, stream))
        self.spark_queries.stop_all()
        if self.uplink is not None:
            self.uplink.stop()   # what it still holds waits on disk for the next start
        with self._locks.control():
            self.inputs.clear()
            self.parts.by_id.clear()

    # ------------------------------------------------------------ inspection

    def part(self, query_id: str) -> Part:
        """A plan running on the shared readers (KeyError if it runs elsewhere or nowhere)."""
        return self.parts.by_id[query_id]

    def plans(self) -> list[Plan]:
        """The plans of every part and Spark query deployed, whatever their state (no side effects,
        unlike queries(): the sensor proxy reads them)."""
        return [p.managed.plan for p in list(self.parts.by_id.values()) if p.managed.plan is not None] + \
            self.spark_queries.plans()

    def queries(self) -> list[ManagedQuery]:
        """The node's queries (readers are not queries of their own): a part whose reader is
        down shows as failed with the reader's error; a part that failed is rebuilt (its state
        lost) after the next wait of RESTART_AFTER_S (Parts.reflect)."""
        spark_queries = self.spark_queries.queries()
        failure = self.stream.failure() if self.inputs.streams else ""
        # no lock (status fields only): a batch in flight holds it while it writes
        down = {(reader.owner, topic): failure for reader in list(self.inputs.readers.values()) if failure
                for topic in reader.topics}
        parts = self.parts.reflect(down, time.monotonic())
        return parts + [q for q in spark_queries if not q.query_id.startswith(READER_PREFIX)]

    def progress(self) -> dict[str, float]:
        """Input rate (rows/s the readers read; the Spark-run plans' reads too), how long the
        input waited for the node lately (dsp.runtime.inputs.RecentInput) and rows dropped as late
        (by the parts and by Spark's watermarks)."""
        found = self.spark_queries.progress(leave_out=READER_PREFIX)
        now = time.monotonic()
        # no lock: a batch in flight holds it while it writes, and the gauges must not wait
        return {"input_rate": found["input_rate"] + self.recent_input.per_second(now),
                "input_lag_ms": round(self.recent_input.longest_wait_ms(now)),
                "late_rows": found["late_rows"] + self.parts.late_rows()}
