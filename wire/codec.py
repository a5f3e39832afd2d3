"""Wire codecs: protobuf messages on Kafka <-> plain Python rows. Pure functions, no I/O.

Raw RFID read cycles and sensor batches are validated here against wire.intake's rules; a
record that fails carries the reason, which the node's ingest dead-letters to `hifi.dead.<node>`
(see dsp.spark.kafka_source). Nothing here raises on a record's content: a reader must go on past it.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from google.protobuf.message import DecodeError

from protos import hifi_pb2
from wire import histogram
from wire.intake import DUPLICATE, NO_RULES, IntakeRules, RecentCycles

TOMBSTONE = "record has no value (a tombstone)"
BAD_VALUES = (DecodeError, ValueError, OverflowError, OSError, RecursionError)

RAW_RFID_COLUMNS = ("receptor_id", "tag_id", "antenna", "read_strength", "ts", "cycle",
                    "partition", "offset", "error", "payload")


@dataclass(frozen=True)
class TagObservation:
    tag_id: str
    antenna: int
    read_strength: float


def encode_read_cycle(receptor_id: str, cycle: int, timestamp_ms: int,
                      reads: Iterable[TagObservation]) -> tuple[bytes, bytes]:
    """Return (key, value) for one reader cycle; the key makes a retried publish recognisable."""
    msg = hifi_pb2.RfidReadCycle(receptor_id=receptor_id, cycle=cycle, timestamp_ms=timestamp_ms)
    for read in reads:
        msg.reads.add(tag_id=read.tag_id, antenna=read.antenna, read_strength=read.read_strength)
    return f"{receptor_id}:{cycle}".encode(), msg.SerializeToString()


# Raw topics carry read cycles and sensor sample batches side by side; this Kafka header tells a
# sample batch apart (read cycles carry none, so older producers stay valid).
RECORD_TYPE_HEADER = "hifi-type"
SENSOR_BATCH = b"sensor-batch"


@dataclass(frozen=True)
class Sample:
    receptor_id: str
    seq: int
    timestamp_ms: int
    values: dict[str, float]


Histograms = dict[tuple[str, str], list[int]]   # (receptor, quantity) -> wire.histogram counts


def encode_sensor_batch(node: str, tick: int, samples: Iterable[Sample], timestamp_ms: int = 0,
                        settings_version: int = 0, histograms: Histograms | None = None) -> tuple[bytes, bytes]:
    """Return (key, value) for the samples an edge node's motes sent at one tick (`timestamp_ms`,
    under the sensor proxy's settings `settings_version`), with their motes' `histograms` if given."""
    msg = hifi_pb2.SensorBatch(timestamp_ms=timestamp_ms, settings_version=settings_version)
    for sample in samples:
        msg.samples.add(receptor_id=sample.receptor_id, seq=sample.seq, timestamp_ms=sample.timestamp_ms,
                        values=sample.values)
    for (receptor_id, quantity), counts in sorted((histograms or {}).items()):
        msg.histograms.add(receptor_id=receptor_id, quantity=quantity, counts=counts)
    return f"{node}:samples:{tick}".encode(), msg.SerializeToString()


def decode_mote_reports(value: bytes | None, rules: IntakeRules = NO_RULES) -> tuple[Histograms, list[str], int]:
    """What a SensorBatch record reports besides its samples: its motes' histograms, why each other
    one was refused (an unknown receptor or quantity, counts not in the fixed buckets), and the
    sensor proxy's settings version its motes obeyed (0: none). An undecodable record is
    decode_sample_rows' to refuse."""
    try:
        msg = hifi_pb2.SensorBatch()
        msg.ParseFromString(value or b"")
    except BAD_VALUES:
        return {}, [], 0
    found: Histograms = {}
    problems = []
    for i, h in enumerate(msg.histograms):
        problem = (rules.receptor_problem(h.receptor_id) if h.receptor_id else "missing receptor_id") or \
            (f"unknown quantity {h.quantity!r}" if h.quantity not in histogram.RANGES else None) or \
            (f"{len(h.counts)} counts, not {histogram.BUCKETS + 2}" if len(h.counts) != histogram.BUCKETS + 2
             else None)
        if problem is None:
            found[(h.receptor_id, h.quantity)] = list(h.counts)
        else:
            problems.append(f"histogram {i}: {problem}")
    return found, problems, msg.settings_version


def parse_sensor_batch(value: bytes) -> tuple[list[Sample], int, int]:
    """(samples, the batch's time, its settings version) of a SensorBatch record."""
    msg = hifi_pb2.SensorBatch()
    msg.ParseFromString(value)
    return ([Sample(s.receptor_id, s.seq, s.timestamp_ms, dict(s.values)) for s in msg.samples], msg.timestamp_ms,
            msg.settings_version)


