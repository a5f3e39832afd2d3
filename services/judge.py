"""The judge of hierarchical answers: a query's results topic against the centralized reference
evaluator over the readings the agents really emitted, window by window and key by key (the
tests' judge and `hifi bench sharing` both use it)."""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass

from edge.agent import JsonlLog
from glue.analyzer import analyze
from glue.reference import Reference
from services.placement import load_catalog
from wire.codec import readable_batches
from wire.kafka import consumers


def topic_records(bootstrap: str, topic: str) -> list:
    """Every record currently in `topic` (all partitions), in offset order per partition."""
    from kafka import TopicPartition

    consumer = consumers.make_consumer(bootstrap)
    try:
        tps = consumers.partitions_of(consumer, [topic])
        ends = consumers.end_offsets(consumer, tps)
        records = []
        for tp in tps:
            records.extend(consumers.poll_range(consumer, TopicPartition(tp.topic, tp.partition), 0, ends[tp]))
        return records
    finally:
        consumer.close()


def topic_rows(bootstrap: str, topic: str) -> list[dict]:
    """The rows of every RowBatch in `topic`, as dicts (plus `_emitted_ms`), read as every reader
    reads them: a batch its producer sent again after a crash counts once."""
    rows = []
    for _, batch in readable_batches(topic_records(bootstrap, topic)):
        rows.extend({**dict(zip(batch.columns, r, strict=True)), "_emitted_ms": batch.emitted_ms} for r in batch.rows)
    return rows


def as_ms(value):
    return int(value.timestamp() * 1000) if isinstance(value, dt.datetime) else value


def same_rows(got: list[tuple], want: list[tuple]) -> bool:
    """Equal row multisets; doubles within 1e-9 relative (sums add up in another order)."""
    if len(got) != len(want):
        return False

    def key(row):
        return tuple(round(v, 3) if isinstance(v, float) else (v is None, v) for v in row)
    return all(len(g) == len(w) and all(math.isclose(a, b, rel_tol=1e-9) if isinstance(a, float) and
                                        isinstance(b, float) else a == b for a, b in zip(g, w, strict=True))
               for g, w in zip(sorted(got, key=key), sorted(want, key=key), strict=True))


def time_column(plan) -> str:
    """What places a row in time: its window's start, or a selection's `ts` (a selection of
    smoothed rows has their epoch's window_start instead)."""
    return "window_start" if plan.query.is_aggregate or "ts" not in plan.columns else "ts"


# How far past a result's time the readings it depends on reach: its window's range, a view's
# window beneath it, a pattern's bound — a minute covers every query the tests and benchmarks
# pose, so the reference reads no more of a long run's log than the compared span needs.
LOOK_AHEAD_MS = 60_000


_LOGS: dict[str, JsonlLog] = {}   # each run's readings, read on as they grow


def _log(path: str) -> JsonlLog:
    return _LOGS.setdefault(path, JsonlLog(path))


def rows_in_span(hierarchy, plan, span: tuple[int, int]) -> tuple[list, list, list]:
    """(hierarchy rows, reference rows) whose window start (or ts) lies in `span`, and the
    hierarchy's rows from before the query's start (there must be none: they would be partial)."""
    columns = plan.columns
    at = columns.index(time_column(plan))
    got = [tuple(as_ms(r[c]) for c in columns) for r in topic_rows(hierarchy.bootstrap, plan.result_topic)]
    catalog = load_catalog(hierarchy.mdr)
    logged = _log(hierarchy.readings_path).until(span[1] + LOOK_AHEAD_MS)
    reference = Reference.from_log(logged, catalog, plan.start_ms)
    want = [tuple(r[c] for c in columns) for r in reference.run(analyze(plan.query.text, catalog))]
    low, high = span
    early = [r for r in got if plan.start_ms is not None and r[at] < plan.start_ms]
    return [r for r in got if low <= r[at] <= high], [r for r in want if low <= r[at] <= high], early


@dataclass(frozen=True)
class Verdict:
    equal: bool
    windows: int


def compare_to_reference(hierarchy, plan) -> Verdict:
    """An aggregate query's windows from its start to the last one it emitted, against the reference."""
    start = max(hierarchy.agent.stats.started_ms, plan.start_ms or 0)
    rows = topic_rows(hierarchy.bootstrap, plan.result_topic)
    starts = sorted({as_ms(r["window_start"]) for r in rows if as_ms(r["window_start"]) >= start})
    if not starts:
        return Verdict(False, 0)
    got, want, early = rows_in_span(hierarchy, plan, (start, starts[-1]))
    return Verdict(same_rows(got, want) and not early and bool(want), len(starts))
