"""The shared runtime's plan evaluator (dsp.operators), pure: windows, late rows, markers, and the
default topology's standing CSAVA chain run bottom-up against the central reference."""

import datetime as dt

import pyarrow as pa

from base.plan import (
    RAW_RFID_SOURCE_COLUMNS,
    Aggregate,
    AggSpec,
    BinOp,
    Col,
    Filter,
    Lit,
    Source,
    Window,
)
from dsp.operators.build import build, rows_of, run_batches
from dsp.operators.build import view_batch as engine_view_batch
from dsp.operators.core import first_window_open
from dsp.operators.expressions import arrow_schema
from dsp.operators.source import SILENT_CHILD_GRACE_MS

RAW = Source(("raw",), "rfid", RAW_RFID_SOURCE_COLUMNS, "ts", 1000)


def _ts(ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC)


def raw_batch(reads: list[tuple[str, str, float, int]]) -> pa.Table:
    """Raw reader rows (receptor, tag, strength, ts ms) in the raw reader's shape."""
    rows = [{"receptor_id": r, "tag_id": t, "antenna": 1, "read_strength": s, "ts": _ts(ms), "error": None}
            for r, t, s, ms in reads]
    return pa.Table.from_pylist(rows, schema=arrow_schema([*RAW_RFID_SOURCE_COLUMNS, ("error", "string")]))


def view_batch(columns, rows: list[tuple] | None = None, marker_ms: int | None = None) -> pa.Table:
    table = pa.Table.from_pylist([dict(zip([n for n, _ in columns], r, strict=True)) for r in rows or []],
                                 schema=arrow_schema(columns))
    return engine_view_batch(columns, table, marker_ms)


def test_tumbling_count_with_having_emits_each_window_once_its_lateness_has_passed():
    plan = Aggregate(RAW, ("tag_id",), (AggSpec("reads", "count"),), BinOp(">=", Col("reads"), Lit(2)),
                     Window(2000, 2000))
    root = build(plan, {})
    first = root.push("raw", raw_batch([("r1", "a", 0.5, 100), ("r1", "a", 0.5, 900), ("r1", "b", 0.5, 1500)]))
    assert first.num_rows == 0 and root.bound() == 0              # newest 1500 - 1000 lateness: [0, 2000) open
    second = root.push("raw", raw_batch([("r1", "c", 0.5, 3100)]))  # bound 2100 closes [0, 2000)
    assert rows_of(second) == [(_ts(0), _ts(2000), "a", 2)]         # b read once: HAVING drops it
    assert root.push("other", raw_batch([("r1", "a", 0.5, 1)])) is None   # not its topic


def test_sliding_windows_count_a_row_in_every_window_containing_it_and_late_rows_are_dropped():
    plan = Aggregate(RAW, ("receptor_id",), (AggSpec("n", "count"), AggSpec("tags", "count_distinct", "tag_id"),
                                             AggSpec("top", "max", "read_strength")), None, Window(3000, 1000))
    root = build(plan, {})
    out = rows_of(root.push("raw", raw_batch([("r1", "a", 0.1, 2500), ("r1", "b", 0.9, 2600), ("r1", "a", 0.3, 9000)])))
    # bound 8000: windows [0,3000) [1000,4000) [2000,5000) hold the two early reads; later ones are open
    assert out == [(_ts(s), _ts(s + 3000), "r1", 2, 2, 0.9) for s in (0, 1000, 2000)]
    late = root.push("raw", raw_batch([("r1", "z", 0.5, 7000), ("r1", "a", 0.5, 8500)]))
    assert late.num_rows == 0 and root.late_rows() == 1
    assert first_window_open(8000, 3000, 1000) == 6000 and root.bound() == 6000


def test_a_parent_closes_a_window_when_the_slowest_child_promises_past_it():
    columns = (("window_start", "timestamp"), ("window_end", "timestamp"), ("tag_id", "string"), ("reads", "long"))
    child = Source(("c1", "c2"), "rows", columns, "window_start", 0, markers=True)
    plan = Aggregate(child, ("window_start", "window_end"), (AggSpec("reads", "sum", "reads"),))
    root = build(plan, {})
    root.push("c1", view_batch(columns, [(_ts(0), _ts(2000), "a", 3)]))
    root.push("c2", view_batch(columns, marker_ms=0))                           # c2 is not done with [0, 2000)
    assert root.push("c1", view_batch(columns, marker_ms=2000)).num_rows == 0   # c1 is
    root.push("c2", view_batch(columns, [(_ts(0), _ts(2000), "b", 4)]))
    done = root.push("c2", view_batch(columns, marker_ms=2000))
    assert rows_of(done) == [(_ts(0), _ts(2000), 7)] and root.bound() == 2000


