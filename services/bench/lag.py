"""`hifi bench lag`: the lag each level of the hierarchy adds, with pane partials and progress
markers (HiFi's plan) against the naive plan that re-forms range/slide windows at every level
and waits a fixed slack for its children (DESIGN §7).

One hierarchy (default `deploy/topologies/deep.yaml`: door -> warehouse -> region) runs the
agents; for each slide and each plan, one query `count(*) per tag` over windows of range 2 x
slide runs alone for `--duration` seconds. For every window end e that every level reached, the
time a level first emitted rows ending at e (the last pane of the window, or the window itself)
is read from its output topic; a level's added lag is its time minus the level below's, and the
end-to-end lag is the root's time minus e. Medians over the windows are printed.
"""

from __future__ import annotations

import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from glue.topology import Topology
from wire.codec import readable_batches

DEPTH_ROLES = ("producer", "merge", "final")


@dataclass
class LagFigures:
    mode: str
    slide_s: float
    windows: int
    per_level_ms: dict[str, float]   # role -> median added lag (producer: from the window end)
    end_to_end_ms: float | None


def first_emits(records) -> dict[int, int]:
    """window_end (ms) -> the earliest emit time (ms) of a row ending there, over RowBatch records."""
    first: dict[int, int] = {}
    for _, batch in readable_batches(records):
        if "window_end" not in batch.columns:
            continue
        at = batch.columns.index("window_end")
        for row in batch.rows:
            end = int(row[at].timestamp() * 1000)
            first[end] = min(first.get(end, batch.emitted_ms), batch.emitted_ms)
    return first


def level_lags(by_role: dict[str, list[dict[int, int]]], since_ms: int) -> tuple[dict[str, float], float | None, int]:
    """Median added lag per level and end to end over window ends every level reached (pure)."""
    reached = {role: {end: max(t[end] for t in tasks) for end in set.intersection(*(set(t) for t in tasks))}
               for role, tasks in by_role.items() if tasks}
    roles = [r for r in DEPTH_ROLES if r in reached]
    ends = sorted(e for e in set.intersection(*(set(reached[r]) for r in roles)) if e > since_ms)
    per_level: dict[str, float] = {}
    below: dict[int, int] = {e: e for e in ends}
    for role in roles:
        per_level[role] = statistics.median(reached[role][e] - below[e] for e in ends) if ends else float("nan")
        below = reached[role]
    end_to_end = statistics.median(reached[roles[-1]][e] - e for e in ends) if ends else None
    return per_level, end_to_end, len(ends)


def run_lag_bench(topology: Topology, slides_s: list[float], duration_s: float,
                  progress: Callable[[str], None]) -> list[LagFigures]:
    from services.embedded import embedded_or_external
    from services.hierarchy import Hierarchy
    from wire.kafka import consumers

    results = []
    with embedded_or_external() as servers:
        hierarchy = Hierarchy(topology, servers.redis_url, servers.bootstrap)
        try:
            hierarchy.start(progress)
            hierarchy.start_agents()
            assert hierarchy.placement is not None
            for slide in slides_s:
                for mode in ("panes", "naive"):
                    sql = (f"SELECT tag_id, count(*) AS n FROM rfid_stream [range by '{2 * slide:g} seconds', "
                           f"slide by '{slide:g} seconds'] GROUP BY tag_id")
                    plan = hierarchy.placement.submit(sql, naive=mode == "naive")
                    since = plan.start_ms or 0  # the query answers windows from its start on
                    progress(f"{mode}, slide {slide:g} s: running {duration_s:.0f} s ({plan.placement.root} root)")
                    time.sleep(duration_s)
                    consumer = consumers.make_consumer(servers.bootstrap)
                    by_role: dict[str, list[dict[int, int]]] = defaultdict(list)
                    try:
                        for task in plan.tasks:
                            tps = consumers.partitions_of(consumer, [task.topic])
                            ends = consumers.end_offsets(consumer, tps)
                            records = [r for tp in tps for r in consumers.poll_range(consumer, tp, 0, ends[tp])]
                            by_role[task.role].append(first_emits(records))
                    finally:
                        consumer.close()
                    hierarchy.placement.cancel(plan.query_id)
                    per_level, end_to_end, windows = level_lags(by_role, since)
                    results.append(LagFigures(mode, slide, windows, per_level, end_to_end))
        finally:
            hierarchy.stop()
    return results


def table(figures: list[LagFigures]) -> str:
    lines = [f"{'plan':<6} {'slide':>6} {'windows':>8} {'door (from window end)':>24} {'warehouse adds':>15} "
             f"{'region adds':>12} {'end to end':>11}"]
    for f in figures:
        def ms(value: float | None) -> str:
            return "n/a" if value is None or value != value else f"{value / 1000:.1f} s"
        lines.append(f"{f.mode:<6} {f.slide_s:>5g}s {f.windows:>8} {ms(f.per_level_ms.get('producer')):>24} "
                     f"{ms(f.per_level_ms.get('merge')):>15} {ms(f.per_level_ms.get('final')):>12} "
                     f"{ms(f.end_to_end_ms):>11}")
    return "\n".join(lines)