def decode_sensor_batch(value: bytes) -> list[Sample]:
    return parse_sensor_batch(value)[0]


def decode_sample_rows(value: bytes | None, quantities: Sequence[str], arrival_ms: int,
                       rules: IntakeRules = NO_RULES, clock: bool = False) -> tuple[list[tuple], list[str]]:
    """Rows (receptor_id, *quantities, ts) of a SensorBatch record, one per sample that passes (a
    quantity the sample lacks is None), and why each other sample, or the whole record, was refused.
    `clock`: first a row with no receptor at the batch's own time, when it has one the intake rules
    trust, so event time moves on while the motes hold their samples back (the sensor proxy)."""
    if value is None:
        return [], [TOMBSTONE]
    try:
        samples, batch_ms, _ = parse_sensor_batch(value)
    except BAD_VALUES as exc:
        return [], [f"undecodable SensorBatch: {exc}"]
    rows: list[tuple] = []
    problems: list[str] = []
    if clock and batch_ms and rules.time_problem(batch_ms, arrival_ms) is None:
        rows.append((None, *(None for _ in quantities), ms_to_datetime(batch_ms)))
    for i, s in enumerate(samples):
        problem = ("missing receptor_id" if not s.receptor_id else
                   rules.receptor_problem(s.receptor_id) or rules.time_problem(s.timestamp_ms, arrival_ms))
        if problem is None:
            problem = next((f"{q} is {v}" for q, v in s.values.items() if math.isnan(v) or math.isinf(v)), None)
        if problem is None:
            rows.append((s.receptor_id, *(s.values.get(q) for q in quantities), ms_to_datetime(s.timestamp_ms)))
        else:
            problems.append(f"sample {i}: {problem}")
    return rows, problems


def is_sensor_batch(headers: Iterable[tuple[str, bytes]] | None) -> bool:
    if not headers:   # a read cycle's usual case, per record on the hot path
        return False
    return any(name == RECORD_TYPE_HEADER and value == SENSOR_BATCH for name, value in headers)


def ms_to_datetime(ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000.0, tz=dt.UTC)


def datetime_ms(value: dt.datetime) -> int:
    """Epoch milliseconds of a timestamp; a naive one is UTC (Spark's session time zone)."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return round(value.timestamp() * 1000)


INT_MAX, LONG_MAX = 2**31 - 1, 2**63 - 1   # Spark's INT and BIGINT: antenna and cycle must fit


# What a read cycle says of itself, its readings aside: (receptor_id, cycle, timestamp_ms), read
# once from the parsed message (each field read makes a new Python object, and the reader's hot
# loop read each two or three times), and the key wire.intake.RecentCycles finds duplicates by. A
# plain tuple: a NamedTuple cost ~0.3 µs a record more to make.
CycleHead = tuple[str, int, int]


def cycle_head(msg: hifi_pb2.RfidReadCycle) -> CycleHead:
    return (msg.receptor_id, msg.cycle, msg.timestamp_ms)


def cycle_problem(head: CycleHead, arrival_ms: int, rules: IntakeRules = NO_RULES) -> str | None:
    """Why a decoded read cycle that arrived at `arrival_ms` cannot be accepted as a whole (its
    receptor, time or number), or None; its readings are reads_problem's."""
    receptor_id, number, timestamp_ms = head
    if not receptor_id:
        return "missing receptor_id"
    problem = rules.receptor_problem(receptor_id) or rules.time_problem(timestamp_ms, arrival_ms)
    if problem is not None:
        return problem
    if number > LONG_MAX:
        return f"cycle {number} is out of range (at most {LONG_MAX})"
    return None


def reads_problem(msg: hifi_pb2.RfidReadCycle) -> str | None:
    """Why one of a read cycle's readings cannot be accepted (the first), or None."""
    for i, read in enumerate(msg.reads):
        if not read.tag_id:
            return f"read {i}: missing tag_id"
        if math.isnan(read.read_strength) or math.isinf(read.read_strength):
            return f"read {i}: read_strength is {read.read_strength}"
        if read.read_strength < 0:
            return f"read {i}: negative read_strength {read.read_strength}"
        if read.antenna > INT_MAX:
            return f"read {i}: antenna {read.antenna} is out of range (at most {INT_MAX})"
    return None


def _error_row(receptor: str | None, cycle: int | None, partition: int, offset: int, reason: str,
               payload: bytes | None) -> tuple:
    return (receptor, None, None, None, None, cycle, partition, offset, reason, payload)