def test_a_parent_waits_for_a_child_it_has_not_heard_from_until_the_grace_has_passed():
    columns = (("window_start", "timestamp"), ("window_end", "timestamp"), ("tag_id", "string"), ("reads", "long"))
    plan = Aggregate(Source(("c1", "c2"), "rows", columns, "window_start", 0, markers=True),
                     ("window_start", "window_end"), (AggSpec("reads", "sum", "reads"),))
    root = build(plan, {})
    root.push("c1", view_batch(columns, [(_ts(0), _ts(2000), "a", 3)], marker_ms=2000))
    assert root.bound() is None                       # c2 starts a little later: nothing closes yet
    both = root.push("c2", view_batch(columns, [(_ts(0), _ts(2000), "b", 4)], marker_ms=2000))
    assert rows_of(both) == [(_ts(0), _ts(2000), 7)]

    silent = build(plan, {})                          # c2 never speaks: c1 alone, after the grace
    silent.push("c1", view_batch(columns, [(_ts(0), _ts(2000), "a", 3)], marker_ms=2000))
    assert silent.push("c1", view_batch(columns, marker_ms=2000 + SILENT_CHILD_GRACE_MS - 2000)).num_rows == 0
    late = silent.push("c1", view_batch(columns, marker_ms=2000 + SILENT_CHILD_GRACE_MS))
    assert rows_of(late) == [(_ts(0), _ts(2000), 3)]


def test_argmax_takes_the_largest_by_and_breaks_ties_to_the_smallest_value():
    columns = (("window_start", "timestamp"), ("tag_id", "string"), ("receptor_id", "string"), ("reads", "long"))
    child = Source(("c",), "rows", columns, "window_start", 0, markers=True)
    plan = Aggregate(child, ("window_start", "tag_id"), (AggSpec("at", "argmax", "receptor_id", "reads"),))
    batches = [("c", view_batch(columns, [(_ts(0), "a", "r2", 3), (_ts(0), "a", "r3", 5), (_ts(0), "b", "r9", 2)])),
               ("c", view_batch(columns, [(_ts(0), "a", "r1", 5), (_ts(0), "b", "r8", 2)])),
               ("c", view_batch(columns, marker_ms=1))]
    assert sorted(run_batches(plan, batches)) == [(_ts(0), "a", "r1"), (_ts(0), "b", "r8")]


def test_filters_keep_only_rows_where_the_condition_is_true():
    plan = Filter(RAW, BinOp(">=", Col("read_strength"), Lit(0.5)))
    out = run_batches(plan, [("raw", raw_batch([("r", "a", 0.4, 1), ("r", "b", 0.5, 2)]))])
    assert [row[1] for row in out] == ["b"]


def test_distinct_sets_are_collected_and_partial_sets_united():
    columns = (("window_start", "timestamp"), ("tag_id", "string"))
    child = Source(("c",), "rows", columns, "window_start", 0, markers=True)
    sets = Aggregate(child, ("window_start",), (AggSpec("tags", "collect_set", "tag_id"),
                                                AggSpec("n", "count_distinct", "tag_id")))
    batches = [("c", view_batch(columns, [(_ts(0), "b"), (_ts(0), "a"), (_ts(0), None)])),
               ("c", view_batch(columns, [(_ts(0), "b"), (_ts(0), "c")])), ("c", view_batch(columns, marker_ms=1))]
    assert run_batches(sets, batches) == [(_ts(0), ["a", "b", "c"], 3)]
    partial = (("window_start", "timestamp"), ("tags", "array<string>"))
    merged = Aggregate(Source(("p",), "rows", partial, "window_start", 0, markers=True), ("window_start",),
                       (AggSpec("tags", "union_sets", "tags"),))
    batches = [("p", view_batch(partial, [(_ts(0), ["a", "b"]), (_ts(0), ["b", "c"])])),
               ("p", view_batch(partial, [(_ts(0), ["d"])])), ("p", view_batch(partial, marker_ms=1))]
    assert run_batches(merged, batches) == [(_ts(0), ["a", "b", "c", "d"])]
