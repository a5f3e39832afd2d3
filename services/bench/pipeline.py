"""`hifi bench pipeline`: run a topology end to end and print its figures.

Figures: seconds from start (Spark included) to the first location count (the `location_counts`
view that ends the counting part of the CSAVA chain: at the region on the default topology); raw
readings per second the edge nodes consumed; p50/p95/max latency from a reading's timestamp to the
location count that includes it (its emit time for that window and location); accuracy of those
counts against ground truth; bytes per second into the edge tier (raw readings) and leaving each
tier (the views it exports to its parents, progress markers included).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from edge.agent import read_jsonl
from edge.truth import covered_windows, reading_latencies_ms, readings_per_node, true_location_counts
from glue.standing import crossing_topics, standing_views
from glue.topology import Topology
from services.bench.report import figures_table, percentile
from wire import bus
from wire.topics import raw_topic
from wire.windows import duration_ms


@dataclass
class PipelineFigures:
    seconds_to_first_result: float | None
    edge_readings_per_s: float
    readings_consumed: int
    latency_p50_ms: float | None
    latency_p95_ms: float | None
    latency_max_ms: float | None
    windows_scored: int
    windows_exact: int
    bytes_per_s: dict[str, float]   # "raw into edge" and "leaving <tier>" -> bytes per second
    archive: dict[str, tuple[float, float]] = field(default_factory=dict)   # tier -> (bytes/s, ms per batch)

    def table(self) -> str:
        def fmt(value: float | None, unit: str) -> str:
            return "n/a" if value is None else f"{value:,.1f} {unit}"

        rows = [
            ("time from start to first location count", fmt(self.seconds_to_first_result, "s")),
            ("raw readings consumed by edge nodes", f"{self.readings_consumed:,}"),
            ("edge input rate", fmt(self.edge_readings_per_s, "readings/s")),
            ("latency reading -> location count, p50", fmt(self.latency_p50_ms, "ms")),
            ("latency reading -> location count, p95", fmt(self.latency_p95_ms, "ms")),
            ("latency reading -> location count, max", fmt(self.latency_max_ms, "ms")),
            ("closed count windows exact vs truth", f"{self.windows_exact} of {self.windows_scored}"),
        ]
        raw = self.bytes_per_s.get("raw into edge", 0.0)
        for flow, rate in self.bytes_per_s.items():
            share = f" ({rate / raw:.1%} of raw)" if raw and flow != "raw into edge" else ""
            rows.append((f"bytes/s {flow}", f"{rate:,.0f}{share}"))
        for tier, (rate, ms) in self.archive.items():
            rows.append((f"archive bytes/s written at the {tier} tier", f"{rate:,.0f}, {ms:.2f} ms per batch"))
        return figures_table(rows)


def run_pipeline_bench(topology: Topology, duration_s: float, progress: Callable[[str], None],
                       trigger_ms: int = 1000) -> PipelineFigures:
    from services.embedded import embedded_or_external
    from services.hierarchy import Hierarchy, follow_results

    window_ms = duration_ms(topology.parameters.get("t1", "2 seconds"))
    started = time.monotonic()
    core_rows: list[dict] = []
    first_result: list[float] = []
    stop = threading.Event()

    def collect(topic: str, row: dict) -> None:
        if not first_result:
            first_result.append(time.monotonic() - started)
            progress(f"first location count after {first_result[0]:.1f} s")
        core_rows.append(row)

    with embedded_or_external() as servers:
        hierarchy = Hierarchy(topology, servers.redis_url, servers.bootstrap, trigger_ms=trigger_ms)
        try:
            hierarchy.start(progress)
            agent = hierarchy.start_agents()
            counts = hierarchy.view_topics("location_counts")
            follower = threading.Thread(target=follow_results, args=(servers.bootstrap, counts, stop, collect),
                                        daemon=True)
            follower.start()
            progress(f"running for {duration_s:.0f} s")
            time.sleep(duration_s)
            agent.stop()
            edge_nodes = topology.edge_nodes()
            consumed = sum(int(hierarchy.mdr.stats(n).get("rows_in", 0)) for n in edge_nodes)
            run_s = max((agent.stats.stopped_ms - agent.stats.started_ms) / 1000, 1e-9)
            truth = read_jsonl(hierarchy.readings_path)
            bytes_per_s = {flow: bus.topic_bytes(servers.bootstrap, topics) / run_s
                           for flow, topics in tier_topics(topology).items()}
            archive = archive_per_tier(topology, {n: hierarchy.mdr.stats(n) for n in topology.nodes}, run_s)
        finally:
            stop.set()
            hierarchy.stop()

    produced = sum(readings_per_node(truth).values())
    progress(f"agents produced {produced} readings; edge nodes consumed {consumed}")
    emitted = {(int(r["window_start"].timestamp() * 1000), r["location"]): r["_emitted_ms"] for r in core_rows}
    latencies = reading_latencies_ms(truth, emitted, window_ms)
    expected = true_location_counts(truth, window_ms)
    got = {(int(r["window_start"].timestamp() * 1000), r["location"]): r["tags"] for r in core_rows}
    emitted_windows = {w for w, _ in got}
    scored = [w for w in covered_windows(truth, window_ms, agent.scenario.cycle_ms) if w in emitted_windows]
    locations = {loc for _, loc in expected if loc != "away"}
    exact = sum(all(got.get((w, loc), 0) == expected.get((w, loc), 0) for loc in locations) for w in scored)
    return PipelineFigures(
        seconds_to_first_result=first_result[0] if first_result else None,
        edge_readings_per_s=consumed / run_s, readings_consumed=consumed,
        latency_p50_ms=percentile(latencies, 50), latency_p95_ms=percentile(latencies, 95),
        latency_max_ms=float(max(latencies)) if latencies else None,
        windows_scored=len(scored), windows_exact=exact, bytes_per_s=bytes_per_s, archive=archive)


def archive_per_tier(topology: Topology, stats: dict[str, dict[str, float]], run_s: float
                     ) -> dict[str, tuple[float, float]]:
    """Per tier: bytes/s its nodes archived (dsp.archive) and the mean time a batch's archiving took."""
    found = {}
    for tier in ("edge", "aggregation", "core"):
        nodes = [stats.get(n, {}) for n, spec in topology.nodes.items() if spec.tier == tier]
        batches = sum(s.get("archive_batches", 0.0) for s in nodes)
        if nodes:
            ms = sum(s.get("archive_ms_per_batch", 0.0) * s.get("archive_batches", 0.0) for s in nodes)
            found[tier] = (sum(s.get("archive_bytes", 0.0) for s in nodes) / run_s, ms / batches if batches else 0.0)
    return found


def tier_topics(topology: Topology) -> dict[str, list[str]]:
    """The topics of each flow between tiers: raw readings into the edges, and what each tier below
    the core sends its parents (the standing views' parts a node on another level reads)."""
    flows = {"raw into edge": [raw_topic(n) for n in topology.edge_nodes()]}
    crossing = crossing_topics(standing_views(topology))
    for tier in ("edge", "aggregation"):
        flows[f"leaving {tier}"] = sorted(t for t, node in crossing.items() if topology.nodes[node].tier == tier)
    return flows
