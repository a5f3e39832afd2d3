"""What a node reads: the forms of its input (`Reader`), their sources, and where each of the
node's streams (lanes of the process's one Spark stream, dsp.runtime.process_stream) reads from.

A form is a set of topics read alike: the raw topic's readings, its motes' samples, the
children's views of one shape. The node's stream (`stream_key`) reads every topic of its forms;
a micro-batch's bounds (where the stream read to, where the batch ends) are cut per form
(`NodeInputs.forms_in`) and read here (a small batch: `KafkaStreamReader.read_here`) or by
Spark's tasks (`NodeInputs.take`). The runtime (dsp.runtime.shared) decides what is read; this keeps it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from dsp.runtime.checkpoint import BatchCheckpoint
from dsp.spark import kafka_read
from dsp.spark.compiler import CompileContext, Ingest, reader_options
from dsp.spark.handoff import take_handoff
from dsp.spark.kafka_source import KafkaStreamReader, local_reader
from dsp.spark.lane_offsets import OffsetRange
from dsp.spark.offset_log import Offsets, batch_end
from dsp.spark.partials import SparkBatches
from dsp.turns import stepping_aside
from wire.intake import IntakeRules
from wire.kafka import offsets

log = logging.getLogger("hifi.dsp")
READER_PREFIX = "read:"


def stream_key(owner: str = "") -> str:
    """The node's stream, which reads every topic its parts read (the parts adopted from `owner`
    have one of their own: they read from that node's position, not this one's); each is a lane
    of the process's Spark query (dsp.runtime.process_stream)."""
    return f"{READER_PREFIX}{owner + '@' if owner else ''}node"


def lane_name(node_id: str, stream: str) -> str:
    """The node's stream `stream` as a lane of the process's stream (dsp.runtime.process_stream).

    >>> lane_name("w1", stream_key())
    'w1/read:node'
    """
    return f"{node_id}/{stream}"


def topic_of(offset_key: str) -> str:
    """The topic of an offset key ("<topic>:<partition>").

    >>> topic_of("hifi.view.w.v:0")
    'hifi.view.w.v'
    """
    return offset_key.rpartition(":")[0]


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
        """Where the archive keeps this form's rows of `topic`. The driver's path archives a batch
        whole under the reader's key (a shared reader's rows each with its topic, TOPIC_COLUMN);
        Spark's tasks a topic's rows under `topic_archive_key`; a node that ran before readers were
        shared wrote under the per-topic key. Every one is read back."""
        if not self.shared:
            return (self.key,)
        return self.key, self.topic_archive_key(topic), self._per_topic_key(topic)

    def topic_archive_key(self, topic: str) -> str:
        """Where the archive keeps this form's batches of `topic` alone: Spark's tasks write a
        topic's rows apart (and so did the driver's path before 2026-11-28: a file per child's
        topic per batch was a third of a 64-child parent's Python time)."""
        return f"{self.key}~{topic}" if self.shared else self.key

    def older_queries(self, topic: str) -> tuple[str, ...]:
        """The Spark queries that read `topic` in this form on a node of an older layout: a reader
        per form, and before that a reader per topic."""
        return tuple(dict.fromkeys((self.key, self._per_topic_key(topic))))

    def with_topics(self, topics: Sequence[str]) -> Reader:
        return replace(self, topics=tuple(sorted(set(topics))))


