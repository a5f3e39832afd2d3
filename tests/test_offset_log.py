"""dsp.spark.offset_log: a micro-batch's bounds from Spark's offset log, and nothing when it cannot tell."""

from dsp.spark.offset_log import batch_bounds, parse_offsets

METADATA = '{"batchWatermarkMs":0,"batchTimestampMs":1795679160764,"conf":{"spark.sql.shuffle.partitions":"1"}}'


def _entry(offsets: str, version: str = "v1") -> str:
    return f"{version}\n{METADATA}\n{offsets}"


def test_an_entry_of_one_source_gives_its_offsets():
    assert parse_offsets(_entry('{"hifi.raw.door1:0": 64, "hifi.raw.door1:1": 3}')) == {
        "hifi.raw.door1:0": 64, "hifi.raw.door1:1": 3}


def test_what_is_not_one_source_in_format_v1_is_unknown():
    for text in (_entry('{"t:0": 1}', version="v2"),        # a format this reader does not know
                 _entry('{"t:0": 1}') + '\n{"u:0": 2}',      # two sources
                 _entry("-"),                                # a source with no offset yet
                 _entry('{"t:0": "1"}'), _entry('{"t:0": 1.5}'), _entry('{"t:0": true}'),
                 _entry("[1, 2]"), _entry('{"t:0": 1'), "", "v1\n"):
        assert parse_offsets(text) is None, text


def test_a_batch_starts_where_the_one_before_it_ended(tmp_path):
    offsets = tmp_path / "offsets"
    offsets.mkdir()
    for batch_id, offset in ((0, 5), (1, 9), (2, 9)):
        (offsets / str(batch_id)).write_text(_entry(f'{{"t:0": {offset}}}'))
    assert batch_bounds(str(tmp_path), 1) == ({"t:0": 5}, {"t:0": 9})
    assert batch_bounds(str(tmp_path), 2) == ({"t:0": 9}, {"t:0": 9})
    assert batch_bounds(str(tmp_path), 0) is None     # the first batch starts where no log says
    assert batch_bounds(str(tmp_path), 3) is None     # not logged (yet)
    (offsets / "1").write_bytes(b"\xff\xfe")          # not text: unknown, not an error
    assert batch_bounds(str(tmp_path), 2) is None
