"""Raw read cycles decoded many at a time into Arrow: the raw reader's hot path. Pure, no I/O.

wire.codec.decode_read_cycle builds a Python tuple per reading and checks each reading in Python;
with pyarrow converting the tuples, a 10-reading record cost ~38 µs (measured on the 2-core machine:
50 k records in 0.70 s to tuples, ~1.4 s to Arrow; the whole reader took 138 k readings/s in one
process). Here each record is parsed once as an RfidReadCycle for what is per cycle (its receptor,
time, number, duplicate check, count of readings), and a run of accepted records is parsed once
more, together, as a ReadCycleColumns (protos/hifi.proto): concatenated, their `reads` merge into
one message whose repeated fields hold every reading's tag, antenna and strength, turned into Arrow
columns in C and checked with pyarrow.compute. The same 50 k records: 0.29 s.

The columns line up with the readings only when every reading carries each of its three fields
exactly once: a record encoded canonically (its length is its ByteSize: no field twice, nothing
unknown) whose readings hold no default value (an empty tag, antenna 0 or strength 0.0 is left out
of the encoding). A run whose column lengths differ from its count of readings, or holding a
reading that fails its checks, is split in halves until the records at fault stand alone, and those
are decoded row by row (wire.codec.reading_rows): the same rows and refusals as decode_read_cycle,
in record order.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import pyarrow as pa

from protos import hifi_pb2
from wire.codec import (
    BAD_VALUES,
    INT_MAX,
    RAW_RFID_COLUMNS,
    cycle_head,
    cycle_refusal,
    parse_read_cycle,
    reading_rows,
)
from wire.intake import NO_RULES, IntakeRules, RecentCycles

# A raw reader's rows: the decoded columns (wire.codec.RAW_RFID_COLUMNS), then Data Triage's
# (dsp.triage): what a row weighs (1 exact, k sampled 1 in k, 0 the row naming the range sampled,
# from `offset` to `triaged_to`). In Arrow, and in Spark's DDL (the data source's schema).
RAW_RFID_SCHEMA = pa.schema([
    ("receptor_id", pa.string()), ("tag_id", pa.string()), ("antenna", pa.int32()), ("read_strength", pa.float64()),
    ("ts", pa.timestamp("us", tz="UTC")), ("cycle", pa.int64()), ("partition", pa.int32()), ("offset", pa.int64()),
    ("error", pa.string()), ("payload", pa.binary()), ("weight", pa.int32()), ("triaged_to", pa.int64()),
])
_SPARK_TYPES = {pa.string(): "STRING", pa.int32(): "INT", pa.int64(): "BIGINT", pa.float64(): "DOUBLE",
                pa.binary(): "BINARY", pa.timestamp("us", tz="UTC"): "TIMESTAMP"}
RAW_RFID_DDL = ", ".join(f"{f.name} {_SPARK_TYPES[f.type]}" for f in RAW_RFID_SCHEMA)
_DECODED = pa.struct(list(RAW_RFID_SCHEMA)[:len(RAW_RFID_COLUMNS)])
ERROR = RAW_RFID_COLUMNS.index("error")


class RawCycle(NamedTuple):   # (a NamedTuple: a frozen dataclass costs ~1 µs a record to make)
    """A raw record to decode: its bytes, where it stands, when it arrived, what it weighs
    (Data Triage's weight, 1 when exact)."""

    value: bytes | None
    offset: int
    arrival_ms: int
    weight: int = 1


class _Accepted(NamedTuple):
    """A read cycle accepted as a whole, its readings not checked yet."""

    value: bytes
    offset: int
    weight: int
    receptor_id: str
    cycle: int
    timestamp_ms: int
    reads: int


def decode_cycles(records: Sequence[RawCycle], partition: int, heartbeat: bool = False,
                  rules: IntakeRules = NO_RULES, recent: RecentCycles | None = None,
                  valid_cycles: Counter[str] | None = None) -> pa.Table:
    """The rows (RAW_RFID_SCHEMA, `triaged_to` null) decode_read_cycle makes of each record, in
    order. `recent` is fed every record, in order, as decode_read_cycle feeds it. `valid_cycles`:
    each valid read cycle's receptor counted there (what a heartbeat row stands for), so a reader
    counting cycles needs no heartbeat rows: making them, then filtering them out again, was a
    fifth of the data listener's time (measured: 5.0 against 2.65 µs a record for a run's columns)."""
    pieces: list[pa.Table] = []
    run: list[_Accepted] = []
    rows: list[tuple] = []
    weights: list[int] = []
    msg = hifi_pb2.RfidReadCycle()
    for value, offset, arrival_ms, weight in records:
        parsed, error = parse_read_cycle(value, partition, offset, msg)
        if parsed is not None:
            head = cycle_head(msg)
            error = cycle_refusal(head, value, partition, offset, arrival_ms, rules, recent)
            if error is None and msg.ByteSize() == len(value):
                if rows:
                    pieces.append(rows_table(rows, weights))
                    rows, weights = [], []
                run.append(_Accepted(value, offset, weight, *head, len(msg.reads)))
                continue
        if run:
            pieces.extend(_run_tables(run, partition, heartbeat, valid_cycles))
            run = []
        if error is None:
            found = reading_rows(msg, value, partition, offset, heartbeat)
            _count_valid(valid_cycles, head[0], found)
        else:
            found = [error]
        rows.extend(found)
        weights.extend([weight] * len(found))
    if run:
        pieces.extend(_run_tables(run, partition, heartbeat, valid_cycles))
    if rows:
        pieces.append(rows_table(rows, weights))
    return pa.concat_tables(pieces) if pieces else RAW_RFID_SCHEMA.empty_table()


def rows_table(rows: list[tuple], weights: list[int], triaged_to: int | None = None) -> pa.Table:
    """Row tuples (RAW_RFID_COLUMNS) with each row's weight; `triaged_to`: the last row names the
    range sampled, up to there."""
    decoded = pa.array(rows, type=_DECODED)   # in C++ (see dsp.spark.kafka_source._to_arrow)
    until: list[int | None] = [None] * len(rows)
    if triaged_to is not None:
        until[-1] = triaged_to
    return pa.Table.from_arrays([*decoded.flatten(), pa.array(weights, pa.int32()), pa.array(until, pa.int64())],
                                schema=RAW_RFID_SCHEMA)


def _count_valid(valid_cycles: Counter[str] | None, receptor_id: str, rows: list[tuple]) -> None:
    """Count a cycle accepted as a whole whose reading rows are `rows`: valid unless a reading
    was refused (then its one row is an error row)."""
    if valid_cycles is not None and not (rows and rows[0][ERROR] is not None):
        valid_cycles[receptor_id] += 1


def _run_tables(run: list[_Accepted], partition: int, heartbeat: bool,
                valid_cycles: Counter[str] | None) -> list[pa.Table]:
    """A run of accepted records as tables, split where columns and readings do not line up."""
    import pyarrow.compute as pc  # here: every Python worker imports wire; this costs ~40 ms

    columns = hifi_pb2.ReadCycleColumns()
    try:
        columns.ParseFromString(b"".join(a.value for a in run))
    except BAD_VALUES:   # each parsed alone; never seen together, but a reader must not stop
        columns = None
    reads = sum(a.reads for a in run)
    if columns is not None and len(columns.reads.tag_id) == len(columns.reads.antenna) == \
            len(columns.reads.read_strength) == reads:
        strength = pa.array(columns.reads.read_strength, pa.float64())
        antenna = pa.array(columns.reads.antenna, pa.uint32())
        bad = pc.any(pc.or_(pc.or_(pc.is_nan(strength), pc.is_inf(strength)), pc.less(strength, 0))).as_py() or \
            (reads and pc.max(antenna).as_py() > INT_MAX)
        if not bad:
            if valid_cycles is not None:
                valid_cycles.update(a.receptor_id for a in run)
            return [_columns_table(run, columns.reads.tag_id, antenna.cast(pa.int32()), strength, partition, heartbeat)]
    if len(run) > 1:
        half = len(run) // 2
        return (_run_tables(run[:half], partition, heartbeat, valid_cycles)
                + _run_tables(run[half:], partition, heartbeat, valid_cycles))
    (one,) = run
    msg = hifi_pb2.RfidReadCycle.FromString(one.value)
    found = reading_rows(msg, one.value, partition, one.offset, heartbeat)
    _count_valid(valid_cycles, one.receptor_id, found)
    return [rows_table(found, [one.weight] * len(found))]


def _columns_table(run: list[_Accepted], tags, antenna: pa.Array, strength: pa.Array, partition: int,
                   heartbeat: bool) -> pa.Table:
    """The rows of a run whose columns line up: each record's readings, then its heartbeat row."""
    per_record = np.fromiter((a.reads for a in run), np.int64, len(run))
    rows_per_record = per_record + 1 if heartbeat else per_record
    record_of_row = np.repeat(np.arange(len(run)), rows_per_record)
    n = len(record_of_row)
    if heartbeat:   # each record's last row is its heartbeat: no reading there
        beat = np.zeros(n, bool)
        beat[np.cumsum(rows_per_record) - 1] = True
        reading_of_row = np.zeros(n, np.int64)
        reading_of_row[~beat] = np.arange(n - len(run))
        take = pa.array(reading_of_row, mask=beat)
        tag_column = pa.array(tags, pa.string()).take(take)
        antenna, strength = antenna.take(take), strength.take(take)
    else:
        tag_column = pa.array(tags, pa.string())

    def per_row(values, kind: pa.DataType) -> pa.Array:
        return pa.array(np.fromiter(values, np.int64, len(run))[record_of_row], kind)

    ts = per_row((a.timestamp_ms * 1000 for a in run), pa.int64()).cast(pa.timestamp("us", tz="UTC"))
    return pa.Table.from_arrays([
        pa.array([a.receptor_id for a in run], pa.string()).take(pa.array(record_of_row)), tag_column, antenna,
        strength, ts, per_row((a.cycle for a in run), pa.int64()), pa.array(np.full(n, partition, np.int32)),
        per_row((a.offset for a in run), pa.int64()), pa.nulls(n, pa.string()), pa.nulls(n, pa.binary()),
        per_row((a.weight for a in run), pa.int32()), pa.nulls(n, pa.int64())], schema=RAW_RFID_SCHEMA)