class RecentInput:
    """What the node's batches took in lately: rows per second over the last `span_s` seconds (its
    input rate: a batch read in the driver is not in Spark's progress), and how long their input
    had waited for them (its input lag).

    A batch's wait is how old its oldest record was (by the record's Kafka time: when its writer
    sent it) once the batch was done: what a consumer's lag in time is. A node keeping up waits a
    poll and a batch; one falling behind waits longer batch after batch, whatever its event time
    says (the `lag_ms` gauge: now - the newest event time it emitted, which saws by a window above
    a parent's children's own delay; docs/limits.md)."""

    WAIT_SPAN_S = 2.0   # the longest wait of this many seconds' batches: two of the gauges' rounds

    def __init__(self, span_s: float = 10.0) -> None:
        self.span_s = span_s
        self._batches: deque[tuple[float, int, float | None]] = deque()   # (done at, rows, waited ms)
        self._lock = threading.Lock()

    def add(self, rows: int, at: float, waited_ms: float | None = None) -> None:
        with self._lock:
            self._batches.append((at, rows, waited_ms))
            while self._batches and self._batches[0][0] < at - self.span_s:
                self._batches.popleft()

    def per_second(self, now: float) -> float:
        with self._lock:
            return sum(rows for at, rows, _ in self._batches if at >= now - self.span_s) / self.span_s

    def longest_wait_ms(self, now: float) -> float:
        """The longest wait of the batches of the last WAIT_SPAN_S seconds (0: none; nothing came)."""
        with self._lock:
            return max((waited for at, _, waited in self._batches
                        if waited is not None and at >= now - self.WAIT_SPAN_S), default=0.0)


@dataclass(frozen=True)
class SourceSettings:
    """What a form's source needs besides its topics (dsp.spark.compiler.reader_options)."""

    spark: SparkSession
    bootstrap: str
    ingest: Ingest | None
    intake: Callable[[], IntakeRules]
    mdr_url: str
    handoff_dir: str   # "" when rows go through Spark (a cluster), not handed over in files
    on_cluster: bool   # a cluster's executors read every batch: the driver fetches nothing


