"""The node's archive (dsp.runtime.archive) on a real file system: batches back in the order taken,
from a time on, each once; hours past the retention deleted."""

import datetime as dt

import pyarrow as pa

from dsp.runtime.archive import Archive, hour_of

HOUR = 3_600_000
T0 = int(dt.datetime(2026, 11, 25, 10, tzinfo=dt.UTC).timestamp() * 1000)


def _table(*values: int) -> pa.Table:
    return pa.table({"n": pa.array(values, pa.int64())})


def test_batches_come_back_in_the_order_taken_across_readers_from_a_time_on_each_once(tmp_path):
    archive = Archive(str(tmp_path / "archive"))
    archive.append("reader:rfid:hifi.raw.door1", 0, _table(1, 2), T0)
    archive.append("reader:rows:hifi.view.x", 0, _table(3), T0 + 500)
    archive.append("reader:rfid:hifi.raw.door1", 1, _table(4), T0 + 1000)
    archive.append("reader:rfid:hifi.raw.door1", 1, _table(4), T0 + 1100)   # run again after a failure
    archive.append("reader:rfid:hifi.raw.door1", 2, _table(), T0 + 1500)    # empty: nothing kept
    archive.append("reader:rfid:hifi.raw.door1", 3, _table(5), T0 + HOUR)   # the next hour
    every = {"reader:rfid:hifi.raw.door1", "reader:rows:hifi.view.x"}

    def read() -> tuple[list, list, list]:
        return ([(key.split(":")[1], table["n"].to_pylist()) for key, table in archive.batches(T0, every)],
                [t["n"].to_pylist() for _, t in archive.batches(T0 + 600, every)],
                [t["n"].to_pylist() for _, t in archive.batches(T0, {"reader:rows:hifi.view.x"})])
    # the hour that passed is compacted (the next hour's first batch started it in the background too)
    archive.compact_closed(hour_of(T0 + HOUR))
    hour = tmp_path / "archive" / hour_of(T0)
    assert (hour / "compacted").exists() and not [p for p in hour.iterdir() if p.is_dir()]
    assert read() == ([("rfid", [1, 2]), ("rows", [3]), ("rfid", [4]), ("rfid", [5])], [[4], [5]], [[3]])
    assert archive.usage.batches == 5 and archive.usage.bytes > 0   # the batch run again was written twice
    assert archive.oldest_ms() == T0 and archive.hours() == [hour_of(T0), hour_of(T0 + HOUR)]
    assert archive.compact_closed(hour_of(T0 + HOUR)) == []   # once


def test_a_compacted_hour_reads_back_as_the_small_files_did(tmp_path):
    archive = Archive(str(tmp_path / "archive"))
    for batch in range(200):
        archive.append("reader:rfid:hifi.raw.door1", batch, _table(*range(batch % 7)), T0 + batch * 10)
        archive.append("reader:samples:hifi.raw.door1", batch, _table(batch), T0 + batch * 10 + 5)
    readers = {"reader:rfid:hifi.raw.door1", "reader:samples:hifi.raw.door1"}
    before = [(key, table.to_pylist()) for key, table in archive.batches(T0 + 500, readers)]
    archive.compact(hour_of(T0))
    assert [(key, table.to_pylist()) for key, table in archive.batches(T0 + 500, readers)] == before
    assert len(before) == 129 + 150   # from the 50th batch of each on (an empty one is never archived)


def test_hours_past_the_retention_are_deleted_as_a_new_hour_begins(tmp_path):
    archive = Archive(str(tmp_path / "archive"), retention_ms=2 * HOUR)
    for hour in range(4):
        archive.append("reader:rfid:hifi.raw.door1", hour, _table(hour), T0 + hour * HOUR)
    # at T0 + 3 h, hours wholly older than T0 + 1 h are gone: only T0's
    assert archive.hours() == [hour_of(T0 + h * HOUR) for h in (1, 2, 3)]
    assert [t["n"].to_pylist() for _, t in archive.batches(0, {"reader:rfid:hifi.raw.door1"})] == [[1], [2], [3]]
    assert archive.oldest_ms() == T0 + HOUR


def test_a_row_too_late_for_its_window_live_is_in_it_when_the_archive_is_replayed():
    """What the shared runtime does for a part over the past (dsp.runtime.history_feed.HistoryFeed.feed): the
    raw sources wait as long as the archive's latest row came late, then the plan's lateness."""
    from base.plan import RAW_RFID_SOURCE_COLUMNS, Aggregate, AggSpec, Source, Window
    from dsp.operators.build import build, lateness_seen, rows_of
    from dsp.operators.tree import raw_sources
    from tests.test_engine import raw_batch

    plan = Aggregate(Source(("raw",), "rfid", RAW_RFID_SOURCE_COLUMNS, "ts", 1000), ("receptor_id",),
                     (AggSpec("n", "count"),), None, Window(2000, 2000))
    batches = [raw_batch([("r1", "a", 0.5, T0 + 100), ("r1", "b", 0.5, T0 + 3500)]),
               raw_batch([("r1", "c", 0.5, T0 + 1500)]),          # 2 s behind the newest: late live
               raw_batch([("r1", "d", 0.5, T0 + 9000)])]
    live = build(plan, {})
    counts = [row[3] for b in batches for row in rows_of(live.push("raw", b))]
    assert counts[0] == 1 and live.late_rows() == 1

    assert lateness_seen(batches, "ts") == 2000
    past = build(plan, {})
    for source in raw_sources(past):
        source.history_lateness_ms = lateness_seen(batches, "ts") - source.plan.watermark_ms
    replayed = [row[3] for b in batches for row in rows_of(past.push("raw", b))]
    assert replayed[0] == 2 and past.late_rows() == 0


def test_a_batch_the_archive_cannot_take_is_counted_and_a_query_over_then_says_so(tmp_path):
    """A failed write is counted with the event times its batch spanned (the stream goes on), and
    a query over the past that reaches into them names the node and the span."""
    from types import SimpleNamespace

    from dsp.runtime.form_batches import FormBatches
    from dsp.runtime.inputs import Reader
    from services.placement import QueryPlacer

    archive = Archive(str(tmp_path))

    def full_disk(*_args, **_kwargs):
        raise OSError(28, "No space left on device")

    archive.append = full_disk   # type: ignore[method-assign]
    batches = FormBatches("door1", None, archive)   # type: ignore[arg-type] (archiving reads no part)
    ms = [1_700_000_010_000, 1_700_000_012_500]
    table = pa.table({"tag_id": ["a", "b"], "ts": pa.array(ms, pa.timestamp("ms", tz="UTC")).cast(
        pa.timestamp("us", tz="UTC"))})
    batches._archive(Reader(("hifi.raw.door1",), "rfid"), 7, table)
    usage = archive.usage
    assert (usage.failures, usage.failed_from_ms, usage.failed_to_ms) == (1, *ms)

    stats = {"door1": {"archive_failed_from_ms": float(ms[0]), "archive_failed_to_ms": float(ms[1])}, "door2": {}}
    placer = QueryPlacer.__new__(QueryPlacer)
    placer.mdr = SimpleNamespace(stats=lambda node: stats[node])
    plan = SimpleNamespace(tasks=[SimpleNamespace(node=n, reused=False) for n in ("door1", "door2")])
    assert placer._archive_gaps(plan, ms[0] - 60_000, None) == {"door1": tuple(ms)}
    assert placer._archive_gaps(plan, ms[1] + 1, None) == {}              # all of it after them
    assert placer._archive_gaps(plan, ms[0] - 60_000, ms[0]) == {}        # all of it before them