def parse_read_cycle(value: bytes | None, partition: int, offset: int,
                     msg: hifi_pb2.RfidReadCycle | None = None) -> tuple[hifi_pb2.RfidReadCycle | None, tuple | None]:
    """A raw record parsed (into `msg` if given), or its error row (a tombstone, undecodable bytes)."""
    if value is None:
        return None, _error_row(None, None, partition, offset, TOMBSTONE, None)
    msg = msg if msg is not None else hifi_pb2.RfidReadCycle()
    try:
        msg.ParseFromString(value)
    except BAD_VALUES as exc:
        return None, _error_row(None, None, partition, offset, f"undecodable RfidReadCycle: {exc}", value)
    return msg, None


def cycle_refusal(head: CycleHead, value: bytes, partition: int, offset: int, arrival_ms: int,
                  rules: IntakeRules = NO_RULES, recent: RecentCycles | None = None) -> tuple | None:
    """The error row of a parsed read cycle refused as a whole — a duplicate (`recent`: the
    partition's recent cycles, fed this record), or cycle_problem's — or None."""
    receptor_id, number, _ = head
    if recent is not None and receptor_id:
        earlier = recent.seen(head, offset)   # keyed by (receptor, cycle, time): see cycle_key
        if earlier is not None:
            return _error_row(receptor_id, number if number <= LONG_MAX else None, partition, offset,
                              f"{DUPLICATE} {number} of {receptor_id} (as at offset {earlier})", None)
    problem = cycle_problem(head, arrival_ms, rules)
    if problem is not None:   # the error row's cycle must fit Spark's BIGINT
        return _error_row(receptor_id or None, number if number <= LONG_MAX else None, partition, offset, problem,
                          value)
    return None


def reading_rows(msg: hifi_pb2.RfidReadCycle, value: bytes, partition: int, offset: int,
                 heartbeat: bool = False) -> list[tuple]:
    """The rows of a read cycle accepted as a whole: one per reading (and the heartbeat row), or
    its error row if a reading fails reads_problem."""
    problem = reads_problem(msg)
    if problem is not None:
        return [_error_row(msg.receptor_id, msg.cycle, partition, offset, problem, value)]
    ts = ms_to_datetime(msg.timestamp_ms)
    rows = [(msg.receptor_id, r.tag_id, r.antenna, r.read_strength, ts, msg.cycle, partition, offset, None, None)
            for r in msg.reads]
    if heartbeat:
        rows.append((msg.receptor_id, None, None, None, ts, msg.cycle, partition, offset, None, None))
    return rows


def decode_read_cycle(value: bytes | None, partition: int, offset: int, arrival_ms: int, heartbeat: bool = False,
                      rules: IntakeRules = NO_RULES, recent: RecentCycles | None = None) -> list[tuple]:
    """Rows (RAW_RFID_COLUMNS) for one Kafka record that arrived at `arrival_ms`: one per tag
    read, or one error row (a duplicate's reason starts with wire.intake.DUPLICATE); with
    `heartbeat`, also a row with no tag for every valid cycle (that the reader cycled then, read
    or not: adaptive smoothing steps an epoch once it knows the epoch is over). `recent`: the
    partition's recent cycles, fed this record (every record must pass through it, in order).
    A reader decodes many records at once with wire.cycle_columns, to the same rows."""
    msg, error = parse_read_cycle(value, partition, offset)
    if msg is None:
        return [error]
    refused = cycle_refusal(cycle_head(msg), value, partition, offset, arrival_ms, rules, recent)
    if refused is not None:
        return [refused]
    return reading_rows(msg, value, partition, offset, heartbeat)


def cycle_key(value: bytes | None) -> CycleHead | None:
    """(receptor, cycle, timestamp) of a raw record that parses as a read cycle with a receptor:
    what wire.intake.RecentCycles remembers of the records before a range being read. The time is
    part of it: an agent that restarts numbers its cycles from 0 again."""
    if value is None:
        return None
    msg = hifi_pb2.RfidReadCycle()
    try:
        msg.ParseFromString(value)
    except BAD_VALUES:
        return None
    return cycle_head(msg) if msg.receptor_id else None


# ---------------------------------------------------------------- view rows

def to_value(value: Any) -> hifi_pb2.Value:
    if value is None:
        return hifi_pb2.Value()
    if isinstance(value, bool):
        return hifi_pb2.Value(b=value)
    if isinstance(value, int):
        return hifi_pb2.Value(i=value)
    if isinstance(value, float):
        return hifi_pb2.Value(d=value)
    if isinstance(value, dt.datetime):
        return hifi_pb2.Value(ts_ms=datetime_ms(value))
    if isinstance(value, list | tuple):
        return hifi_pb2.Value(list=hifi_pb2.ValueList(items=[to_value(v) for v in value]))
    return hifi_pb2.Value(s=str(value))


def from_value(value: hifi_pb2.Value) -> Any:
    kind = value.WhichOneof("kind")
    if kind is None:
        return None
    if kind == "ts_ms":
        return ms_to_datetime(value.ts_ms)
    if kind == "list":
        return [from_value(v) for v in value.list.items]
    return getattr(value, kind)