class NodeInputs:
    """The forms of the node's input by key, their sources, the node's streams and the start
    offsets of topics new to them, and the streams whose topics changed (the runtime tells the
    process's stream). Callers hold the runtime's lock."""

    def __init__(self, node_id: str, settings: SourceSettings, checkpoint: BatchCheckpoint,
                 spark_checkpoint: Callable[[str], str], spark_batches: SparkBatches) -> None:
        """`spark_checkpoint`: where the Spark query of a key kept its checkpoint (an older layout's)."""
        self.node_id, self.settings, self.checkpoint = node_id, settings, checkpoint
        self.spark_checkpoint, self.spark_batches = spark_checkpoint, spark_batches
        self.readers: dict[str, Reader] = {}
        self.streams: set[str] = set()   # the node's streams read (stream_key): lanes of the process's stream
        self.changed: set[str] = set()   # streams whose topics changed: told once the change is made
        self._sources: dict[str, dict[str, str]] = {}   # each form's source options (dsp.spark.kafka_source)
        self._local_readers: dict[str, KafkaStreamReader] = {}   # each form's source, for small batches
        self._starts: dict[str, dict[str, int]] = {}   # each stream's start offsets for topics new to it

    def ensure(self, reader: Reader, start_offsets: Mapping[str, int] | None) -> None:
        """`reader`'s form read: the one of its key, with the topics added, or a new one. A topic
        new to the node's stream starts where `start_offsets` say (else where a reader of an older
        layout left it, else at its beginning); one it reads already (a raw topic's other form)
        where the stream is; one it read before the node stopped where it read to (its saved
        position)."""
        current = self.readers.get(reader.key)
        if current is not None and set(reader.topics) <= set(current.topics):
            return
        stream = reader.stream
        streamed = self.stream_topics(stream)
        fresh = [topic for topic in reader.topics if topic not in streamed]
        starts = self._starts.setdefault(stream, {})
        for offset_key in [k for k in starts if topic_of(k) in fresh]:   # where it started before goes
            del starts[offset_key]
        starts.update({k: v for k, v in (start_offsets or {}).items() if topic_of(k) in fresh})
        if current is None:
            starts.update(self._older_layout_starts(reader, fresh))   # where it read to wins, as a saved position does
            self.readers[reader.key] = reader
            self._add_source(reader)
        else:
            self.readers[reader.key] = current.with_topics(current.topics + reader.topics)
        self.streams.add(stream)
        self.changed.add(stream)

    def keep_only(self, still_read: set[tuple[str, str, str]]) -> set[str]:
        """Stop reading what no part reads any more (`still_read`: (owner, topic, format)); the
        streams that read nothing now (to detach, then `forget`). A topic dropped and read
        again starts afresh."""
        for key, reader in list(self.readers.items()):
            kept = [t for t in reader.topics if (reader.owner, t, reader.format) in still_read]
            if len(kept) < len(reader.topics):
                self.changed.add(reader.stream)
            if kept:
                self.readers[key] = reader.with_topics(kept)
            else:
                del self.readers[key]
                self._sources.pop(key, None)
                self._local_readers.pop(key, None)
        for stream in self.streams:
            read = set(self.stream_topics(stream))
            position = self.checkpoint.positions.get(stream, {})
            for key in [k for k in position if topic_of(k) not in read]:
                del position[key]
        idle = self.streams - {r.stream for r in self.readers.values()}
        self.streams -= idle
        return idle

    def forget(self, idle: set[str]) -> None:
        """The fences, positions and starts of streams that read nothing any more."""
        for stream in idle:
            for key in [k for k in self.checkpoint.fences if k.rpartition("@")[0] == stream]:
                del self.checkpoint.fences[key]
            self.checkpoint.positions.pop(stream, None)
            self._starts.pop(stream, None)

    def take_changed(self) -> list[str]:
        """The streams read whose topics changed since last asked, sorted."""
        changed, self.changed = self.changed, set()
        return sorted(changed & self.streams)

    def clear(self) -> None:
        self.readers.clear()
        self.streams.clear()

    def stream_topics(self, stream: str) -> list[str]:
        """Every topic stream `stream` reads (for its forms), sorted."""
        return sorted({t for r in self.readers.values() if r.stream == stream for t in r.topics})

    def _older_layout_starts(self, reader: Reader, topics: Sequence[str]) -> dict[str, int]:
        """Where the Spark queries of a node of an older layout (a query per node, per form, or per
        topic) had saved their effects on `topics` (their fence's batch end, from their offset
        logs): the node's stream starts those topics there, nothing lost or doubled. Their
        checkpoints are left."""
        found: dict[str, int] = {}
        for topic in topics:
            for old_key in (reader.stream, *reader.older_queries(topic)):
                fence = self.checkpoint.fences.get(old_key)
                end = batch_end(self.spark_checkpoint(old_key), fence) if fence is not None else None
                if end is not None and any(topic_of(k) == topic for k in end):
                    found.update({k: v for k, v in end.items() if topic_of(k) == topic})
                    log.warning("node %s: %s was read by a Spark query of an older layout (%s, batch %d); the "
                                "node's stream starts it where that one ended", self.node_id, topic, old_key, fence)
                    break
        return found

    def _add_source(self, reader: Reader) -> None:
        """The source options of form `reader` (dsp.spark.kafka_source), and its reader for small batches."""
        settings = self.settings
        ingest = settings.ingest if reader.format == "rfid" else None
        event_time = next((n for n in ("window_start", *(n for n, k in reader.columns if k == "timestamp"))
                           if n in dict(reader.columns)), "")
        ctx = CompileContext(settings.spark, settings.bootstrap, ingest=ingest, intake=settings.intake(),
                             mdr_url=settings.mdr_url, handoff_dir=settings.handoff_dir)
        # a samples form's clock rows move event time while the motes hold samples back (SourceOp)
        options = reader_options(ctx, reader.topics, reader.format, reader.columns, reader.shared,
                                 event_time, heartbeats=reader.format == "samples")
        if reader.shared:
            options["topic_column"] = "true"
        self._sources[reader.key] = options
        if not settings.on_cluster:
            self._local_readers[reader.key] = local_reader(options)

    # ------------------------------------------------------------ a batch's bounds

    def bounds(self, stream: str, ends: Offsets) -> tuple[Offsets, Offsets]:
        """Where the stream's batch up to `ends` starts: where it read to, for a partition new to it
        where its starts say, else at the partition's beginning."""
        position = self.checkpoint.positions.get(stream, {})
        starts = self._starts.setdefault(stream, {})
        unknown = [key for key in ends if key not in position and key not in starts]
        for key, offset in (offsets.beginnings(self.settings.bootstrap, unknown) if unknown else {}).items():
            starts.setdefault(key, offset)   # asked once: an empty partition has no position for a while
        return {key: position.get(key, starts.get(key, 0)) for key in ends}, dict(ends)

    def advance(self, stream: str, bounds: tuple[Offsets, Offsets]) -> None:
        """The stream has read to the batch's ends (a start past its end stays: nothing was read)."""
        start, end = bounds
        position = self.checkpoint.positions.setdefault(stream, {})
        position.update({key: max(start[key], end[key]) for key in end})

    def forms_in(self, stream: str, bounds: tuple[Offsets, Offsets]) -> list[tuple[Reader, Offsets, Offsets]]:
        """Each form of `stream` that has records in the batch of `bounds`, in key order, with its
        topics' part of them (a partition new to the stream starts where it ends: nothing yet)."""
        start, end = bounds
        found = []
        for key in sorted(self.readers):
            reader = self.readers[key]
            if reader.stream != stream:
                continue
            topics = set(reader.topics)
            ends = {k: v for k, v in end.items() if topic_of(k) in topics}
            starts = {k: start.get(k, v) for k, v in ends.items()}
            if any(ends[k] > starts[k] for k in ends):
                found.append((reader, starts, ends))
        return found

    # ------------------------------------------------------------ reading a form's records

    def take(self, reader: Reader, start: Offsets, end: Offsets, fetched: dict,
             archive_to: Callable[[], str] = str) -> tuple[DataFrame | None, pa.Table | None, str]:
        """Form `reader`'s records from `start` to `end`: as a DataFrame, persisted (several jobs
        read it), when Spark computes its parts (spark_partials.SparkBatches), with the folder
        `archive_to` gives, where Spark's tasks write its rows for the archive; else its rows, a
        small batch read here (KafkaStreamReader.read_here, its records fetched once for every
        form of the batch: `fetched`), a larger one by Spark's tasks."""
        if self._spark_computes(start, end):   # read and decoded by Spark's tasks (dsp.spark.kafka_read)
            folder = archive_to()
            frame = kafka_read.read_form(self.settings.spark, self._sources[reader.key], start, end, folder,
                                         kafka_read.group_id(self.node_id, reader.key))
            return frame.persist(), None, folder
        local = self._local_readers.get(reader.key)
        lane = lane_name(self.node_id, reader.stream)   # reads one batch at a time: a consumer of its own
        if local is not None and (table := local.read_here(start, end, fetched, lane)) is not None:
            return None, table, ""
        with stepping_aside():   # Spark's tasks read it: the other lanes go on meanwhile (dsp.turns)
            table = self._frame(reader, start, end).toArrow()
        return None, take_handoff(table) if self.settings.handoff_dir else table, ""

    def ranges_here(self, reader: Reader, start: Offsets, end: Offsets) -> list[OffsetRange]:
        """The ranges `take` fetches in this process for form `reader`'s records from `start` to
        `end` (none: Spark's tasks read them)."""
        if self._spark_computes(start, end):
            return []
        local = self._local_readers.get(reader.key)
        return (local.ranges_here(start, end) or []) if local is not None else []

    def _spark_computes(self, start: Offsets, end: Offsets) -> bool:
        return self.spark_batches.enabled and not self.spark_batches.small(sum(end.values()) - sum(start.values()))

    def _frame(self, reader: Reader, start: Offsets, end: Offsets) -> DataFrame:
        """Form `reader`'s records from `start` to `end` as a batch DataFrame of the Python data
        source (dsp.spark.kafka_source) when the driver computes them: its tasks hand the rows over in
        files (`handoff_dir`), which Spark's Kafka source cannot."""
        return (self.settings.spark.read.format("hifi_kafka").options(**self._sources[reader.key])
                .option("startingOffsets", json.dumps(start)).option("endingOffsets", json.dumps(end)).load())
