"""The tests' use of the judge (services.judge): wait for enough results, compare, and fail with
the rows that differ."""

from __future__ import annotations

import logging
import time
from collections import Counter

import pytest

from services.judge import LOOK_AHEAD_MS, as_ms, rows_in_span, same_rows, time_column, topic_rows
from services.paths import DEFAULT_TOPOLOGY
from tests import independent
from tests.conftest import wait_for

log = logging.getLogger(__name__)

WINDOWS_TO_COMPARE = 2
# The span compared ends at most this long after the query's start: a query checked late in a
# module (its windows accumulating since the module began) costs the judge no more than the first.
SPAN_CAP_MS = 60_000


def _span(hierarchy, plan) -> tuple[int, int] | None:
    """The span of event time to compare, once the results hold enough of it (a cheap poll: the
    reference is computed once, afterwards)."""
    start = max(hierarchy.agent.stats.started_ms, plan.start_ms or 0)
    rows = topic_rows(hierarchy.bootstrap, plan.result_topic)
    if plan.query.is_aggregate:
        starts = sorted({at for r in rows if start <= (at := as_ms(r["window_start"])) <= start + SPAN_CAP_MS})
        return (start, starts[-1]) if len(starts) >= WINDOWS_TO_COMPARE else None
    column = time_column(plan)
    times = [as_ms(r[column]) for r in rows if as_ms(r[column]) >= start]
    # rows of the last seconds may still be on their way, so they are left out; enough rows must
    # lie before them (a reader seeing many tags puts 20 rows in the last 3 s alone)
    high = min(max(times, default=0) - 3000, start + SPAN_CAP_MS)
    return (start, high) if sum(t <= high for t in times) >= 20 else None


def _compare(hierarchy, plan, span: tuple[int, int]) -> tuple[list, list]:
    got, want, early = rows_in_span(hierarchy, plan, span)
    assert not early, f"windows from before the query's start (they would be partial): {early[:3]}"
    return got, want


def _difference(got: list, want: list) -> tuple[Counter, Counter]:
    """(rows missing from the hierarchy's, rows not in the judge's), with their counts."""
    return Counter(want) - Counter(got), Counter(got) - Counter(want)


def _fail(plan, got: list, want: list, judge: str) -> None:
    missing, extra = _difference(got, want)
    pytest.fail(f"{plan.query.text}\nmissing from the hierarchy: {list(missing)[:5]}\n"
                f"not in {judge}: {list(extra)[:5]}")


def _log_difference(plan, got: list, want: list, waited_s: float) -> None:
    """What still differs at a re-check (shown with a failure's captured log: a late window
    differs from a wrong one by whether it came later)."""
    missing, extra = _difference(got, want)
    log.info("%s: after %.1f s, %d rows missing (%s), %d not in the reference (%s)", plan.query_id, waited_s,
             sum(missing.values()), list(missing)[:3], sum(extra.values()), list(extra)[:3])


def assert_equal_to_independent(hierarchy, plan, twin: str, span: tuple[int, int], got: list) -> None:
    """The hierarchy's rows in `span` against the independent judge's (tests/independent.py: `twin`,
    DuckDB SQL, over the same readings log; the hierarchy runs the default topology)."""
    logged = independent.read_log(hierarchy.readings_path, span[1] + LOOK_AHEAD_MS)
    parameters = {**independent.topology_parameters(DEFAULT_TOPOLOGY), "start": plan.start_ms or 0}
    rows = independent.evaluate(twin, logged, parameters)
    at = plan.columns.index(time_column(plan))
    want = [row for r in rows if span[0] <= (row := tuple(r[c] for c in plan.columns))[at] <= span[1]]
    if not same_rows(got, want):
        _fail(plan, got, want, "the independent judge (DuckDB)")


def assert_equal_to_reference(hierarchy, plan, timeout_s: float = 300, twin: str | None = None) -> int:
    """Wait for enough results, then compare; rows of a selection may arrive on one branch of the
    tree later than on another, so a difference is re-checked until `timeout_s` has passed. With
    `twin`, the same rows are then checked against the independent judge too."""
    began = time.monotonic()
    deadline = began + timeout_s
    span = wait_for(lambda: _span(hierarchy, plan), timeout_s, f"{plan.query_id} to produce results", interval_s=2)
    log.info("%s: span %s found after %.1f s", plan.query_id, span, time.monotonic() - began)
    while True:
        got, want = _compare(hierarchy, plan, span)
        if same_rows(got, want):
            break
        if time.monotonic() > deadline:
            _fail(plan, got, want, "the reference")
        _log_difference(plan, got, want, time.monotonic() - began)
        time.sleep(5)
    assert want, f"{plan.query.text}: the compared span holds no rows; the check would be empty"
    if twin is not None:
        assert_equal_to_independent(hierarchy, plan, twin, span, got)
    return len(want)
