"""Event patterns (issue 19): the matcher's semantics on hand-made sequences (base.events), the
reference's search agreeing with it, and bad patterns refused with the position and the reason."""

from __future__ import annotations

import pytest

from base.events import PatternState, Step
from glue.analyzer import analyze
from glue.sql.lexer import SqlError
from tests.catalogs import supply_chain_catalog

CATALOG = supply_chain_catalog()


def run(steps: list[Step], within_ms: int, rows: list[tuple[int, str]], bound_ms: int = 10**9) -> list[tuple]:
    """Feed (time, label) rows, a row meeting the step named by its label; the matches as
    ((name, time) per step, end)."""
    state = PatternState(steps, within_ms)
    names = {n for s in steps for n in s.names}
    found = []
    for ts, label in rows:
        found += state.feed(ts, {n: n == label for n in names}, {"t": ts, "label": label})
    found += state.close(bound_ms)
    return [(tuple(sorted((name, row["t"]) for name, row in f.rows.items())), f.end_ms) for f in found]


def test_a_sequence_takes_the_first_later_row_of_each_step_and_resumes_after_its_match():
    seq = [Step(("a",)), Step(("b",))]
    assert run(seq, 0, [(1, "a"), (2, "x"), (3, "a"), (4, "b"), (5, "b"), (6, "a"), (7, "b")]) == [
        ((("a", 1), ("b", 4)), 4), ((("a", 6), ("b", 7)), 7)]


def test_within_bounds_every_step_from_the_first():
    seq = [Step(("a",)), Step(("b",))]
    assert run(seq, 3, [(1, "a"), (5, "b")]) == []
    assert run(seq, 3, [(1, "a"), (3, "a"), (5, "b")]) == [((("a", 3), ("b", 5)), 5)]
    assert run(seq, 3, [(1, "a"), (4, "b")]) == [((("a", 1), ("b", 4)), 4)], "the bound is inclusive"


def test_a_negated_step_between_ends_the_candidates_it_falls_between():
    seq = [Step(("a",)), Step(("x",), True), Step(("c",))]
    assert run(seq, 10, [(1, "a"), (2, "x"), (3, "c")]) == []
    assert run(seq, 10, [(1, "a"), (2, "x"), (3, "a"), (4, "c")]) == [((("a", 3), ("c", 4)), 4)]


def test_a_negated_last_step_matches_only_once_its_bound_has_passed_and_once():
    seq = [Step(("a",)), Step(("x",), True)]
    assert run(seq, 5, [(1, "a"), (2, "a"), (4, "a")], bound_ms=6) == [], "not before the bound passes 1 + 5"
    assert run(seq, 5, [(1, "a"), (2, "a"), (4, "a")], bound_ms=7) == [((("a", 1),), 6)]
    assert run(seq, 5, [(1, "a"), (3, "x"), (4, "a")], bound_ms=20) == [((("a", 4),), 9)]
    assert run(seq, 5, [(1, "a"), (6, "x")], bound_ms=20) == [], "a row at the bound itself is within it"
    # the next match begins after the last one's bound: the reads at 2 and 4 were within it
    assert run(seq, 5, [(1, "a"), (2, "a"), (4, "a"), (8, "a")], bound_ms=20) == [((("a", 1),), 6),
                                                                                   ((("a", 8),), 13)]


def test_and_takes_its_names_in_either_order():
    seq = [Step(("a",)), Step(("b", "c"))]
    assert run(seq, 10, [(1, "a"), (2, "c"), (3, "x"), (4, "b")]) == [((("a", 1), ("b", 4), ("c", 2)), 4)]
    assert run(seq, 10, [(1, "a"), (2, "b")]) == []


@pytest.mark.parametrize("sql, position, reason", [
    ("SELECT a.tag_id FROM rfid_stream PATTERN SEQ(NOT b, a) WITHIN '5 seconds' DEFINE a AS antenna = 1, "
     "b AS antenna = 2", (1, 46), "cannot begin with NOT b"),
    ("SELECT a.tag_id FROM rfid_stream PATTERN SEQ(a, NOT b) DEFINE a AS antenna = 1, b AS antenna = 2",
     (1, 34), "NOT needs WITHIN"),
    ("SELECT a.tag_id FROM rfid_stream PATTERN SEQ(a, x) WITHIN '5 seconds' DEFINE a AS antenna = 1",
     (1, 49), "unknown step 'x'"),
    ("SELECT a.tag_id FROM rfid_stream PATTERN SEQ(a) DEFINE a AS antenna = 1, z AS antenna = 2",
     (1, 74), "'z' is defined but not in the pattern"),
    ("SELECT b.tag_id FROM rfid_stream PATTERN SEQ(a, NOT b) WITHIN '5 seconds' DEFINE a AS antenna = 1, "
     "b AS antenna = 2", (1, 8), "'b' is negated"),
    ("SELECT a.tag_id, count(*) AS n FROM rfid_stream PATTERN SEQ(a) DEFINE a AS antenna = 1",
     (1, 49), "no window, aggregate"),
    ("SELECT a.tag_id FROM rfid_stream PATTERN SEQ(a) DEFINE a AS antenna", (1, 56), "a condition on one row"),
    ("SELECT a.nope FROM rfid_stream PATTERN SEQ(a) DEFINE a AS antenna = 1", (1, 8), "unknown column 'nope'"),
    ("SELECT a.tag_id FROM rfid_stream PATTERN SEQ(a, NOT b) WITHIN 'soon' DEFINE a AS antenna = 1, "
     "b AS antenna = 2", (1, 63), "cannot read duration"),
])
def test_bad_patterns_are_refused_with_the_position_and_the_reason(sql, position, reason):
    with pytest.raises(SqlError) as refused:
        analyze(sql, CATALOG)
    assert (refused.value.line, refused.value.column) == position and reason in refused.value.message


def test_a_pattern_over_a_view_the_principal_may_not_read_is_refused_at_the_view():
    from dataclasses import replace

    catalog = supply_chain_catalog()
    catalog.views = [replace(v, readers=("hq",)) if v.name == "smoothed_rfid_stream" else v for v in catalog.views]
    sql = ("SELECT a.tag_id AS tag_id FROM smoothed_rfid_stream PATTERN SEQ(a, b) WITHIN '10 seconds' "
           "PARTITION BY tag_id DEFINE a AS reads > 2, b AS reads = 1")
    assert analyze(sql, catalog, "hq").pattern is not None
    with pytest.raises(SqlError) as refused:
        analyze(sql, catalog, "store-7")
    assert (refused.value.line, refused.value.column) == (1, 32)   # the view's name
    assert "unknown stream or view 'smoothed_rfid_stream' (or a view not exported to 'store-7')" \
        in refused.value.message
