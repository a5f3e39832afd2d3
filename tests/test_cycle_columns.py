"""wire.cycle_columns decodes a run of raw records to exactly the rows decode_read_cycle makes of
each, one by one: good cycles, every kind of bad one, defaults the encoding leaves out, encodings
that are not canonical, duplicates — in any mix and order."""

import datetime as dt
import math
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from protos import hifi_pb2
from wire.codec import RAW_RFID_COLUMNS, decode_read_cycle
from wire.cycle_columns import RawCycle, decode_cycles
from wire.intake import IntakeRules, RecentCycles

NOW = 1_800_000_000_000
RULES = IntakeRules(owners={"r1": "door", "r2": "door", "r9": "dock"}, node="door")

strengths = st.one_of(st.sampled_from([0.0, 0.5, 0.73, -0.1, math.nan, math.inf]), st.floats(0, 1))
antennas = st.one_of(st.sampled_from([0, 1, 2, 2**31 - 1, 2**31, 2**32 - 1]), st.integers(1, 8))
reading = st.fixed_dictionaries({"tag_id": st.sampled_from(["", "t1", "t2", "urn:epc:id:sgtin:0614141.812345.7"]),
                                 "antenna": antennas, "read_strength": strengths})


@st.composite
def raw_record(draw) -> bytes | None:
    kind = draw(st.sampled_from(["good"] * 6 + ["garbage", "tombstone", "twice", "unknown"]))
    if kind == "garbage":
        return draw(st.binary(max_size=12))
    if kind == "tombstone":
        return None
    msg = hifi_pb2.RfidReadCycle(
        receptor_id=draw(st.sampled_from(["r1", "r2", "", "r9", "ghost"])),
        cycle=draw(st.one_of(st.integers(0, 3), st.sampled_from([2**63 - 1, 2**63, 2**64 - 1]))),
        timestamp_ms=draw(st.sampled_from([NOW, NOW - 500, 0, NOW + 3_600_000])))
    for read in draw(st.lists(reading, max_size=4)):
        msg.reads.add(**read)
    value = msg.SerializeToString()
    if kind == "twice":      # a field again: legal protobuf (the last wins), not canonical
        value += hifi_pb2.RfidReadCycle(timestamp_ms=NOW - 100).SerializeToString()
    elif kind == "unknown":  # a field this version does not know
        value += b"\x48\x07"
    return value


def plain(row: tuple) -> tuple:
    """Comparable: a time as epoch microseconds (the time zone objects differ), nan as a string."""
    return tuple(round(v.timestamp() * 1e6) if isinstance(v, dt.datetime) else "nan" if v != v else v for v in row)


def one_by_one(values, weights, heartbeat: bool) -> list[tuple]:
    recent = RecentCycles(0)
    rows = []
    for offset, (value, weight) in enumerate(zip(values, weights, strict=True)):
        rows.extend((*row, weight, None)
                    for row in decode_read_cycle(value, 3, offset, NOW, heartbeat, RULES, recent))
    return rows


@settings(max_examples=300, deadline=None)
@given(st.lists(raw_record(), max_size=25), st.booleans(), st.data())
def test_a_run_decodes_to_the_rows_of_each_record_in_order(values, heartbeat, data):
    weights = [data.draw(st.sampled_from([1, 1, 7])) for _ in values]
    valid_cycles: Counter[str] = Counter()
    table = decode_cycles([RawCycle(v, o, NOW, w) for o, (v, w) in enumerate(zip(values, weights, strict=True))],
                          3, heartbeat, RULES, RecentCycles(0), valid_cycles)
    expected = one_by_one(values, weights, heartbeat)
    got = [tuple(row.values()) for row in table.to_pylist()]
    assert table.column_names == [*RAW_RFID_COLUMNS, "weight", "triaged_to"]
    assert len(got) == len(expected)
    assert [plain(r) for r in got] == [plain(r) for r in expected]
    # the valid cycles counted are those decode_read_cycle gives a heartbeat row, heartbeats asked or not
    beats = Counter(row[0] for row in one_by_one(values, weights, True) if row[1] is None and row[8] is None)
    assert valid_cycles == beats


def test_a_long_run_of_good_cycles_is_read_column_wise_and_a_bad_one_in_it_refused_alone():
    values = []
    for cycle in range(2000):
        msg = hifi_pb2.RfidReadCycle(receptor_id="r1", cycle=cycle, timestamp_ms=NOW)
        for i in range(10):
            msg.reads.add(tag_id=f"t{i}", antenna=1 + i % 2, read_strength=0.5 if (cycle, i) != (1234, 3) else -1.0)
        values.append(msg.SerializeToString())
    table = decode_cycles([RawCycle(v, o, NOW) for o, v in enumerate(values)], 0, False, RULES, RecentCycles(0))
    errors = [e for e in table.column("error").to_pylist() if e is not None]
    assert errors == ["read 3: negative read_strength -1.0"]
    assert table.num_rows == 1999 * 10 + 1
    assert table.column("offset").to_pylist() == sorted(table.column("offset").to_pylist())
