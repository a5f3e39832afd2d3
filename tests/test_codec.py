import math

from protos import hifi_pb2
from wire.codec import (
    RAW_RFID_COLUMNS,
    TagObservation,
    batch_identity,
    decode_read_cycle,
    decode_row_batch,
    encode_read_cycle,
    encode_row_batch,
    project_rows,
    readable_batches,
)
from wire.intake import DUPLICATE, IntakeRules, RecentCycles

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
        _cycle(timestamp_ms=NOW + 3_600_000): "ahead of the record's arrival",
        _cycle(timestamp_ms=NOW - 3_600_000): "older than the record's arrival",
        None: "tombstone",
        _cycle(reads=[dict(tag_id="", read_strength=0.5)]): "missing tag_id",
        _cycle(reads=[dict(tag_id="t", read_strength=math.nan)]): "read_strength is nan",
        _cycle(reads=[dict(tag_id="t", read_strength=-0.1)]): "negative read_strength",
        # fields wider than Spark's columns: once an error converting the batch, which stopped the reader
        _cycle(reads=[dict(tag_id="t", antenna=2**31, read_strength=0.5)]): "antenna 2147483648 is out of range",
        _cycle(cycle=2**63): "cycle 9223372036854775808 is out of range",
    }
    for payload, reason in cases.items():
        rows = decode_read_cycle(payload, 1, 7, NOW)
        assert len(rows) == 1
        assert reason in rows[0][ERROR], (reason, rows[0][ERROR])
        assert rows[0][-1] == payload


def test_a_read_cycle_is_checked_against_the_registry_of_the_edge_that_reads_it():
    rules = IntakeRules("door1", {"r1": "door1", "r2": "door2"})
    assert decode_read_cycle(_cycle(), 0, 1, NOW, rules=rules)[0][ERROR] is None
    assert "not registered" in decode_read_cycle(_cycle(receptor_id="r9"), 0, 1, NOW, rules=rules)[0][ERROR]
    assert "belongs to edge node 'door2'" in decode_read_cycle(_cycle(receptor_id="r2"), 0, 1, NOW,
                                                                rules=rules)[0][ERROR]


def test_a_cycle_seen_again_within_the_lookback_is_a_duplicate_and_not_dead_lettered():
    recent = RecentCycles(10, lookback=3)
    first = decode_read_cycle(_cycle(), 0, 10, NOW, recent=recent)
    again = decode_read_cycle(_cycle(), 0, 11, NOW, recent=recent)
    assert first[0][ERROR] is None
    assert again[0][ERROR].startswith(DUPLICATE) and "offset 10" in again[0][ERROR] and again[0][-1] is None
    recent.reached(15)
    assert decode_read_cycle(_cycle(), 0, 15, NOW, recent=recent)[0][ERROR] is None   # 4 records on: new again


def test_sensor_batches_keep_their_sound_samples_and_name_each_refused_one():
    from wire.codec import Sample, decode_sample_rows, encode_sensor_batch

    rules = IntakeRules("door1", {"m1": "door1"})
    _, value = encode_sensor_batch("door1", 1, [Sample("m1", 1, NOW, {"temperature": 20.0}),
                                                Sample("m9", 1, NOW, {"temperature": 21.0}),
                                                Sample("m1", 2, NOW + 60_000, {"temperature": 22.0}),
                                                Sample("m1", 3, NOW, {"temperature": math.nan})])
    rows, problems = decode_sample_rows(value, ("temperature",), NOW, rules)
    assert [r[:2] for r in rows] == [("m1", 20.0)]
    assert [p.split(":")[0] for p in problems] == ["sample 1", "sample 2", "sample 3"]
    rows, (problem,) = decode_sample_rows(b"\xff\xff", ("temperature",), NOW, rules)
    assert rows == [] and problem.startswith("undecodable SensorBatch")
    assert decode_sample_rows(None, (), NOW)[1] == ["record has no value (a tombstone)"]


def test_a_record_that_is_not_a_well_formed_row_batch_is_refused_with_the_reason():
    from wire.codec import parse_row_batch

    assert parse_row_batch(None) == (None, "record has no value (a tombstone)")
    assert parse_row_batch(b"\x00\xff")[1].startswith("undecodable RowBatch")
    msg = hifi_pb2.RowBatch(columns=["a", "b"])
    msg.rows.add(values=[hifi_pb2.Value(i=1)])
    assert parse_row_batch(msg.SerializeToString())[1] == "row 0 has 1 values for 2 columns"
    batch, problem = parse_row_batch(encode_row_batch("p", "s", ["a"], [(1,)], 0, 0))
    assert problem == "" and batch.rows == [(1,)]


def test_row_batch_round_trip_and_projection():
    import datetime as dt

    ts = dt.datetime(2026, 1, 1, 12, 0, 2, tzinfo=dt.UTC)
    value = encode_row_batch("door1", "v", ["window_end", "tag", "n", "x", "none"], [(ts, "t1", 3, 0.5, None)], 7, 99)
    batch = decode_row_batch(value)
    assert (batch.producer, batch.stream, batch.batch_id, batch.emitted_ms) == ("door1", "v", 7, 99)
    assert batch.rows == [(ts, "t1", 3, 0.5, None)]
    assert project_rows(batch, ["n", "missing", "tag"]) == [(3, None, "t1")]


def test_a_batch_sent_again_is_read_once_and_a_new_run_is_new():
    from types import SimpleNamespace

    def record(batch_id: int, chunk: int = 0, run: str = "r1") -> SimpleNamespace:
        return SimpleNamespace(value=encode_row_batch("door1", "q", ["n"], [(batch_id,)], batch_id, 1, run=run,
                                                      chunk=chunk))

    # a producer that crashed after sending batches 2 and 3 (chunk 0) sends them again
    records = [record(1), record(2), record(3), record(2), record(3), record(3, chunk=1), record(4),
               record(1, run="r2"), record(1, run="")]
    read = [(b.run, b.batch_id, b.chunk) for _, b in readable_batches(records)]
    assert read == [("r1", 1, 0), ("r1", 2, 0), ("r1", 3, 0), ("r1", 3, 1), ("r1", 4, 0), ("r2", 1, 0), ("", 1, 0)]
    assert batch_identity(records[1].value) == ("door1", "q", "r1", 2, 0)
    assert batch_identity(records[-1].value) is None, "a batch without a run gives no identity"
    assert batch_identity(b"\xff\xff") is None


def test_a_batch_in_several_messages_is_cut_alike_whatever_order_its_rows_came_in():
    from dsp.spark.kafka_sink import ROWS_PER_MESSAGE, send_rows

    class Producer:
        def __init__(self) -> None:
            self.sent: list[bytes] = []

        def send(self, topic, key, value):
            self.sent.append(value)
            return None

    rows = [(f"tag{i}", i) for i in range(ROWS_PER_MESSAGE + 10)]
    first, again = Producer(), Producer()
    send_rows(first, "t", "door1", "q", ["tag", "n"], rows, 5, "r1")
    send_rows(again, "t", "door1", "q", ["tag", "n"], list(reversed(rows)), 5, "r1")
    chunks = [decode_row_batch(v) for v in first.sent]
    assert [(b.chunk, len(b.rows)) for b in chunks] == [(0, ROWS_PER_MESSAGE), (1, 10)]
    assert [decode_row_batch(v).rows for v in again.sent] == [b.rows for b in chunks]