def encode_row_batch(producer: str, stream: str, columns: Sequence[str], rows: Iterable[Sequence[Any]],
                     batch_id: int, emitted_ms: int, watermark_ms: int = 0, run: str = "", chunk: int = 0) -> bytes:
    """A RowBatch; with `watermark_ms` and no rows it is a progress marker. `run`, `chunk`: its
    identity with producer, stream and batch_id (see the proto)."""
    msg = hifi_pb2.RowBatch(producer=producer, stream=stream, columns=list(columns), batch_id=batch_id,
                            emitted_ms=emitted_ms, watermark_ms=watermark_ms, run=run, chunk=chunk)
    for row in rows:
        msg.rows.add(values=[to_value(v) for v in row])
    return msg.SerializeToString()


@dataclass(frozen=True)
class DecodedBatch:
    producer: str
    stream: str
    columns: list[str]
    rows: list[tuple]
    batch_id: int
    emitted_ms: int
    watermark_ms: int = 0
    run: str = ""
    chunk: int = 0

    @property
    def identity(self) -> tuple[str, str, str, int, int] | None:
        """What makes a message of this batch the same as another (None: no identity given)."""
        return (self.producer, self.stream, self.run, self.batch_id, self.chunk) if self.run else None


def decode_row_batch(value: bytes) -> DecodedBatch:
    """A RowBatch; raises on a record that is not one (readers of other nodes' topics use
    parse_row_batch)."""
    msg = hifi_pb2.RowBatch()
    msg.ParseFromString(value)
    rows = [tuple(from_value(v) for v in row.values) for row in msg.rows]
    return DecodedBatch(msg.producer, msg.stream, list(msg.columns), rows, msg.batch_id, msg.emitted_ms,
                        msg.watermark_ms, msg.run, msg.chunk)


def batch_identity(value: bytes | None) -> tuple[str, str, str, int, int] | None:
    """A RowBatch record's identity without decoding its rows (None: not a RowBatch, or none
    given): what a reader remembers of the records before the range it reads."""
    msg = hifi_pb2.RowBatch()
    try:
        msg.ParseFromString(value or b"")
    except BAD_VALUES:
        return None
    return (msg.producer, msg.stream, msg.run, msg.batch_id, msg.chunk) if msg.run else None


def parse_row_batch(value: bytes | None) -> tuple[DecodedBatch | None, str]:
    """(the RowBatch, "") or (None, why it is not one): for every reader that must go on past a
    bad record on a topic another process writes."""
    if value is None:
        return None, TOMBSTONE
    try:
        batch = decode_row_batch(value)
    except BAD_VALUES as exc:
        return None, f"undecodable RowBatch: {exc}"
    ragged = next((n for n, row in enumerate(batch.rows) if len(row) != len(batch.columns)), None)
    if ragged is not None:
        return None, f"row {ragged} has {len(batch.rows[ragged])} values for {len(batch.columns)} columns"
    return batch, ""


SEEN_IDENTITIES = 100_000   # batches a follower remembers to drop a repeat of (a replay follows its original closely)


def readable_batches(records: Iterable[Any]) -> Iterator[tuple[Any, DecodedBatch]]:
    """(record, RowBatch) for each Kafka record that holds one, each batch once (a repeat of an
    identity already seen is dropped); the others are passed over (the nodes that read the topic
    dead-letter them): for tools that follow a topic."""
    seen: dict[tuple, None] = {}
    for record in records:
        batch, _ = parse_row_batch(record.value)
        if batch is None:
            continue
        identity = batch.identity
        if identity is not None:
            if identity in seen:
                continue
            seen[identity] = None
            if len(seen) > SEEN_IDENTITIES:
                del seen[next(iter(seen))]
        yield record, batch


def project_rows(batch: DecodedBatch, wanted: Sequence[str]) -> list[tuple]:
    """The batch's rows reordered to `wanted` columns (missing columns are None)."""
    index = {name: i for i, name in enumerate(batch.columns)}
    picks = [index.get(name) for name in wanted]
    return [tuple(row[i] if i is not None else None for i in picks) for row in batch.rows]


def encode_dead_letter(node: str, topic: str, partition: int, offset: int, reason: str, payload: bytes) -> bytes:
    return hifi_pb2.DeadLetter(node=node, topic=topic, partition=partition, offset=offset, reason=reason,
                               payload=payload or b"").SerializeToString()


def decode_dead_letter(value: bytes | None) -> hifi_pb2.DeadLetter | None:
    """A DeadLetter, or None for a record that is not one."""
    msg = hifi_pb2.DeadLetter()
    try:
        msg.ParseFromString(value or b"")
    except BAD_VALUES:
        return None
    return msg if value else None
