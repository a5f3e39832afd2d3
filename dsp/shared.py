"""A node's shared runtime: every plan of the node fed from the process's one Spark stream.

The node's *stream* (`stream_key`) is every topic the node reads — its raw topic, every child's
views, partials and markers — read as a *lane* of the process's one Spark streaming query
(dsp.process_stream), whose source (dsp.kafka_source, format "offsets") yields no rows: Spark
decides each micro-batch (where every lane's partitions end), checkpoints it and replays it, and
the node reads from where it saved its position to there. Each *form* of input (`Reader`: the raw
topic's readings, its motes' samples, the children's views of one shape) is read over those
bounds: a small one (one task's worth of records: a hierarchy's steady state)
by the driver itself (KafkaStreamReader.read_here: a Spark job for a few records cost ~0.3-0.4 s a
level), a larger one by Spark's tasks as a batch read over the same bounds (on a local Spark handed
over in files, dsp.kafka_source's `handoff_dir`; on a cluster through Spark), and every part
reading its topics — standing views and user query parts alike — evaluates them (dsp.engine) and
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

Why this and not one Spark query per plan (the first design, dsp.manager): measured on the 2-core
machine (issue 15), ten identical views on one stream at 1 k readings/s ran 28 s behind as ten
queries with the CPU full, 2.5 s behind as one query computing ten Spark aggregations in
foreachBatch, and 0.6 s behind at 0.87 cores as one query aggregating the batch in Arrow: a
Spark micro-batch costs ~100+ ms of fixed work per query, an Arrow group-by ~1 ms.

A part that reads a topic another part of the same node writes (a query's final over its own
producer at one node) is handed that part's rows and markers in process, in the same
micro-batch: no reader, no Kafka round trip (the topic is still written for everyone else).

Who computes a batch: the driver's Arrow engine (dsp.engine) over its rows, or — on a cluster, and
locally above HIFI_SPARK_BATCH_RECORDS — Spark over the batch's DataFrame for the parts it can
compute, only their partials coming back (dsp.spark_partials; the others take the rows).

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
its logged ends (`_batch`).

The past: every form's batch the node's own stream takes in is archived (dsp.archive) inside its
micro-batch (an edge's readings and samples always), and a part deployed with `history_from_ms`
(a query `--since`, a replay, or a live query from just before its submission) is first fed, in
the same order, the archived batches of the forms it joins from that time on, then joins them at
the next batch: no batch missing or doubled at the seam, since both happen under the runtime's
lock. Topics it reads that the stream does not read yet start where `start_offsets` say (a query
over the past: the topic's beginning).

Adaptive smoothing and mote quality, whose state lives in their sinks, still run as their own
Spark queries (dsp.manager), which also restarts streams that die.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from dsp import spark_partials, spark_past
from dsp.archive import DEFAULT_RETENTION_MS, Archive
from dsp.batch_checkpoint import BatchCheckpoint
from dsp.bounds import OutputBounds
from dsp.compiler import CompileContext, Ingest, reader_options
from dsp.control_first import ControlFirstLock
from dsp.engine import Operator, build, lateness_seen, raw_sources, rows_of, sources_under, supported, view_batch
from dsp.faults import AFTER_FLUSH, crash_point
from dsp.kafka_sink import BatchHook, BatchReport, new_run, send_marker, send_rows
from dsp.kafka_source import KafkaStreamReader, by_topic, local_reader, sweep_handoff, take_handoff
from dsp.manager import RESTART_AFTER_S, DSPManager, ManagedQuery, QueryExists, failure_cause
from dsp.offset_log import Offsets, batch_end
from dsp.part_spec import PartSpec
from dsp.plan import (
    RAW_SAMPLE_SOURCE_COLUMNS,
    Plan,
    PlanError,
    carries_markers,
    event_time_column,
    output_columns,
    sources,
    to_json,
)
from dsp.process_stream import ProcessStream
from dsp.spark_partials import SparkBatches
from dsp.uplink import Uplink
from wire import bus
from wire.intake import IntakeRules

log = logging.getLogger("hifi.dsp")
READER_PREFIX = "read:"


@dataclass
class Part:
    """A plan running on the shared readers."""

    managed: ManagedQuery
    root: Operator
    topics: frozenset[str]
    columns: list[str]
    on_batch: BatchHook | None = None
    local_topics: frozenset[str] = frozenset()   # inputs written by parts of this node (handed in process)
    sequence: int = 0                  # RowBatch ids of its output (rows and markers)
    last_marker: int | None = None
    run: str = field(default_factory=new_run)   # names its batch ids' numbering (saved with its state)
    inputs: frozenset[tuple[str, str]] = frozenset()   # (topic, format) of its sources
    owner: str = ""                    # the dead node it runs for (adopted: its own readers), else ""
    priority: int = 0                  # its messages' lane on a constrained uplink (dsp.uplink): higher first
    bounds: OutputBounds | None = None  # what of its output goes out while another node shares its topic
    # rebuilt after a failure of its own and not yet through a batch with output: it still shows
    # FAILED with that cause (a part that keeps dying must not flash "running" between its restarts)
    proving: bool = False

    def saved(self) -> tuple:
        return to_json(self.managed.plan), self.root, self.sequence, self.last_marker, self.run

    def take_back(self, saved: tuple) -> None:
        """Its state as `saved` gave it (a state saved before runs had names keeps a new one)."""
        _, self.root, self.sequence, self.last_marker, *run = saved
        self.run = run[0] if run else self.run

    @property
    def feeds(self) -> bool:
        """Whether batches go through it: not suspended, not failed itself (a part shown failed
        because its reader is down takes the reader's replay when it comes back)."""
        return self.managed.status != "suspended" and self.managed.failed_at is None

    @property
    def publishes_markers(self) -> bool:
        return carries_markers(self.columns)


def stream_key(owner: str = "") -> str:
    """The node's stream, which reads every topic its parts read (the parts adopted from `owner`
    have one of their own: they read from that node's position, not this one's); each is a lane
    of the process's Spark query (dsp.process_stream)."""
    return f"{READER_PREFIX}{owner + '@' if owner else ''}node"


@dataclass(frozen=True)
class Reader:
    """One form of the node's input: topics read alike, from the bounds of the node's stream's
    micro-batches. Views' rows of one shape (format "rows", the same columns) are one form, keyed
    by the shape; a raw topic's readings and samples are a form each, keyed by the topic."""

    topics: tuple[str, ...]   # sorted: a batch is handed to the parts topic by topic in this order
    format: str
    columns: tuple[tuple[str, str], ...] = ()
    owner: str = ""   # feeds only the parts adopted from this node, from their own position

    @property
    def shared(self) -> bool:
        return self.format == "rows"

    @property
    def key(self) -> str:
        if not self.shared:
            return self._per_topic_key(self.topics[0])
        shape = hashlib.sha1(repr(self.columns).encode()).hexdigest()[:12]
        return f"{READER_PREFIX}{self.owner + '@' if self.owner else ''}{self.format}:{shape}"

    @property
    def stream(self) -> str:
        return stream_key(self.owner)

    def _per_topic_key(self, topic: str) -> str:
        """A form's key when every topic had a reader of its own (a raw form's still)."""
        return f"{READER_PREFIX}{self.owner + '@' if self.owner else ''}{self.format}:{topic}"

    def archive_keys(self, topic: str) -> tuple[str, ...]:
        """Where the archive keeps this form's batches of `topic`: the first is where they go now;
        the others hold those of a node that ran before readers were shared (read back too)."""
        if not self.shared:
            return (self.key,)
        return f"{self.key}~{topic}", self._per_topic_key(topic)

    def older_queries(self, topic: str) -> tuple[str, ...]:
        """The Spark queries that read `topic` in this form on a node of an older layout: a reader
        per form, and before that a reader per topic."""
        return tuple(dict.fromkeys((self.key, self._per_topic_key(topic))))

    def with_topics(self, topics: Sequence[str]) -> Reader:
        return replace(self, topics=tuple(sorted(set(topics))))


class InputRate:
    """Rows the readers took per second over the last `span_s` seconds (the node's input rate:
    a batch read in the driver is not in Spark's progress)."""

    def __init__(self, span_s: float = 10.0) -> None:
        self.span_s = span_s
        self._batches: deque[tuple[float, int]] = deque()
        self._lock = threading.Lock()

    def add(self, rows: int, at: float) -> None:
        with self._lock:
            self._batches.append((at, rows))
            while self._batches and self._batches[0][0] < at - self.span_s:
                self._batches.popleft()

    def per_second(self, now: float) -> float:
        with self._lock:
            return sum(rows for at, rows in self._batches if at >= now - self.span_s) / self.span_s


# A part fed more history than this is over the past (`--since`, a replay): it reads its node's
# own parts' outputs from their topics. A live query's parts are fed the seconds since their
# submission and take those outputs in process, as they come.
PAST_MS = 10_000

# A query over the past keeps rows that came this late for their windows (the intake refuses
# rows further behind than its max_behind, 10 minutes by default; the windows wait this long).
HISTORY_LATENESS_CAP_MS = 10 * 60_000



def _push(topic: str, rows: pa.Table, root: Operator) -> pa.Table | None:
    """`rows` of `topic` pushed into an evaluator by the driver (dsp.engine)."""
    return root.push(topic, rows)


def _push_many(pieces: list[tuple[str, pa.Table]], root: Operator) -> pa.Table | None:
    """A batch's rows of several topics pushed into an evaluator by the driver (dsp.engine)."""
    return root.push_many(pieces)


class SharedRuntime:
    """The node's DSP: the interface of dsp.manager.DSPManager (deploy, cancel, suspend, resume,
    queries, progress), with plans sharing one reader per input."""

    def __init__(self, spark: SparkSession, node_id: str, bootstrap: str, state_dir: str,
                 relations: Callable[[], Mapping[str, Sequence[tuple]]] = dict, trigger_ms: int = 1000,
                 ingest: Ingest | None = None, intake: Callable[[], IntakeRules] = IntakeRules,
                 mdr_url: str = "", archive_retention_ms: int = DEFAULT_RETENTION_MS,
                 uplink_bytes_per_s: int = 0, stream_home: str = "") -> None:
        """`stream_home`: the process's one stream's directory, shared by the nodes of a process
        (dsp.process_stream; `hifi up`); default: a stream of the node's own, in its state."""
        self.spark, self.node_id, self.bootstrap = spark, node_id, bootstrap
        self.relations, self.intake, self.mdr_url, self.ingest = relations, intake, mdr_url, ingest
        # the stream polls twice as often as the node's trigger: a level's wait for the next
        # trigger goes from ~0.5 to ~0.25 s. A batch of a few records costs ~0.2 s now that the
        # driver reads it (~0.8 s before); measured for the raw readers on the pipeline bench's
        # hierarchy: the doors emit 0.5 s sooner (2.13 -> 1.65 s after a window's end) for
        # 1.71 -> 1.78 cores
        self.reader_trigger_ms = max(100, trigger_ms // 2)
        self.spark_queries = DSPManager(spark, node_id, bootstrap, state_dir, relations, trigger_ms, None, intake,
                                        mdr_url)
        self._parts: dict[str, Part] = {}
        self._readers: dict[str, Reader] = {}   # the forms of the node's input, by key
        self._sources: dict[str, dict[str, str]] = {}   # each form's source options (dsp.kafka_source)
        self._local_readers: dict[str, KafkaStreamReader] = {}   # each form's source, for small batches
        self._streams: set[str] = set()   # the node's streams read (stream_key): lanes of the process's stream
        self._starts: dict[str, dict[str, int]] = {}   # each stream's start offsets for topics new to it
        self._changed: set[str] = set()   # streams whose topics changed: told once the change is made
        home = stream_home or os.path.join(self.spark_queries.state_dir, f"{node_id}.stream")
        self.stream = ProcessStream.at(spark, home, bootstrap, self.reader_trigger_ms)
        self.input_rate = InputRate()
        self._locks = ControlFirstLock()   # a deploy or cancel goes before the next batch
        self._lock = self._locks.lock
        os.makedirs(self.spark_queries.state_dir, exist_ok=True)
        self.checkpoint = BatchCheckpoint(self.spark_queries.state_dir, node_id)   # fences, parts' state, intent
        self.archive = Archive(os.path.join(self.spark_queries.state_dir, "archive"), archive_retention_ms)
        # readers hand their rows over in files when Spark's workers share this machine (a
        # cluster's workers do not: their rows go through Spark)
        self.on_cluster = not spark.sparkContext.master.startswith("local")
        self.spark_batches = SparkBatches.configured(self.on_cluster)
        self.spark_batches_taken = 0   # batches (and pasts) whose parts Spark computed (dsp.spark_partials)
        self.handoff_dir = "" if not self.spark_batches.handoff else os.path.join(self.spark_queries.state_dir,
                                                                                  "handoff")
        sweep_handoff(self.handoff_dir)   # what a node that stopped left
        # a constrained link to the parent: messages wait in lanes by priority (none: straight to the broker)
        self.uplink = Uplink(os.path.join(self.spark_queries.state_dir, "uplink"), uplink_bytes_per_s,
                             bootstrap) if uplink_bytes_per_s > 0 else None
        # (fence key, batch id) that failed after it started: run again before the next (_batch)
        self._pending: tuple[str, int] | None = self.checkpoint.unfinished()

    # ------------------------------------------------------------ deploying

    def deploy(self, spec: PartSpec, on_batch: BatchHook | None = None, bounds: OutputBounds | None = None) -> None:
        """Run `spec`: a part adopted from a dead node (`owner`, glue.adoption) gets readers of its
        own, which start where its `start_offsets` say whatever this node already reads; `bounds`:
        what of its output goes out (dsp.bounds); a part with `history_from_ms` is first fed what
        the readers it joins archived from then on (unless it takes saved state back);
        `on_batch`: told of each batch it emitted."""
        query_id, plan, owner, history_from_ms = spec.query_id, spec.plan, spec.owner, spec.history_from_ms
        start_offsets = spec.start_offsets or None
        if not supported(plan):
            if owner or bounds is not None:
                raise PlanError(f"part {query_id} runs as a Spark query of its own: it cannot be adopted or bounded")
            self.spark_queries.deploy(spec, on_batch)
            return
        with self._locks.control():
            if query_id in self._parts:
                raise QueryExists(f"query {query_id!r} is already deployed on {self.node_id}")
            columns = [name for name, _ in output_columns(plan)]
            part = Part(ManagedQuery(query_id, plan, spec.topic, started_at=time.monotonic()),
                        build(plan, self.relations()), frozenset(t for s in sources(plan) for t in s.topics),
                        columns, on_batch, owner=owner, bounds=bounds, priority=spec.priority,
                        inputs=frozenset((t, s.format) for s in sources(plan) for t in s.topics))
            saved = self.checkpoint.saved_part(query_id)
            resumed = saved is not None and saved[0] == to_json(plan)
            if resumed:
                part.take_back(saved)
            # inputs written by parts of this node are handed over in process (_feed); not an
            # adopted part's, nor a bounded one's (what it hands must be what goes out), nor a
            # part's over the past (what was handed before it came is not archived here)
            past = history_from_ms is not None and time.time() * 1000 - history_from_ms > PAST_MS
            part.local_topics = frozenset() if owner or past else part.topics & {
                p.managed.output_topic for p in self._parts.values() if not p.owner and p.bounds is None}
            if history_from_ms is not None and not resumed:
                self._feed_history(part, history_from_ms, past)
            self._parts[query_id] = part
            for source in sources(plan):
                for topic in source.topics:
                    if topic in part.local_topics:
                        continue
                    self._ensure_reader(Reader((topic,), source.format,
                                               source.columns if source.format != "rfid" else (), owner), start_offsets)
            self._tell_changed()

    def _feed_history(self, part: Part, since_ms: int, past: bool) -> None:
        """Feed a new part the batches the readers it joins archived from `since_ms` on (under the
        lock: the next batch it sees is the one after the last archived); `past`: a query over the
        past, whose raw sources first wait as long as the archive's latest row came late."""
        joined = {key: reader for key, reader in self._readers.items()
                  if not reader.owner and any((t, reader.format) in part.inputs for t in reader.topics)}
        archived = {archive_key: topic for reader in joined.values() for topic in reader.topics
                    if (topic, reader.format) in part.inputs for archive_key in reader.archive_keys(topic)}
        if past and self._feed_history_on_spark(part, since_ms, archived):
            return
        late_ms = self._lateness_seen(joined, since_ms) if past else 0
        sources = raw_sources(part.root)
        for source in sources:   # a row that came too late for its window live is in it over the past
            source.history_lateness_ms = max(0, late_ms - source.plan.watermark_ms)
        producer, sent = self._producer_for(), []
        reports: list[tuple[Part, BatchReport]] = []
        batches = 0
        for key, table in self.archive.batches(since_ms, archived):
            self._feed(part, functools.partial(_push, archived[key], table), producer, sent, reports)
            batches += 1
        for source in sources:   # the live stream's own lateness from the seam on
            source.history_lateness_ms = 0
        bus.deliver(producer, sent)
        self._run_hooks(reports)   # what it emitted counts in the node's statistics like the rest
        log.info("node %s: part %s fed %d archived batches from %d on (rows up to %d ms late kept)", self.node_id,
                 part.managed.query_id, batches, since_ms, late_ms)

    def _feed_history_on_spark(self, part: Part, since_ms: int, archived: Mapping[str, str]) -> bool:
        """The part's past computed by Spark over the archive's files as one batch (dsp.spark_past)
        when Spark can compute the part and `SparkBatches.past` says so; whether it was."""
        if not spark_partials.computable(part.root) or not self.spark_batches.past(int(time.time() * 1000) - since_ms):
            return False
        producer, sent = self._producer_for(), []
        reports: list[tuple[Part, BatchReport]] = []
        with self.archive.held():
            stored = self.archive.stored(since_ms, archived)
            frame = spark_past.archived_frame(self.spark, stored, archived)
            if frame is not None:
                batch = spark_partials.BatchOnSpark.progress(frame, sorted(set(archived.values())),
                                                             sources_under(part.root))
                self._feed(part, functools.partial(spark_partials.push, batch=batch, together=True),
                           producer, sent, reports)
                self.spark_batches_taken += 1
        bus.deliver(producer, sent)
        self._run_hooks(reports)
        log.info("node %s: part %s fed its past from %d on by Spark (%d archived files or row groups)",
                 self.node_id, part.managed.query_id, since_ms, len(stored))
        return True

    def _lateness_seen(self, joined: Mapping[str, Reader], since_ms: int) -> int:
        """How late the latest raw row the archive holds from `since_ms` on came (capped)."""
        raw = [key for key, reader in joined.items() if reader.format in ("rfid", "samples")]
        found = max((lateness_seen((table for _, table in self.archive.batches(since_ms, [key])), "ts")
                     for key in raw), default=0)
        return min(found, HISTORY_LATENESS_CAP_MS)

    def set_bounds(self, query_id: str, bounds: OutputBounds | None) -> None:
        with self._locks.control():
            self.part(query_id).bounds = bounds

    def ensure_ingest(self) -> None:
        """An edge node's raw topic is always read (it is the node's data listener), its readings
        and its motes' samples: both are archived, for queries over the past."""
        if self.ingest is not None:
            with self._locks.control():
                self._ensure_reader(Reader((self.ingest.raw_topic,), "rfid"), None)
                self._ensure_reader(Reader((self.ingest.raw_topic,), "samples", RAW_SAMPLE_SOURCE_COLUMNS), None)

    def _ensure_reader(self, reader: Reader, start_offsets: Mapping[str, int] | None) -> None:
        """`reader`'s form read: the one of its key, with the topics added, or a new one. A topic
        new to the node's stream starts where `start_offsets` say (else where a reader of an older
        layout left it, else at its beginning); one it reads already (a raw topic's other form)
        where the stream is; one it read before the node stopped where it read to (its saved
        position). The process's stream is told by _tell_changed."""
        current = self._readers.get(reader.key)
        if current is not None and set(reader.topics) <= set(current.topics):
            return
        stream = reader.stream
        streamed = self._stream_topics(stream)
        fresh = [topic for topic in reader.topics if topic not in streamed]
        starts = self._starts.setdefault(stream, {})
        for offset_key in [k for k in starts if k.rpartition(":")[0] in fresh]:   # where it started before goes
            del starts[offset_key]
        starts.update({k: v for k, v in (start_offsets or {}).items() if k.rpartition(":")[0] in fresh})
        if current is None:
            starts.update(self._older_layout_starts(reader, fresh))   # where it read to wins, as a saved position does
            self._readers[reader.key] = reader
            self._add_source(reader)
        else:
            self._readers[reader.key] = current.with_topics(current.topics + reader.topics)
        self._streams.add(stream)
        self._changed.add(stream)

    def _stream_topics(self, stream: str) -> list[str]:
        """Every topic stream `stream` reads (for its forms), sorted."""
        return sorted({t for r in self._readers.values() if r.stream == stream for t in r.topics})

    def _older_layout_starts(self, reader: Reader, topics: Sequence[str]) -> dict[str, int]:
        """Where the Spark queries of a node of an older layout (a query per node, per form, or per
        topic) had saved their effects on `topics` (their fence's batch end, from their offset
        logs): the node's stream starts those topics there, nothing lost or doubled. Their
        checkpoints are left."""
        found: dict[str, int] = {}
        for topic in topics:
            for old_key in (reader.stream, *reader.older_queries(topic)):
                fence = self.checkpoint.fences.get(old_key)
                end = batch_end(self.spark_queries.spark_checkpoint(old_key), fence) if fence is not None else None
                if end is not None and any(k.rpartition(":")[0] == topic for k in end):
                    found.update({k: v for k, v in end.items() if k.rpartition(":")[0] == topic})
                    log.warning("node %s: %s was read by a Spark query of an older layout (%s, batch %d); the "
                                "node's stream starts it where that one ended", self.node_id, topic, old_key, fence)
                    break
        return found

    def _add_source(self, reader: Reader) -> None:
        """The source options of form `reader` (dsp.kafka_source), and its reader for small batches."""
        ingest = self.ingest if reader.format == "rfid" else None
        event_time = next((n for n in ("window_start", *(n for n, k in reader.columns if k == "timestamp"))
                           if n in dict(reader.columns)), "")
        ctx = CompileContext(self.spark, self.bootstrap, ingest=ingest, intake=self.intake(), mdr_url=self.mdr_url,
                             handoff_dir=self.handoff_dir)
        # a samples form's clock rows move event time while the motes hold samples back (SourceOp)
        options = reader_options(ctx, reader.topics, reader.format, reader.columns, reader.shared,
                                 event_time, heartbeats=reader.format == "samples")
        if reader.shared:
            options["topic_column"] = "true"
        self._sources[reader.key] = options
        if not self.on_cluster:   # a cluster's executors read every batch: the driver does not fetch
            self._local_readers[reader.key] = local_reader(options)

    def _lane(self, stream: str) -> str:
        """The node's stream `stream` as a lane of the process's stream."""
        return f"{self.node_id}/{stream}"

    def _tell_changed(self) -> None:
        """Tell the process's stream the topics of the node's streams that changed (read from its
        next batch on; a stream that reads nothing any more is no lane of it)."""
        with self._locks.control():
            changed, self._changed = self._changed, set()
            for stream in sorted(changed):
                if stream in self._streams:
                    self.stream.attach(self._lane(stream), self._stream_topics(stream),
                                       functools.partial(self._batch, stream))

    # ------------------------------------------------------------ the data path

    def _batch(self, stream: str, batch_id: int, ends: Offsets, identity: str) -> None:
        """Batch `batch_id` of the process's stream (`identity`: its checkpoint's id) for the node's
        stream `stream`, up to `ends`. A batch that failed after it started runs first, with its
        own ends: what it delivered before goes out again alike."""
        fence_key = f"{stream}@{identity}"
        pending = self._pending
        if pending is not None and pending[0] == fence_key and pending[1] < batch_id:
            earlier = self.stream.ends(pending[1], self._lane(stream))
            if earlier is None:
                log.warning("node %s: batch %d of %s failed and is no longer logged; the stream goes on",
                            self.node_id, pending[1], stream)
                self._pending = None
            else:
                self._run_batch(stream, pending[1], earlier, fence_key)
        self._run_batch(stream, batch_id, ends, fence_key)

    def _run_batch(self, stream: str, batch_id: int, ends: Offsets, fence_key: str) -> None:
        """One micro-batch of the node's stream: form by form (in key order), topic by topic,
        through every part that reads them. Its forms are read before the lock is taken (and again
        under it for a form that came or changed meanwhile)."""
        if batch_id <= self.checkpoint.fences.get(fence_key, -1):
            return   # a replay of a batch whose effects were saved: not read again
        if self.handoff_dir and batch_id % 100 == 0:   # files of tasks that failed and ran again
            sweep_handoff(self.handoff_dir, older_than_s=600)
        forms = self._forms_in(stream, self._bounds(stream, ends))
        if not forms:
            return   # nothing new for the node: nothing to save
        fetched: dict = {}   # the batch's records by range, fetched once for all its forms (read_here)
        persisted: list[DataFrame] = []   # the forms Spark reads, unpersisted once the batch is done

        def take(reader: Reader, start: Offsets, end: Offsets) -> tuple[DataFrame | None, pa.Table | None]:
            frame, table = self._take(reader, start, end, fetched)
            if frame is not None:
                persisted.append(frame)
            return frame, table

        taken = {reader.key: ((start, end), take(reader, start, end)) for reader, start, end in forms}
        with self._locks.batch():
            bounds = self._bounds(stream, ends)   # the starts as they are now (a deploy may have set some)
            producer, sent = self._producer_for(), []
            reports: list[tuple[Part, BatchReport]] = []
            self.checkpoint.intend(fence_key, batch_id)
            rows = 0
            try:
                for reader, start, end in self._forms_in(stream, bounds):   # the forms as they are now
                    read_at, read = taken.get(reader.key, (None, None))
                    frame, table = read if read_at == (start, end) else take(reader, start, end)
                    if frame is not None:
                        rows += self._spark_batch(reader, batch_id, frame, producer, sent, reports)
                    else:
                        rows += self._driver_batch(reader, batch_id, table, producer, sent, reports)
                bus.deliver(producer, sent)
                if sent:
                    crash_point(AFTER_FLUSH, self.node_id)
            except BaseException:
                # the parts took the batch in but did not record it: back to the saved state,
                # and failing the stream makes Spark replay the batch. What was delivered goes out
                # again alike (same run, batch ids and chunks) and every reader drops it: exactly
                # once. A process that dies here does the same when it starts again.
                log.warning("node %s: batch %s of %s failed with %d messages sent; it runs again from the saved "
                            "state", self.node_id, batch_id, stream, len(sent))
                self._restore()
                self._pending = (fence_key, batch_id)
                raise
            finally:
                for frame in persisted:
                    frame.unpersist()
            self.checkpoint.fences[fence_key] = batch_id
            self._advance(stream, bounds)
            self._save()
            self.input_rate.add(rows, time.monotonic())
            self._pending = None
        # the parts' hooks (the node's statistics) once the batch is recorded: a batch that
        # failed and runs again counts once
        self._run_hooks(reports)

    def _bounds(self, stream: str, ends: Offsets) -> tuple[Offsets, Offsets]:
        """Where the stream's batch up to `ends` starts: where it read to, for a partition new to it
        where its starts say, else at the partition's beginning."""
        position = self.checkpoint.positions.get(stream, {})
        starts = self._starts.setdefault(stream, {})
        unknown = [key for key in ends if key not in position and key not in starts]
        for key, offset in (bus.beginnings(self.bootstrap, unknown) if unknown else {}).items():
            starts.setdefault(key, offset)   # asked once: an empty partition has no position for a while
        return {key: position.get(key, starts.get(key, 0)) for key in ends}, dict(ends)

    def _advance(self, stream: str, bounds: tuple[Offsets, Offsets]) -> None:
        """The stream has read to the batch's ends (a start past its end stays: nothing was read)."""
        start, end = bounds
        position = self.checkpoint.positions.setdefault(stream, {})
        position.update({key: max(start[key], end[key]) for key in end})

    def _forms_in(self, stream: str, bounds: tuple[Offsets, Offsets]) -> list[tuple[Reader, Offsets, Offsets]]:
        """Each form of `stream` that has records in the batch of `bounds`, in key order, with its
        topics' part of them (a partition new to the stream starts where it ends: nothing yet)."""
        start, end = bounds
        found = []
        for key in sorted(self._readers):
            reader = self._readers[key]
            if reader.stream != stream:
                continue
            topics = set(reader.topics)
            ends = {k: v for k, v in end.items() if k.rpartition(":")[0] in topics}
            starts = {k: start.get(k, v) for k, v in ends.items()}
            if any(ends[k] > starts[k] for k in ends):
                found.append((reader, starts, ends))
        return found

    def _take(self, reader: Reader, start: Offsets, end: Offsets,
              fetched: dict) -> tuple[DataFrame | None, pa.Table | None]:
        """Form `reader`'s records from `start` to `end`: as a DataFrame, persisted (several jobs
        read it), when Spark computes its parts (spark_partials.SparkBatches); else its rows, a
        small batch read here (KafkaStreamReader.read_here, its records fetched once for every
        form of the batch: `fetched`), a larger one by Spark's tasks."""
        if self.spark_batches.enabled and not self.spark_batches.small(sum(end.values()) - sum(start.values())):
            return self._frame(reader, start, end).persist(), None
        local = self._local_readers.get(reader.key)
        if local is not None and (table := local.read_here(start, end, fetched)) is not None:
            return None, table
        table = self._frame(reader, start, end).toArrow()
        return None, take_handoff(table) if self.handoff_dir else table

    def _frame(self, reader: Reader, start: Offsets, end: Offsets) -> DataFrame:
        """Form `reader`'s records from `start` to `end` as a batch DataFrame Spark's tasks read."""
        return (self.spark.read.format("hifi_kafka").options(**self._sources[reader.key])
                .option("startingOffsets", json.dumps(start)).option("endingOffsets", json.dumps(end)).load())

    def _driver_batch(self, reader: Reader, batch_id: int, table: pa.Table, producer, sent: list,
                      reports: list[tuple[Part, BatchReport]], skip: Callable[[Part], bool] = lambda part: False,
                      archive: bool = True) -> int:
        """The batch's rows, here, topic by topic through every part reading them (but `skip`'s);
        how many rows it had."""
        pieces = by_topic(table, reader.topics)
        # archived while the parts take the batch in (parquet writes without the GIL: 0.3 s of a
        # 2 M-row batch, measured), and before the batch is recorded
        archiving = None
        if not reader.owner and archive:
            archiving = threading.Thread(target=self._archive, args=(reader, batch_id, pieces), name="archive-batch")
            archiving.start()
        try:
            for part, read in self._pieces_by_part(reader, pieces):
                if not skip(part):
                    self._feed(part, functools.partial(_push_many, read), producer, sent, reports)
        finally:
            if archiving is not None:
                archiving.join()
        return table.num_rows

    def _spark_batch(self, reader: Reader, batch_id: int, frame: DataFrame, producer, sent: list,
                     reports: list[tuple[Part, BatchReport]]) -> int:
        """The batch on Spark (dsp.spark_partials): the parts Spark can compute take its partials,
        the others its rows, here; archived by Spark's tasks. How many rows it had."""
        reading = {id(p): p for topic in reader.topics for p in self._parts_reading(reader, topic)}
        on_spark = [p for p in reading.values() if spark_partials.computable(p.root)]
        batch = spark_partials.BatchOnSpark.progress(frame, reader.topics,
                                                     [s for p in on_spark for s in sources_under(p.root)])
        if not reader.owner:
            self._archive_on_spark(reader, batch_id, frame)
        for part in on_spark:
            self._feed(part, functools.partial(spark_partials.push, batch=batch), producer, sent, reports)
        self.spark_batches_taken += 1
        if len(on_spark) < len(reading):   # the rest need the rows (already archived)
            done = {id(p) for p in on_spark}
            self._driver_batch(reader, batch_id, frame.toArrow(), producer, sent, reports,
                               skip=lambda part: id(part) in done, archive=False)
        return batch.rows

    def _pieces_by_part(self, reader: Reader, pieces: list[tuple[str, pa.Table]]) -> list[tuple[Part, list]]:
        """Each part reading some of the batch's topics, with those topics' rows (in the batch's
        order): a part takes a batch of many children's views in one push (engine.push_many)."""
        found: dict[str, tuple[Part, list]] = {}
        for topic, rows in pieces:
            for part in self._parts_reading(reader, topic):
                found.setdefault(part.managed.query_id, (part, []))[1].append((topic, rows))
        return list(found.values())

    def _parts_reading(self, reader: Reader, topic: str) -> list[Part]:
        """The parts fed `topic`'s rows from `reader`: a raw topic has two readers (readings,
        samples), each feeding the parts reading its form; an adopted part only its own."""
        return [p for p in self._parts.values() if topic in p.topics - p.local_topics and p.feeds
                and p.owner == reader.owner and (topic, reader.format) in p.inputs]

    def _archive_on_spark(self, reader: Reader, batch_id: int, frame: DataFrame) -> None:
        """The batch archived by Spark's tasks (one Parquet folder per topic); as `_archive`, a
        failure is logged and the stream goes on."""
        try:
            for topic, written in spark_partials.write_by_topic(frame, reader.topics, self.archive.scratch()).items():
                self.archive.adopt(reader.archive_keys(topic)[0], batch_id, written)
        except Exception:  # noqa: BLE001 - see _archive
            self.archive.usage.failures += 1
            log.exception("node %s: archiving batch %s of %s on Spark failed", self.node_id, batch_id, reader.key)

    def _run_hooks(self, reports: list[tuple[Part, BatchReport]]) -> None:
        """A hook that fails fails its part, as its sink would."""
        for part, report in reports:
            try:
                part.on_batch(report)
            except Exception as exc:  # noqa: BLE001 - one part's failure must not stop the others
                self._fail(part, exc)
            else:
                self._proven(part)

    @staticmethod
    def _proven(part: Part) -> None:
        """A part rebuilt after a failure emitted and recorded a batch: it runs again."""
        if part.proving:
            part.proving = False
            part.managed.status, part.managed.error = "running", ""

    def _archive(self, reader: Reader, batch_id: int, pieces: list[tuple[str, pa.Table]]) -> None:
        """A batch's rows, topic by topic. A batch the archive cannot take (a full disk) is logged
        and the stream goes on: the answers of the present come before the record of the past."""
        for topic, rows in pieces:
            key = reader.archive_keys(topic)[0]
            try:
                self.archive.append(key, batch_id, rows)
            except Exception:  # noqa: BLE001 - see the docstring
                self.archive.usage.failures += 1
                log.exception("node %s: archiving batch %s of %s failed", self.node_id, batch_id, key)

    def _feed(self, part: Part, push: Callable[[Operator], pa.Table | None], producer, sent: list,
              reports: list[tuple[Part, BatchReport]]) -> None:
        """Push the batch through `part` (`push` into its evaluator; then into the parts here that
        read its output), adding the messages to send to `sent` and its report for the node's
        statistics to `reports`."""
        started = time.monotonic()
        managed = part.managed
        if self.uplink is not None:   # queued on disk by priority; the uplink sends at the link's rate
            producer = self.uplink.lane(part.priority)
        try:
            out = push(part.root)
            if out is None:
                return
            rows: list[tuple] = rows_of(out) if out.num_rows else []
            if rows and part.bounds is not None:
                rows = part.bounds.keep(rows, part.columns)
            if rows:
                part.sequence += 1
                sent += send_rows(producer, managed.output_topic, self.node_id, managed.query_id, part.columns, rows,
                                  part.sequence, part.run)
            bound, marker = part.root.bound(), None
            if bound is not None and part.bounds is not None:
                bound = part.bounds.cap(bound)
            if part.publishes_markers and bound is not None and (part.last_marker is None or bound > part.last_marker):
                part.sequence += 1
                sent.append(send_marker(producer, managed.output_topic, self.node_id, managed.query_id, part.sequence,
                                        bound, part.run))
                part.last_marker = marker = bound
            readers_here = [p for p in self._parts.values() if managed.output_topic in p.local_topics and p.feeds]
            if readers_here and (rows or marker is not None):
                handed = view_batch(output_columns(managed.plan), out, marker)
                for reader in readers_here:
                    self._feed(reader, functools.partial(_push, managed.output_topic, handed), producer, sent, reports)
            if part.on_batch is not None and rows:
                reports.append((part, self._report(part, rows, started)))
            elif rows:
                self._proven(part)
        except Exception as exc:  # noqa: BLE001 - one part's failure must not stop the others
            self._fail(part, exc)

    def _fail(self, part: Part, exc: Exception) -> None:
        """The part failed: shown with its cause, rebuilt after a wait (see queries)."""
        log.exception("node %s: part %s failed", self.node_id, part.managed.query_id, exc_info=exc)
        part.managed.status, part.managed.error = "failed", failure_cause(str(exc))
        part.managed.failed_at = time.monotonic()

    @staticmethod
    def _report(part: Part, rows: list[tuple], started: float) -> BatchReport:
        report = BatchReport(part.sequence, rows_out=len(rows), duration_s=time.monotonic() - started,
                             emitted_ms=int(time.time() * 1000))
        event_time = event_time_column(part.managed.plan) if part.managed.plan is not None else None
        if event_time in part.columns:
            at = part.columns.index(event_time)
            stamps = [r[at] for r in rows if r[at] is not None]
            report.max_event_ms = round(max(stamps).timestamp() * 1000) if stamps else None
        return report

    def _producer_for(self):
        # One producer per process, as the marker listener and the data sources use (kafka-python's
        # producer is thread-safe; each one is a network thread and a connection).
        return bus.shared_producer(self.bootstrap)

    # ------------------------------------------------------------ state

    def _save(self) -> None:
        self.checkpoint.save({qid: p.saved() for qid, p in self._parts.items() if p.managed.plan is not None})

    def _restore(self) -> None:
        """Every part back to its state at the last save (a part deployed since: built anew)."""
        saved = self.checkpoint.at_last_save()
        for query_id, part in self._parts.items():
            if part.managed.plan is None:
                continue
            kept = saved.get(query_id)
            if kept is not None and kept[0] == to_json(part.managed.plan):
                part.take_back(kept)
            else:
                part.root, part.sequence, part.last_marker = build(part.managed.plan, self.relations()), 0, None

    # ------------------------------------------------------------ lifecycle

    def suspend(self, query_id: str) -> None:
        with self._locks.control():
            if query_id not in self._parts:
                return self.spark_queries.suspend(query_id)
            self._parts[query_id].managed.status = "suspended"

    def resume(self, query_id: str) -> None:
        with self._locks.control():
            if query_id not in self._parts:
                return self.spark_queries.resume(query_id)
            self._parts[query_id].managed.status = "running"

    def cancel(self, query_id: str, drop_state: bool = True) -> None:
        with self._locks.control():
            part = self._parts.pop(query_id, None)
            if part is None:
                return self.spark_queries.cancel(query_id, drop_state)
            part.managed.status = "stopped"
            still_read = {(p.owner, t, form) for p in self._parts.values() for t, form in p.inputs
                          if t not in p.local_topics}
            if self.ingest is not None:   # the data listener
                still_read |= {("", self.ingest.raw_topic, "rfid"), ("", self.ingest.raw_topic, "samples")}
            for key, reader in list(self._readers.items()):
                kept = [t for t in reader.topics if (reader.owner, t, reader.format) in still_read]
                if len(kept) < len(reader.topics):
                    self._changed.add(reader.stream)
                if kept:
                    self._readers[key] = reader.with_topics(kept)
                else:
                    del self._readers[key]
                    self._sources.pop(key, None)
                    self._local_readers.pop(key, None)
            for stream in self._streams:   # a topic dropped and read again starts afresh
                read = set(self._stream_topics(stream))
                position = self.checkpoint.positions.get(stream, {})
                for key in [k for k in position if k.rpartition(":")[0] not in read]:
                    del position[key]
            idle = self._streams - {r.stream for r in self._readers.values()}
            self._streams -= idle
            if self._pending is not None and self._pending[0].rpartition("@")[0] in idle:   # no replay will come
                self._pending = None
        for stream in idle:   # outside the lock: the process's stream may wait for a batch in flight
            self.stream.detach(self._lane(stream))
        with self._locks.control():
            for stream in idle:
                for key in [k for k in self.checkpoint.fences if k.rpartition("@")[0] == stream]:
                    del self.checkpoint.fences[key]
                self.checkpoint.positions.pop(stream, None)
                self._starts.pop(stream, None)
            self._tell_changed()   # in the same hold: each takes its turn after a batch in flight

    def stop_all(self) -> None:
        for stream in sorted(self._streams):   # no lock: the last lane's stop waits for the batch in flight
            self.stream.detach(self._lane(stream))
        self.spark_queries.stop_all()
        if self.uplink is not None:
            self.uplink.stop()   # what it still holds waits on disk for the next start
        with self._locks.control():
            self._readers.clear()
            self._streams.clear()
            self._parts.clear()

    # ------------------------------------------------------------ inspection

    def part(self, query_id: str) -> Part:
        """A plan running on the shared readers (KeyError if it runs elsewhere or nowhere)."""
        return self._parts[query_id]

    def plans(self) -> list[Plan]:
        """The plans of every part and Spark query deployed, whatever their state (no side effects,
        unlike queries(): the sensor proxy reads them)."""
        return [p.managed.plan for p in list(self._parts.values()) if p.managed.plan is not None] + \
            self.spark_queries.plans()

    def queries(self) -> list[ManagedQuery]:
        """The node's queries (readers are not queries of their own): a part whose reader is
        down shows as failed with the reader's error; a part that failed is rebuilt (its state
        lost) after the next wait of RESTART_AFTER_S."""
        spark_queries = self.spark_queries.queries()
        failure = self.stream.failure() if self._streams else ""
        now = time.monotonic()
        # no lock (status fields only): a batch in flight holds it while it writes
        down = {(reader.owner, topic): failure for reader in list(self._readers.values()) if failure
                for topic in reader.topics}
        for part in list(self._parts.values()):
            managed = part.managed
            if managed.failed_at is not None:
                wait = RESTART_AFTER_S[min(managed.restarts, len(RESTART_AFTER_S) - 1)]
                if now - managed.failed_at >= wait and managed.plan is not None:
                    managed.restarts += 1
                    part.root, managed.failed_at = build(managed.plan, self.relations()), None
                    managed.started_at, part.proving = now, True
                continue
            reader_error = next((down[part.owner, t] for t in part.topics if (part.owner, t) in down), None)
            if reader_error is not None:
                managed.status, managed.error = "failed", reader_error
            elif managed.status == "failed" and not part.proving:
                managed.status, managed.error = "running", ""
        parts = [p.managed for p in list(self._parts.values())]
        return parts + [q for q in spark_queries if not q.query_id.startswith(READER_PREFIX)]

    def progress(self) -> dict[str, float]:
        """Input rate (rows/s the readers read; the Spark-run plans' reads too) and rows dropped
        as late (by the parts and by Spark's watermarks)."""
        found = self.spark_queries.progress(leave_out=READER_PREFIX)
        # no lock: a batch in flight holds it while it writes, and the gauges must not wait
        late = sum(p.root.late_rows() for p in list(self._parts.values()))
        return {"input_rate": found["input_rate"] + self.input_rate.per_second(time.monotonic()),
                "late_rows": found["late_rows"] + late}

