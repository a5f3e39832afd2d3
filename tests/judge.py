"""The judge of hierarchical answers: a query's results topic against the centralized reference
evaluator over the readings the agents really emitted, window by window and key by key."""

from __future__ import annotations

import datetime as dt
import math
import time
from collections import Counter

import pytest

from edge.agent import read_jsonl
from glue.analyzer import analyze
from glue.reference import Reference, rfid_readings
from services.placement import load_catalog
from tests.conftest import topic_rows, wait_for

WINDOWS_TO_COMPARE = 2


def _ms(value):
    return int(value.timestamp() * 1000) if isinstance(value, dt.datetime) else value


def _same_rows(got: list[tuple], want: list[tuple]) -> bool:
    """Equal row multisets; doubles within 1e-9 relative (sums add up in another order)."""
    if len(got) != len(want):
        return False
    def key(row):
        return tuple(round(v, 3) if isinstance(v, float) else (v is None, v) for v in row)
    return all(len(g) == len(w) and all(math.isclose(a, b, rel_tol=1e-9) if isinstance(a, float) and
                                        isinstance(b, float) else a == b for a, b in zip(g, w, strict=True))
               for g, w in zip(sorted(got, key=key), sorted(want, key=key), strict=True))


def _span(hierarchy, plan) -> tuple[int, int] | None:
    """The span of event time to compare, once the results hold enough of it (a cheap poll: the
    reference is computed once, afterwards)."""
    start = max(hierarchy.agent.stats.started_ms, plan.start_ms or 0)
    rows = topic_rows(hierarchy.bootstrap, plan.result_topic)
    if plan.query.is_aggregate:
        starts = sorted({_ms(r["window_start"]) for r in rows if _ms(r["window_start"]) >= start})
        return (start, starts[-1]) if len(starts) >= WINDOWS_TO_COMPARE else None
    column = _time_column(plan)
    times = [_ms(r[column]) for r in rows if _ms(r[column]) >= start]
    # rows of the last seconds may still be on their way, so they are left out; enough rows must
    # lie before them (a reader seeing many tags puts 20 rows in the last 3 s alone)
    high = max(times, default=0) - 3000
    return (start, high) if sum(t <= high for t in times) >= 20 else None


def _time_column(plan) -> str:
    """What places a row in time: its window's start, or a selection's `ts` (a selection of
    smoothed rows has their epoch's window_start instead)."""
    return "window_start" if plan.query.is_aggregate or "ts" not in plan.columns else "ts"


def _compare(hierarchy, plan, span: tuple[int, int]) -> tuple[list, list]:
    """(hierarchy rows, reference rows) whose window start (or ts) lies in `span`."""
    columns = plan.columns
    at = columns.index(_time_column(plan))
    got = [tuple(_ms(r[c]) for c in columns) for r in topic_rows(hierarchy.bootstrap, plan.result_topic)]
    catalog = load_catalog(hierarchy.mdr)
    reference = Reference(rfid_readings(read_jsonl(hierarchy.readings_path)), catalog, plan.start_ms)
    want = [tuple(r[c] for c in columns) for r in reference.run(analyze(plan.query.text, catalog))]
    low, high = span
    early = [r for r in got if plan.start_ms is not None and r[at] < plan.start_ms]
    assert not early, f"windows from before the query's start (they would be partial): {early[:3]}"
    return [r for r in got if low <= r[at] <= high], [r for r in want if low <= r[at] <= high]


def assert_equal_to_reference(hierarchy, plan, timeout_s: float = 300) -> int:
    """Wait for enough results, then compare; rows of a selection may arrive on one branch of the
    tree later than on another, so a difference is re-checked until `timeout_s` has passed."""
    deadline = time.monotonic() + timeout_s
    span = wait_for(lambda: _span(hierarchy, plan), timeout_s, f"{plan.query_id} to produce results", interval_s=2)
    while True:
        got, want = _compare(hierarchy, plan, span)
        if _same_rows(got, want):
            break
        if time.monotonic() > deadline:
            missing, extra = Counter(want) - Counter(got), Counter(got) - Counter(want)
            pytest.fail(f"{plan.query.text}\nmissing from the hierarchy: {list(missing)[:5]}\n"
                        f"not in the reference: {list(extra)[:5]}")
        time.sleep(5)
    assert want, f"{plan.query.text}: the compared span holds no rows; the check would be empty"
    return len(want)
