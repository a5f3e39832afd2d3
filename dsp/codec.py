"""Wire codecs: protobuf messages on Kafka <-> plain Python rows. Pure functions, no I/O.

Raw RFID read cycles are validated here; a record that fails carries the reason, which the
node's ingest dead-letters to `hifi.dead.<node>` (see dsp.manager).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from google.protobuf.message import DecodeError

from protos import hifi_pb2

# Timestamps further ahead of the node's clock than this are impossible readings.
MAX_FUTURE_SKEW_MS = 60_000

RAW_RFID_COLUMNS = ("receptor_id", "tag_id", "antenna", "read_strength", "ts", "cycle",
                    "partition", "offset", "error", "payload")
RAW_RFID_DDL = ("receptor_id STRING, tag_id STRING, antenna INT, read_strength DOUBLE, ts TIMESTAMP, "
                "cycle BIGINT, partition INT, offset BIGINT, error STRING, payload BINARY")


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


def encode_sensor_batch(node: str, tick: int, samples: Iterable[Sample]) -> tuple[bytes, bytes]:
    """Return (key, value) for the samples an edge node's motes took at one tick."""
    msg = hifi_pb2.SensorBatch()
    for sample in samples:
        msg.samples.add(receptor_id=sample.receptor_id, seq=sample.seq, timestamp_ms=sample.timestamp_ms,
                        values=sample.values)
    return f"{node}:samples:{tick}".encode(), msg.SerializeToString()


def decode_sensor_batch(value: bytes) -> list[Sample]:
    msg = hifi_pb2.SensorBatch()
    msg.ParseFromString(value)
    return [Sample(s.receptor_id, s.seq, s.timestamp_ms, dict(s.values)) for s in msg.samples]


def decode_sample_rows(value: bytes, quantities: Sequence[str]) -> list[tuple]:
    """Rows (receptor_id, *quantities, ts) of a SensorBatch record: one per sample, a quantity the
    sample lacks is None; an undecodable record gives none."""
    try:
        samples = decode_sensor_batch(value)
    except (DecodeError, ValueError):
        return []
    return [(s.receptor_id, *(s.values.get(q) for q in quantities), ms_to_datetime(s.timestamp_ms))
            for s in samples if s.receptor_id and s.timestamp_ms > 0]


def is_sensor_batch(headers: Iterable[tuple[str, bytes]] | None) -> bool:
    return any(name == RECORD_TYPE_HEADER and value == SENSOR_BATCH for name, value in headers or ())


def ms_to_datetime(ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000.0, tz=dt.UTC)


def datetime_ms(value: dt.datetime) -> int:
    """Epoch milliseconds of a timestamp; a naive one is UTC (Spark's session time zone)."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return round(value.timestamp() * 1000)


def cycle_problem(msg: hifi_pb2.RfidReadCycle, now_ms: int) -> str | None:
    """Why a decoded read cycle cannot be accepted, or None when it is sound."""
    if not msg.receptor_id:
        return "missing receptor_id"
    if msg.timestamp_ms <= 0:
        return "missing or non-positive timestamp_ms"
    if msg.timestamp_ms > now_ms + MAX_FUTURE_SKEW_MS:
        return f"timestamp_ms {msg.timestamp_ms} is {(msg.timestamp_ms - now_ms) // 1000} s in the future"
    for i, read in enumerate(msg.reads):
        if not read.tag_id:
            return f"read {i}: missing tag_id"
        if math.isnan(read.read_strength) or math.isinf(read.read_strength):
            return f"read {i}: read_strength is {read.read_strength}"
        if read.read_strength < 0:
            return f"read {i}: negative read_strength {read.read_strength}"
    return None


def decode_read_cycle(value: bytes, partition: int, offset: int, now_ms: int, heartbeat: bool = False) -> list[tuple]:
    """Rows (RAW_RFID_COLUMNS) for one Kafka record: one per tag read, or one error row; with
    `heartbeat`, also a row with no tag for every valid cycle (that the reader cycled then, read
    or not: adaptive smoothing steps an epoch once it knows the epoch is over)."""
    msg = hifi_pb2.RfidReadCycle()
    try:
        msg.ParseFromString(value)
    except (DecodeError, ValueError) as exc:
        return [(None, None, None, None, None, None, partition, offset, f"undecodable RfidReadCycle: {exc}",
                 value)]
    problem = cycle_problem(msg, now_ms)
    if problem is not None:
        return [(msg.receptor_id or None, None, None, None, None, msg.cycle, partition, offset, problem, value)]
    ts = ms_to_datetime(msg.timestamp_ms)
    rows = [(msg.receptor_id, r.tag_id, r.antenna, r.read_strength, ts, msg.cycle, partition, offset, None, None)
            for r in msg.reads]
    if heartbeat:
        rows.append((msg.receptor_id, None, None, None, ts, msg.cycle, partition, offset, None, None))
    return rows


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
                     batch_id: int, emitted_ms: int, watermark_ms: int = 0) -> bytes:
    """A RowBatch; with `watermark_ms` and no rows it is a progress marker."""
    msg = hifi_pb2.RowBatch(producer=producer, stream=stream, columns=list(columns), batch_id=batch_id,
                            emitted_ms=emitted_ms, watermark_ms=watermark_ms)
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


def decode_row_batch(value: bytes) -> DecodedBatch:
    msg = hifi_pb2.RowBatch()
    msg.ParseFromString(value)
    rows = [tuple(from_value(v) for v in row.values) for row in msg.rows]
    return DecodedBatch(msg.producer, msg.stream, list(msg.columns), rows, msg.batch_id, msg.emitted_ms,
                        msg.watermark_ms)


def project_rows(batch: DecodedBatch, wanted: Sequence[str]) -> list[tuple]:
    """The batch's rows reordered to `wanted` columns (missing columns are None)."""
    index = {name: i for i, name in enumerate(batch.columns)}
    picks = [index.get(name) for name in wanted]
    return [tuple(row[i] if i is not None else None for i in picks) for row in batch.rows]


def encode_dead_letter(node: str, topic: str, partition: int, offset: int, reason: str, payload: bytes) -> bytes:
    return hifi_pb2.DeadLetter(node=node, topic=topic, partition=partition, offset=offset, reason=reason,
                               payload=payload or b"").SerializeToString()


def decode_dead_letter(value: bytes) -> hifi_pb2.DeadLetter:
    msg = hifi_pb2.DeadLetter()
    msg.ParseFromString(value)
    return msg
