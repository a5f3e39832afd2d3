import math

from dsp.codec import (
    RAW_RFID_COLUMNS,
    TagObservation,
    decode_read_cycle,
    decode_row_batch,
    encode_read_cycle,
    encode_row_batch,
    project_rows,
)
from protos import hifi_pb2

NOW = 1_800_000_000_000
ERROR = RAW_RFID_COLUMNS.index("error")


def _cycle(**fields) -> bytes:
    reads = fields.pop("reads", [dict(tag_id="t1", antenna=1, read_strength=0.5)])
    msg = hifi_pb2.RfidReadCycle(**{"receptor_id": "r1", "cycle": 3, "timestamp_ms": NOW, **fields})
    for read in reads:
        msg.reads.add(**read)
    return msg.SerializeToString()


def test_read_cycle_round_trip_yields_one_row_per_read():
    key, value = encode_read_cycle("r1", 9, NOW, [TagObservation("a", 1, 0.5), TagObservation("b", 2, 0.7)])
    assert key == b"r1:9"
    rows = decode_read_cycle(value, 0, 42, NOW)
    assert [(r[0], r[1], r[2], r[3], r[5], r[7], r[ERROR]) for r in rows] == [
        ("r1", "a", 1, 0.5, 9, 42, None), ("r1", "b", 2, 0.7, 9, 42, None)]
    assert rows[0][4].timestamp() * 1000 == NOW


def test_a_heartbeat_row_marks_every_valid_cycle_read_or_not():
    _, empty = encode_read_cycle("r1", 10, NOW, [])
    assert decode_read_cycle(empty, 0, 43, NOW) == []
    (beat,) = decode_read_cycle(empty, 0, 43, NOW, heartbeat=True)
    assert (beat[0], beat[1], beat[3], beat[ERROR]) == ("r1", None, None, None) and beat[4].timestamp() * 1000 == NOW
    _, one = encode_read_cycle("r1", 11, NOW, [TagObservation("a", 1, 0.5)])
    assert [r[1] for r in decode_read_cycle(one, 0, 44, NOW, heartbeat=True)] == ["a", None]
    assert len(decode_read_cycle(b"\xff\xff", 0, 45, NOW, heartbeat=True)) == 1   # a bad record: its error row only


def test_each_kind_of_bad_record_is_rejected_with_its_reason():
    cases = {
        b"\xff\xff\xff not protobuf": "undecodable",
        _cycle(receptor_id=""): "missing receptor_id",
        _cycle(timestamp_ms=0): "non-positive timestamp",
        _cycle(timestamp_ms=NOW + 3_600_000): "in the future",
        _cycle(reads=[dict(tag_id="", read_strength=0.5)]): "missing tag_id",
        _cycle(reads=[dict(tag_id="t", read_strength=math.nan)]): "read_strength is nan",
        _cycle(reads=[dict(tag_id="t", read_strength=-0.1)]): "negative read_strength",
    }
    for payload, reason in cases.items():
        rows = decode_read_cycle(payload, 1, 7, NOW)
        assert len(rows) == 1
        assert reason in rows[0][ERROR], (reason, rows[0][ERROR])
        assert rows[0][-1] == payload


def test_row_batch_round_trip_and_projection():
    import datetime as dt

    ts = dt.datetime(2026, 1, 1, 12, 0, 2, tzinfo=dt.UTC)
    value = encode_row_batch("door1", "v", ["window_end", "tag", "n", "x", "none"], [(ts, "t1", 3, 0.5, None)], 7, 99)
    batch = decode_row_batch(value)
    assert (batch.producer, batch.stream, batch.batch_id, batch.emitted_ms) == ("door1", "v", 7, 99)
    assert batch.rows == [(ts, "t1", 3, 0.5, None)]
    assert project_rows(batch, ["n", "missing", "tag"]) == [(3, None, "t1")]
