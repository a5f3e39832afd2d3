"""Kafka into Spark through Spark 4's Python Data Source API (`format("hifi_kafka")`).

Options:
  bootstrap  broker address list
  topics     comma-separated topics, read as one stream (a parent's union of child views)
  format     "rfid"  raw RfidReadCycle records -> one row per tag read (wire.cycle_columns.RAW_RFID_DDL),
                     with `error` set on rows of records that fail validation; sensor sample
                     batches on the same topic (header hifi-type: sensor-batch) are skipped
             "samples"  the mote sample batches of a raw topic -> one row per sample of the schema
                     given in `schema`: receptor_id, the quantities, ts (read cycles are skipped)
             "rows"  RowBatch records of a view -> rows of the schema given in `schema`
             "offsets"  no rows at all: a node's one stream (dsp.runtime.shared), whose micro-batches only
                     say which offsets they cover; each form of its topics is then read from them
                     (in the driver, or by Spark as a batch: `endingOffsets`)
  heartbeats "true" (format "rfid"): also a row with no tag (tag_id, antenna, read_strength null) for
             every valid read cycle, so a query knows the cycles that read nothing (adaptive smoothing);
             (format "samples"): a row with no receptor at every sample batch's time, so event time
             moves on while the motes hold samples back (the sensor proxy)
  schema     Spark DDL of the rows (format "rows")
  markers    "true": a RowBatch progress marker (no rows, watermark_ms set) becomes one row with
             `__progress` true, every column null but the event-time ones (timestamps), which
             carry the marker's time; the compiler drops it right after the watermark
  startingOffsets  "earliest" (default), "latest" (the end when the first micro-batch plans), or
             JSON {"topic:partition": offset} (partitions it does not name start at 0; see
             wire.kafka.offsets.current_ends): how a query submitted at time T reads exactly what its
             sources received after T. A partition the last batch did not read (a topic added
             to a running reader, or to a query that restarts on its checkpoint) starts where the
             JSON says, else at its beginning
  endingOffsets  (a batch read, `spark.read`) JSON {"topic:partition": offset}: where the records
             end; they start at `startingOffsets` (a partition it does not name: nothing read)
  topics_file  (format "offsets", OFFSETS_ONLY) a JSON file {"lanes": {lane: [topics]}} read at
             every poll: the process's one stream (dsp.runtime.process_stream) says each batch's end for
             every lane's topics, keyed "<lane>|<topic>:<partition>"; where a lane starts is its
             own (its node's saved position). A child added or taken away is a line of that file,
             not a new Spark query
  intake     the node's wire.intake.IntakeRules (JSON): every record is checked against them; what
             fails never reaches a query (raw records: a row with `error` set, which the compiler
             filters out; a view's records: skipped) and never stops one
  event_time (format "rows") the column whose value is checked against the record's arrival
  mdr_url    the MDR: a view's refused records are dead-lettered to hifi.dead.<node> (keyed
             "<topic>:<partition>:<offset>") and counted once however many queries read them
  triage_ms  (format "rfid") Data Triage (dsp.triage): the time a range's read may decode exactly;
             past it the rest is sampled, rows weighing what they stand for (`weight`), the rest
             left out; a row of weight 0 names the range sampled (`offset` to `triaged_to`). 0: all
  ingest_node   set on exactly one query per raw topic (the node's data listener): its reads
             also dead-letter refused raw records (a sensor batch's refused samples each with
             ":<sample>" added to the key) and add the read cycles, readings, samples, duplicates
             and dead letters to the node's statistics in the MDR, fenced by offset range so a
             replayed range counts once, with each receptor's readings, read cycles and weak
             readings (strength below `weak_below`, what cleaning will drop) for the dashboard,
             and the records Data Triage left out (`triaged`)

  topic_column  "true": every row also carries the topic it was read from (column `__topic`, last):
             a reader of several topics (a node's children's views, dsp.runtime.shared) hands each part
             the rows of the topics it reads
  tasks      at most this many tasks read one partition's new records (Spark's cores: a backlog in
             one partition is read in parallel); ranges of RECORDS_PER_TASK records at least
  handoff_dir  (local Spark only) a directory the driver reads: each read() writes its rows there as
             one Arrow IPC file and yields a single row naming it (column `__handoff`, the others
             null); the driver takes the files (take_handoff). The rows skip the trip through the
             JVM and back (toArrow), which cost ~1 µs a row — a third of an edge node's time on a
             2 M-reading backlog, measured (see take_handoff)

Offsets are {"topic:partition": next_offset}; Spark checkpoints them, so a restarted query resumes
exactly where its last committed micro-batch ended. The driver reads a small batch itself with the
same reader (`local_reader`, `read_here`), from the bounds Spark logged for it. The reader is
pickled to the Python workers: it holds only plain options, and clients live in per-process caches
(wire.kafka). Beside it: the ranges and lane offsets (dsp.spark.lane_offsets), the rows' schemas
(row_schema), the handoff file (handoff), refused records (dead_letters), ingest counts (ingest).
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit
from pyspark.sql.types import (
    StructType,
)

from base.plan import PROGRESS_COLUMN
from dsp.operators.topic_batch import TOPIC_COLUMN
from dsp.poll_pace import RAW_TOPICS, PollPace
from dsp.spark.dead_letters import Refusal, dead_letter_once, recent_keys
from dsp.spark.handoff import HANDOFF_COLUMN
from dsp.spark.ingest import IngestTally
from dsp.spark.lane_offsets import OffsetRange, lane_offset_key, partition_key, split_partition_key
from dsp.spark.row_schema import arrow_schema, marker_row, plan_type
from dsp.triage import Triage
from wire.codec import (
    RAW_RFID_COLUMNS,
    DecodedBatch,
    datetime_ms,
    decode_mote_reports,
    decode_sample_rows,
    is_sensor_batch,
    ms_to_datetime,
    parse_row_batch,
    project_rows,
)
from wire.cycle_columns import RAW_RFID_DDL, RawCycle, decode_cycles, rows_table
from wire.intake import (
    DUPLICATE_BATCH,
    IntakeRules,
    RecentCycles,
    arrival_ms,
    rows_problem,
)
from wire.kafka import clients, consumers
from wire.kafka.end_watch import EndWatch
from wire.kafka.offsets import beginnings
from wire.kafka.ranges import read_range, read_short_ranges

TS, PARTITION, OFFSET = (RAW_RFID_COLUMNS.index(c) for c in ("ts", "partition", "offset"))


class TopicLocks:
    """A lock per topic, taken in name order: the driver reads one topic's ranges one batch at a
    time (they share the partition's duplicate look-back, `_recent`), and different topics at
    once. One process-wide lock made the 33 nodes of a 32-door `hifi up` read in turn: their
    batches queued behind each other's fetches (the warehouse's windows 14-16 s late)."""

    def __init__(self) -> None:
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    @contextlib.contextmanager
    def holding(self, topics: Sequence[str]) -> Iterator[None]:
        with self._guard:
            locks = [self._locks.setdefault(topic, threading.Lock()) for topic in sorted(set(topics))]
        with contextlib.ExitStack() as stack:
            for lock in locks:
                stack.enter_context(lock)
            yield


_reading_here = TopicLocks()


OFFSETS_ONLY = "offsets"   # the format of a stream that only says which offsets its batches cover


class RangeDecoder:
    """A range's records as the reader's rows, in its format: read cycles ("rfid", decoded a chunk
    at a time), mote samples ("samples"), or a child's RowBatches ("rows": rows and progress
    markers). Every record is checked (wire.intake): what fails is refused, dead-lettered with its
    reason and counted, never raised; an edge's data listener (`ingest_node`) counts what it took."""

    ROWS_PER_ARROW_BATCH = 20_000
    # read cycles decoded together (wire.cycle_columns): ~2 k records of 10 readings; enough that
    # the per-run costs vanish, few enough that Data Triage's clock sees the decoding as it goes
    CYCLE_BYTES_PER_CHUNK = 1 << 20

    def __init__(self, schema: StructType, bootstrap: str, format: str, options: Mapping[str, str]) -> None:  # noqa: A002
        self.schema, self.bootstrap, self.format = schema, bootstrap, format
        self.ingest_node = options.get("ingest_node", "")
        self.markers = options.get("markers", "false") == "true"
        self.heartbeats = options.get("heartbeats", "false") == "true"
        self.mdr_url = options.get("mdr_url", "")
        self.weak_below = float(options.get("weak_below", "0"))
        self.rules = IntakeRules.from_option(options.get("intake", ""))
        self.event_time = options.get("event_time", "")
        self.triage_s = int(options.get("triage_ms", "0")) / 1000
        # the reader's own columns and types (not the marker flag): what a child's rows must carry
        self.columns = [(f.name, plan_type(f.dataType)) for f in schema.fields if f.name != PROGRESS_COLUMN]

    def rows(self, partition: OffsetRange, prefetched: list | None = None) -> Iterator[pa.RecordBatch]:
        """The range's rows. Nothing a record holds can make this raise: what fails wire.intake's
        checks is refused (dead-lettered with its reason by the reader that owns that, counted,
        and skipped), so no record can stop a query."""
        records = prefetched if prefetched is not None else read_range(
            self.bootstrap, partition.topic, partition.partition, partition.start, partition.end)
        schema = arrow_schema(self.schema)
        if self.format == "rows":
            rows = self.view_rows(partition, records)
            for at in range(0, len(rows), self.ROWS_PER_ARROW_BATCH):
                yield _to_arrow(rows[at:at + self.ROWS_PER_ARROW_BATCH], schema)
            return
        recent = recent_keys(self.bootstrap, partition.topic, partition.partition, partition.start, self.format)
        names = self.schema.fieldNames()
        ingest = IngestTally(partition, self.weak_below) if self.ingest_node else None
        rows: list[tuple] = []
        cycles: list[RawCycle] = []   # rfid: read cycles, decoded a chunk at a time (wire.cycle_columns)
        cycle_bytes = 0
        triage = Triage(self.triage_s, partition.partition)
        left_out_newest = 0   # the newest send time of a record left out (its readings' time, about)
        now_ms = int(time.time() * 1000)
        for record in records:
            arrival = arrival_ms(record.timestamp, now_ms)
            if self.format == "rfid":
                if is_sensor_batch(record.headers):
                    # mote samples share the raw topic; they are not rfid_stream readings
                    if ingest is not None:
                        ingest.add_samples(record, *decode_sample_rows(record.value, (), arrival, self.rules))
                        ingest.add_mote_reports(record, *decode_mote_reports(record.value, self.rules))
                    continue
                weight = triage.weight(record.offset, partition.end)
                if not weight:   # left out by Data Triage: named by the range's triage row
                    left_out_newest = max(left_out_newest, record.timestamp or 0)
                    continue
                cycles.append(RawCycle(record.value, record.offset, arrival, weight))
                cycle_bytes += len(record.value or b"")
                if cycle_bytes >= self.CYCLE_BYTES_PER_CHUNK:
                    yield from self._cycle_batches(cycles, partition.partition, recent, ingest)
                    cycles, cycle_bytes = [], 0
            elif is_sensor_batch(record.headers):   # samples
                rows.extend(decode_sample_rows(record.value, names[1:-1], arrival, self.rules, self.heartbeats)[0])
            if len(rows) >= self.ROWS_PER_ARROW_BATCH:
                yield _to_arrow(rows, schema)
                rows = []
        if cycles:
            yield from self._cycle_batches(cycles, partition.partition, recent, ingest)
        if triage.sampled_from is not None:   # a row naming the range sampled (no tag: no query reads it)
            named: list = [None] * len(RAW_RFID_COLUMNS)
            named[PARTITION], named[OFFSET] = partition.partition, triage.sampled_from
            # its time: the engine marks triaged every window from the batch's oldest row to here
            named[TS] = ms_to_datetime(left_out_newest) if left_out_newest else None
            yield from rows_table([tuple(named)], [0], partition.end).to_batches()
            if ingest is not None:
                ingest.triaged = triage.left_out
        if rows:
            yield _to_arrow(rows, schema)
        if recent is not None:
            recent.reached(partition.end)
        if ingest is not None:
            ingest.flush(self.bootstrap, self.ingest_node, self.mdr_url)

    def view_rows(self, partition: OffsetRange, records: Iterable) -> list[tuple]:
        """A range of a child's view topic as row tuples (the reader's columns): each record's rows,
        or its marker's row, or it refused (dead-lettered). The driver converts a small batch's
        ranges at once (read_here); `rows` a range's."""
        recent = recent_keys(self.bootstrap, partition.topic, partition.partition, partition.start, self.format)
        names, now_ms = self.schema.fieldNames(), int(time.time() * 1000)
        rows: list[tuple] = []
        refused: list[Refusal] = []
        for record in records:
            batch, problem = parse_row_batch(record.value)
            if batch is not None:
                # a batch its producer sent again (it crashed before recording it) is dropped
                earlier = recent.seen(batch.identity, record.offset) if batch.identity and recent else None
                problem = (f"{DUPLICATE_BATCH} {batch.batch_id} (chunk {batch.chunk}) of {batch.producer}/"
                           f"{batch.stream} (as at offset {earlier})" if earlier is not None
                           else self._batch_problem(batch, arrival_ms(record.timestamp, now_ms)))
            if problem:
                refused.append(Refusal(record.offset, problem, record.value or b""))
            elif batch.rows:
                rows.extend(project_rows(batch, names))
            elif self.markers and batch.watermark_ms:
                rows.append(marker_row(self.schema, batch.watermark_ms))
        if recent is not None:
            recent.reached(partition.end)
        if refused and self.rules.node:
            dead_letter_once(self.bootstrap, self.mdr_url, self.rules.node, partition.topic, partition.partition,
                             refused)
        return rows

    def _cycle_batches(self, cycles: list[RawCycle], partition: int, recent: RecentCycles | None,
                       ingest: IngestTally | None) -> Iterator[pa.RecordBatch]:
        """A chunk of read cycles decoded, and counted by the data listener."""
        valid_cycles: Counter[str] | None = Counter() if ingest is not None else None
        table = decode_cycles(cycles, partition, self.heartbeats, self.rules, recent, valid_cycles)
        if ingest is not None:
            ingest.add(table, valid_cycles)
        yield from table.to_batches(self.ROWS_PER_ARROW_BATCH)

    def _batch_problem(self, batch: DecodedBatch, arrival: int) -> str:
        """Why a RowBatch of a child's view cannot be read: rows that do not fit this reader's
        columns, or an event time (a row's, a marker's) its arrival makes untrustworthy."""
        if not batch.rows:
            if self.markers and batch.watermark_ms:
                return self.rules.time_problem(batch.watermark_ms, arrival, "marker watermark_ms") or ""
            return ""
        problem = rows_problem(batch.columns, batch.rows, self.columns)
        if problem is None and self.event_time in batch.columns:
            at = batch.columns.index(self.event_time)
            newest = max((r[at] for r in batch.rows if r[at] is not None), default=None)
            if newest is not None:
                problem = self.rules.time_problem(datetime_ms(newest), arrival, self.event_time)
        return problem or ""


