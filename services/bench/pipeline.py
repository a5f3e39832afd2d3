"""`hifi bench pipeline`: run a topology end to end and print its figures.

Figures: seconds from start (Spark included) to the first location count (the `location_counts`
view that ends the counting part of the CSAVA chain: at the region on the default topology); raw
readings per second the edge nodes consumed; **per level of the chain** (LEVELS: the doors'
smoothing, the warehouse's arbitration, the region's counts, headquarters' trends) p50/p95 latency
from a reading's timestamp to the first emit of that level's window holding it, p50/p95 from the
window's end to that emit, and the windows expected there that never came out (missing); accuracy
of the location counts against ground truth; bytes per second into the edge tier (raw readings)
and leaving each tier (the views it exports to its parents, progress markers included); the cores
the hierarchy used in its steady state (the run's last two thirds: every node and the agents —
this process tree — without the broker and Redis, and with them).

The agents run `duration` seconds and then TAIL_S more: windows that end by the first mark are
expected at every level, and have the tail to come out (a window closes when later readings move
event time past it, so the agents must not stop at the mark).
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from edge.agent import read_jsonl
from edge.level_latency import LevelLatency, level_latency, window_length_ms
from edge.truth import CountMiss, count_misses, covered_windows, read_cycles, readings_per_node, true_location_counts
from glue.standing import crossing_topics, standing_views
from glue.topology import Topology
from services.bench.report import figures_table, percentile
from wire.kafka import consumers
from wire.topics import raw_topic, view_topic
from wire.windows import duration_ms

# The CSAVA chain's windowed view at each level, bottom up (those the topology exports are measured)
LEVELS = ("smoothed_rfid_stream", "product_counts", "location_counts", "location_trends")
TAIL_S = 15.0


@dataclass
class PipelineFigures:
    seconds_to_first_result: float | None
    edge_readings_per_s: float
    readings_consumed: int
    levels: list[LevelLatency]
    windows_scored: int
    windows_exact: int
    bytes_per_s: dict[str, float]   # "raw into edge" and "leaving <tier>" -> bytes per second
    archive: dict[str, tuple[float, float]] = field(default_factory=dict)   # tier -> (bytes/s, ms per batch)
    cores: tuple[float, float] | None = None   # steady state: the hierarchy, and with the broker and Redis
    misses: list[CountMiss] = field(default_factory=list)   # the other windows' wrong counts, explained or not

    def explained(self) -> str:
        """How many of the inexact windows the readings can explain (every wrong count in them no larger
        than the tags that could cause it: CountMiss.explained), and by what."""
        windows = {m.window_start for m in self.misses}
        if not windows:
            return "none to explain"
        unexplained = {m.window_start for m in self.misses if not m.explained}
        reasons = {reason: sum(getattr(m, attr) > 0 for m in self.misses)
                   for reason, attr in (("in transit", "in_transit"), ("present, never read", "unread"),
                                         ("read from another location", "read_across"),
                                         ("just left", "just_left"))}
        by = ", ".join(f"{reason} {n}" for reason, n in reasons.items() if n)
        shown = "; ".join([f"{dt.datetime.fromtimestamp(m.window_start / 1000, dt.UTC):%H:%M:%S} {m.location} "
                           f"{m.said} for {m.true}" for m in self.misses if not m.explained][:3])
        return (f"{len(windows) - len(unexplained)} of {len(windows)} (wrong counts with tags {by or 'none'}; "
                f"unexplained windows {len(unexplained)}{': ' + shown if shown else ''})")

    def table(self) -> str:
        def fmt(value: float | None, unit: str) -> str:
            return "n/a" if value is None else f"{value:,.1f} {unit}"

        rows = [
            ("time from start to first location count", fmt(self.seconds_to_first_result, "s")),
            ("raw readings consumed by edge nodes", f"{self.readings_consumed:,}"),
            ("edge input rate", fmt(self.edge_readings_per_s, "readings/s")),
            *((f"latency reading -> {lv.level}, p50 / p95", f"{fmt(percentile(lv.reading_ms, 50), 'ms')} / "
               f"{fmt(percentile(lv.reading_ms, 95), 'ms')}; window end -> emit "
               f"{fmt(percentile(lv.close_ms, 50), 'ms')} / {fmt(percentile(lv.close_ms, 95), 'ms')}; "
               f"{lv.missing} of {lv.expected} windows missing") for lv in self.levels),
            ("closed count windows exact vs truth", f"{self.windows_exact} of {self.windows_scored}"),
            ("the others, that the receptors' data can explain", self.explained()),
        ]
        if self.cores is not None:
            rows.append(("cores in the steady state: nodes and agents / with the broker and Redis",
                         f"{self.cores[0]:.2f} / {self.cores[1]:.2f}"))
        raw = self.bytes_per_s.get("raw into edge", 0.0)
        for flow, rate in self.bytes_per_s.items():
            share = f" ({rate / raw:.1%} of raw)" if raw and flow != "raw into edge" else ""
            rows.append((f"bytes/s {flow}", f"{rate:,.0f}{share}"))
        for tier, (rate, ms) in self.archive.items():
            rows.append((f"archive bytes/s written at the {tier} tier", f"{rate:,.0f}, {ms:.2f} ms per batch"))
        return figures_table(rows)


def run_pipeline_bench(topology: Topology, duration_s: float, progress: Callable[[str], None],
                       trigger_ms: int = 1000) -> PipelineFigures:
    from services.bench.runtime import cores_with_servers
    from services.embedded import embedded_or_external
    from services.hierarchy import Hierarchy, follow_results

    window_ms = duration_ms(topology.parameters.get("t1", "2 seconds"))
    started = time.monotonic()
    core_rows: list[dict] = []
    first_result: list[float] = []
    stop = threading.Event()
    levels = level_views(topology)
    emits: dict[str, dict[tuple[str, int], tuple[int, int]]] = {view: {} for view in levels}
    topic_level = {view_topic(node, view): (view, node) for view, nodes in levels.items() for node in nodes}

    def collect(topic: str, row: dict) -> None:
        view, node = topic_level[topic]
        if row.get("window_start") is not None and row.get("window_end") is not None:
            key = (node, int(row["window_start"].timestamp() * 1000))
            emits[view].setdefault(key, (row["_emitted_ms"], int(row["window_end"].timestamp() * 1000)))
        if view != "location_counts":
            return
        if not first_result:
            first_result.append(time.monotonic() - started)
            progress(f"first location count after {first_result[0]:.1f} s")
        core_rows.append(row)

    with embedded_or_external() as servers:
        hierarchy = Hierarchy(topology, servers.redis_url, servers.bootstrap, trigger_ms=trigger_ms)
        try:
            hierarchy.start(progress)
            agent = hierarchy.start_agents()
            follower = threading.Thread(target=follow_results, args=(servers.bootstrap, list(topic_level), stop,
                                                                     collect), daemon=True)
            follower.start()
            progress(f"running for {duration_s:.0f} s, then {TAIL_S:.0f} s for the last windows to come out")
            time.sleep(duration_s / 3)   # Spark's first batches, the agents' first cycles
            cores = cores_with_servers(duration_s * 2 / 3, servers)
            horizon_ms = int(time.time() * 1000)
            time.sleep(TAIL_S)
            agent.stop()
            edge_nodes = topology.edge_nodes()
            consumed = sum(int(hierarchy.mdr.stats(n).get("rows_in", 0)) for n in edge_nodes)
            run_s = max((agent.stats.stopped_ms - agent.stats.started_ms) / 1000, 1e-9)
            truth = read_jsonl(hierarchy.readings_path)
            bytes_per_s = {flow: consumers.topic_bytes(servers.bootstrap, topics) / run_s
                           for flow, topics in tier_topics(topology).items()}
            archive = archive_per_tier(topology, {n: hierarchy.mdr.stats(n) for n in topology.nodes}, run_s)
        finally:
            stop.set()
            hierarchy.stop()

    produced = sum(readings_per_node(truth).values())
    progress(f"agents produced {produced} readings; edge nodes consumed {consumed}")
    chains = {node: topology.ancestors(node) for node in topology.edge_nodes()}
    strength = float(topology.parameters.get("strength_T", 0.0))
    cycles = list(read_cycles(truth))
    per_level, length = [], window_ms
    for view, nodes in levels.items():
        length = window_length_ms(emits[view], length)
        per_level.append(level_latency(f"{view} ({', '.join(nodes)})", set(nodes), emits[view], cycles, chains,
                                       length, horizon_ms, strength))
    expected = true_location_counts(truth, window_ms)
    got = {(int(r["window_start"].timestamp() * 1000), r["location"]): r["tags"] for r in core_rows}
    emitted_windows = {w for w, _ in got}
    scored = [w for w in covered_windows(truth, window_ms, agent.scenario.cycle_ms)
              if w in emitted_windows and w + window_ms <= horizon_ms]
    locations = {loc for _, loc in expected if loc != "away"}
    exact = sum(all(got.get((w, loc), 0) == expected.get((w, loc), 0) for loc in locations) for w in scored)
    misses = count_misses(truth, got, scored, window_ms, strength)
    return PipelineFigures(
        seconds_to_first_result=first_result[0] if first_result else None,
        edge_readings_per_s=consumed / run_s, readings_consumed=consumed,
        levels=per_level, windows_scored=len(scored), windows_exact=exact, misses=misses, bytes_per_s=bytes_per_s,
        archive=archive, cores=cores)


def level_views(topology: Topology) -> dict[str, list[str]]:
    """The LEVELS the topology exports, each with the nodes exporting it (materialized)."""
    found: dict[str, list[str]] = {}
    for view in LEVELS:
        nodes = [n for n in topology.nodes for v in topology.views_at(n) if v.name == view and v.materialize]
        if nodes:
            found[view] = nodes
    return found


def archive_per_tier(topology: Topology, stats: dict[str, dict[str, float]], run_s: float
                     ) -> dict[str, tuple[float, float]]:
    """Per tier: bytes/s its nodes archived (dsp.runtime.archive) and the mean time a batch's archiving took."""
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