class KafkaStreamReader(DataSourceStreamReader):
    # A partition's new records are split among at most `tasks` tasks (option, default 1: Spark's
    # cores), and into pieces of RECORDS_PER_TASK records or more: a task has a fixed cost, and a worker taking a
    # partition's next range first reads the one before it for its duplicate look-back (wire.intake,
    # 10 000 records: their keys only, ~2.5 µs a record against ~20 µs to decode a 10-reading one).
    RECORDS_PER_TASK = 5_000

    def __init__(self, schema: StructType, options: dict[str, str]) -> None:
        self.handoff_dir = options.get("handoff_dir", "")
        self.tagged = options.get("topic_column", "false") == "true"
        self.declared = schema       # with handoff: the handoff column, then the rows' own (then the topic)
        fields = schema.fields[1:] if self.handoff_dir else schema.fields
        self.schema = StructType(fields[:-1] if self.tagged else fields)   # the rows' own columns
        self.output = arrow_schema(StructType(fields))   # what a row read carries
        self.bootstrap = options["bootstrap"]
        self.topics = [t for t in options["topics"].split(",") if t]
        self.format = options.get("format", "rows")
        self.starting = options.get("startingoffsets", options.get("startingOffsets", "earliest"))
        self.decoder = RangeDecoder(self.schema, self.bootstrap, self.format, options)
        self.tasks = max(1, int(options.get("tasks", "1")))
        self.first = json.loads(self.starting) if self.starting.startswith("{") else {}
        self.topics_file = options.get("topics_file", "")
        self._topics_seen = b""   # the topics file as last read
        self.lanes: dict[str, frozenset[str]] = {}   # OFFSETS_ONLY: each lane's topics
        self.pace = PollPace(int(options.get("raw_every_ms", "0")))   # OFFSETS_ONLY: what each poll lets in
        self.watch = EndWatch(self.bootstrap)    # OFFSETS_ONLY: the ends of children's topics
        self._raw_ends: dict[str, int] = {}      # OFFSETS_ONLY: raw topics' ends at their last turn

    def _offsets(self, which: str) -> dict:
        consumer = clients.shared_consumer(self.bootstrap)
        tps = consumers.partitions_of(consumer, self.topics)
        if which == "earliest":
            return beginnings(self.bootstrap, [partition_key(tp.topic, tp.partition) for tp in tps])
        ends = consumers.end_offsets(consumer, tps)
        return {partition_key(tp.topic, tp.partition): int(off) for tp, off in ends.items()}

    def initialOffset(self) -> dict:
        if self.format == OFFSETS_ONLY:
            return {}   # its lanes start where their nodes saved (dsp.runtime.process_stream)
        if self.starting.startswith("{"):
            return json.loads(self.starting)
        return self._offsets("latest" if self.starting == "latest" else "earliest")

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        """Each partition's end now. A partition `start` lacks (a topic added) ends where it starts
        this once: a batch then never reads a range it was not told the start of, so the driver
        reading a batch from the offset log (read_here) splits it as the tasks would. A stream of
        lanes (OFFSETS_ONLY): each lane's partitions' ends."""
        self._follow_topics()
        if self.format == OFFSETS_ONLY:
            time.sleep(self.pace.wait_ms(int(time.time() * 1000)) / 1000)
            now = int(time.time() * 1000)
            raw_due = self.pace.raw_due(now)
            return self.pace.ends(self._lane_ends(raw_due), start, now, raw_due)
        ends = self._offsets("latest")
        new = [key for key in ends if key not in start]
        begins = self._offsets("earliest") if any(key not in self.first for key in new) else {}
        return {key: end if key in start else self.first.get(key, begins.get(key, 0)) for key, end in ends.items()}

    def _lane_ends(self, raw_due: bool) -> dict:
        """Every lane's partitions' ends now: children's topics' followed by reading them
        (wire.kafka.end_watch: a parent's cost does not grow with its children's partitions), raw topics'
        asked of the broker on their turn only (dsp.poll_pace holds them between turns) or when new."""
        raw = [t for t in self.topics if t.startswith(RAW_TOPICS)]
        known = {split_partition_key(key)[0] for key in self._raw_ends}
        asked = raw if raw_due else [t for t in raw if t not in known]
        consumer = clients.shared_consumer(self.bootstrap)
        found = consumers.end_offsets(consumer, consumers.partitions_of(consumer, asked)) if asked else {}
        self._raw_ends = {key: end for key, end in self._raw_ends.items() if split_partition_key(key)[0] in raw}
        self._raw_ends.update({partition_key(tp.topic, tp.partition): int(end) for tp, end in found.items()})
        others = [t for t in self.topics if not t.startswith(RAW_TOPICS)]
        ends = {partition_key(tp.topic, tp.partition): end
                for tp, end in self.watch.ends(consumers.partitions_of(consumer, others)).items()}
        ends.update(self._raw_ends)
        return {lane_offset_key(lane, key): end for lane, topics in self.lanes.items()
                for key, end in ends.items() if split_partition_key(key)[0] in topics}

    def _follow_topics(self) -> None:
        """The topics (and new ones' starts) as `topics_file` says now. Read whole at every poll
        (a few hundred bytes): two changes within a file time stamp's tick look alike to a stat."""
        if not self.topics_file:
            return
        try:
            with open(self.topics_file, "rb") as fh:
                text = fh.read()
            if text == self._topics_seen:
                return
            now = json.loads(text)
        except (OSError, ValueError):
            return   # not written yet: the topics as they were
        if self.format == OFFSETS_ONLY:
            self.lanes = {lane: frozenset(topics) for lane, topics in now["lanes"].items()}
            self.topics = sorted(set().union(*self.lanes.values()))
        else:
            self.topics, self.first = list(now["topics"]), dict(now.get("starts", {}))
        self._topics_seen = text

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        """Each partition's new offsets, in up to `tasks` ranges, split the same way each time (a
        replayed batch is counted once by its ranges' bounds): Spark reads them in parallel even
        when one Kafka partition holds the batch (few receptors, a backlog)."""
        ranges: list[InputPartition] = []
        if self.format == OFFSETS_ONLY:
            return ranges   # its batches say offsets; the nodes read them (dsp.runtime.shared)
        for key, stop in end.items():
            first = start.get(key, stop)   # new to the reader: nothing yet (latestOffset)
            if stop > first:
                topic, partition = split_partition_key(key)
                pieces = min(self.tasks, -(-(stop - first) // self.RECORDS_PER_TASK))
                bounds = [first + (stop - first) * i // pieces for i in range(pieces + 1)]
                ranges.extend(OffsetRange(topic, partition, lo, hi) for lo, hi in zip(bounds, bounds[1:], strict=False))
        return ranges

    def ranges_here(self, start: dict, end: dict) -> list[OffsetRange] | None:
        """The ranges `read_here` reads of the records from `start` to `end`; None: too many for it."""
        ranges = self.partitions(start, end)
        return None if sum(r.end - r.start for r in ranges) > self.RECORDS_PER_TASK else ranges

    def read_here(self, start: dict, end: dict, fetched: dict | None = None, owner: str = "") -> pa.Table | None:
        """The records from `start` to `end` read in this process when they are one task's worth
        (RECORDS_PER_TASK or fewer), None otherwise: Spark's tasks read more, in parallel. A
        hierarchy's steady micro-batches are small, and a Spark job for one costs ~0.3-0.4 s of
        latency and ~0.1 s of the JVM's CPU beside its ~0.05 s of reading (measured on the 2-core
        machine: five nodes' readers at 1.9 cores, `toArrow` of a 5-row batch 370-500 ms).
        `fetched`: each range's records by OffsetRange.key, those another form of the same topics
        fetched for this batch (a raw topic's readings and samples); what this read fetches is added.
        `owner`: who reads (a node's lane), whose consumer fetches (wire.kafka.ranges)."""
        ranges = self.ranges_here(start, end)
        if ranges is None:
            return None
        fetched = {} if fetched is None else fetched
        # one at a time: the driver's readers share this process's duplicate look-back (_recent),
        # its consumers and the switch of its garbage collector (read), as a Spark worker's tasks do in turn
        with _reading_here.holding([r.topic for r in ranges]):
            missing = [r for r in ranges if r.key not in fetched]
            if len(missing) > 1 and len({(r.topic, r.partition) for r in missing}) == len(missing):
                # several partitions in one fetch (one range each: a batch this small is not split)
                fetched.update(read_short_ranges(self.bootstrap, [(r.topic, r.partition, r.start, r.end)
                                                                              for r in missing], owner))
            else:
                fetched.update({r.key: list(read_range(self.bootstrap, r.topic, r.partition, r.start,
                                                                   r.end, owner=owner)) for r in missing})
            if self.format == "rows" and not self.handoff_dir:
                return self._views_here(ranges, fetched)
            return pa.Table.from_batches([b for r in ranges for b in self.read(r, fetched[r.key])], self.output)

    def _views_here(self, ranges: list[OffsetRange], fetched: dict) -> pa.Table:
        """Ranges of children's view topics as one table, converted at once: a range at a time cost
        a conversion and a topic column each (64 children's ranges: ~4.5 ms a batch of the driver's
        ~11, py-spy)."""
        rows: list[tuple] = []
        topics: list[str] = []
        with collector_off():
            for r in ranges:
                found = self.decoder.view_rows(r, fetched[r.key])
                rows += found
                topics += [r.topic] * len(found)
        table = pa.Table.from_batches([_to_arrow(rows, arrow_schema(self.schema))])
        return table.append_column(TOPIC_COLUMN, pa.array(topics, pa.string())) if self.tagged else table

    def commit(self, end: dict) -> None:
        # Progress lives in Spark's checkpoint; nothing to commit on the broker.
        return None

    def read(self, partition: OffsetRange, records: list | None = None) -> Iterator[pa.RecordBatch]:
        """The range's rows (with `handoff_dir`: one row naming the file that holds them).
        Python's cyclic garbage collector is off meanwhile: a range makes a few small objects per
        record and no cycles, and the collections their count set off took ~10 % of a reader's
        time (measured: 3.5 -> 1.0 µs a record in the loop over the fetched records). `records`:
        the range's, fetched already (read_here)."""
        with collector_off():
            yield from self._read(partition, records)

    def _read(self, partition: OffsetRange, records: list | None = None) -> Iterator[pa.RecordBatch]:
        if self.format == OFFSETS_ONLY:
            return
        if not self.handoff_dir:
            yield from self._tagged(partition, records)
            return
        os.makedirs(self.handoff_dir, exist_ok=True)
        path = os.path.join(self.handoff_dir, f"{uuid.uuid4().hex}.arrow")
        with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, self.output) as writer:
            for batch in self._tagged(partition):
                writer.write_batch(batch)
        yield pa.RecordBatch.from_arrays([pa.array([path]), *(pa.nulls(1, f.type) for f in self.output)],
                                         schema=arrow_schema(self.declared))

    def _tagged(self, partition: OffsetRange, records: list | None = None) -> Iterator[pa.RecordBatch]:
        """The range's rows, with the topic they came from when the reader tags them."""
        for batch in self.decoder.rows(partition, records):
            if self.tagged:
                batch = batch.append_column(TOPIC_COLUMN, pa.array([partition.topic] * batch.num_rows, pa.string()))
            yield batch


@contextlib.contextmanager
def collector_off() -> Iterator[None]:
    """Python's cyclic garbage collector off while records are decoded (KafkaStreamReader.read)."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


def _to_arrow(rows: list[tuple], schema: pa.Schema) -> pa.RecordBatch:
    # pyarrow converts the row tuples in C++: 40 ms per 100 k raw rows, against 167 ms for a
    # Python transpose (zip) then a column at a time, which was a third of a reader's CPU (py-spy).
    return pa.RecordBatch.from_struct_array(pa.array(rows, type=pa.struct(list(schema))))


class KafkaDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "hifi_kafka"

    def schema(self) -> str:
        fmt = self.options.get("format", "rows")
        if fmt == OFFSETS_ONLY:
            return f"{TOPIC_COLUMN} STRING"
        rows = RAW_RFID_DDL if fmt == "rfid" else self.options["schema"]
        if self.options.get("topic_column") == "true":
            rows = f"{rows}, {TOPIC_COLUMN} STRING"
        return f"{HANDOFF_COLUMN} STRING, {rows}" if self.options.get("handoff_dir") else rows

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return KafkaStreamReader(schema, dict(self.options))

    def reader(self, schema: StructType) -> DataSourceReader:
        return KafkaBatchReader(schema, dict(self.options))


class KafkaBatchReader(DataSourceReader):
    """The records from `startingOffsets` to `endingOffsets` read once, as a stream's micro-batch
    over those bounds would read them (one form of a node's one stream, dsp.runtime.shared)."""

    def __init__(self, schema: StructType, options: dict[str, str]) -> None:
        self.stream = KafkaStreamReader(schema, options)
        # Spark hands the options over with their names in lower case
        self.start, self.end = (json.loads(options.get(name.lower(), options.get(name, "{}")))
                                for name in ("startingOffsets", "endingOffsets"))

    def partitions(self) -> list[InputPartition]:
        return self.stream.partitions(self.start, self.end)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, OffsetRange)
        yield from self.stream.read(partition)


def local_reader(options: Mapping[str, str]) -> KafkaStreamReader:
    """The stream reader of a `hifi_kafka` source with these options, for this process (the
    driver's KafkaStreamReader.read_here): its rows returned, not handed over in files."""
    here = {key: value for key, value in options.items() if key != "handoff_dir"}
    return KafkaStreamReader(StructType.fromDDL(KafkaDataSource(here).schema()), here)
