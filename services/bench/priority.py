"""`hifi bench priority`: alert latency over a constrained link, alone, beside a flood of detail
with priorities, and beside it without (dsp.runtime.uplink).

The small topology (two dock doors under a core) with each door's uplink limited to a byte rate
below what the flood needs. An alert (strong reads, a few a second) and a flood (every reading)
are selections placed at the core, so their rows cross the doors' uplinks. Three phases of one
hierarchy: the alert alone (priority 10); with the flood (priority 0) beside it; then the alert
submitted again at the flood's priority (one lane: first in, first out, behind the flood's
backlog). Per phase: alert rows and their latency from the reading's time to the core's emission
(p50, p95), and the bytes waiting in the doors' uplinks at its end.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from glue.topology import Topology
from services.bench.report import figures_table, percentile

ALERT = "SELECT receptor_id, tag_id, read_strength, ts FROM rfid_stream WHERE read_strength >= 0.8"
FLOOD = "SELECT receptor_id, tag_id, read_strength, antenna, ts FROM rfid_stream"
DEFAULT_UPLINK = 3_000   # bytes/s per door: under the flood's rate


@dataclass(frozen=True)
class PhaseFigures:
    name: str
    alerts: int
    p50_ms: float | None
    p95_ms: float | None
    queued_bytes: int   # waiting in the doors' uplinks at the phase's end


def run_priority_bench(topology: Topology, duration_s: float, progress: Callable[[str], None],
                       uplink_bytes_per_s: int = DEFAULT_UPLINK) -> list[PhaseFigures]:
    from services.embedded import embedded_or_external
    from services.hierarchy import Hierarchy, follow_results

    doors = topology.edge_nodes()
    topology.nodes = {n: replace(s, uplink_bytes_per_s=uplink_bytes_per_s) if n in doors else s
                      for n, s in topology.nodes.items()}
    latencies: dict[str, list[float]] = {}
    phase = [""]

    def collect(topic: str, row: dict) -> None:
        if phase[0] and row.get("ts") is not None:
            latencies.setdefault(phase[0], []).append(row["_emitted_ms"] - row["ts"].timestamp() * 1000)

    results = []
    with embedded_or_external() as servers:
        hierarchy = Hierarchy(topology, servers.redis_url, servers.bootstrap)
        stop = threading.Event()
        try:
            hierarchy.start(progress)
            hierarchy.start_agents()
            placement = hierarchy.placement
            assert placement is not None

            def run_phase(name: str, alert_priority: int) -> None:
                alert = placement.submit(ALERT, priority=alert_priority)
                follower = threading.Thread(target=follow_results,
                                            args=(servers.bootstrap, [alert.result_topic], stop, collect), daemon=True)
                follower.start()
                phase[0] = name
                progress(f"{name}: {duration_s:.0f} s")
                time.sleep(duration_s)
                phase[0] = ""
                placement.cancel(alert.query_id)
                queued = sum(int(hierarchy.mdr.stats(d).get("uplink_queued_bytes", 0)) for d in doors)
                found = latencies.get(name, [])
                results.append(PhaseFigures(name, len(found), percentile(found, 50), percentile(found, 95), queued))

            run_phase("alert alone (priority 10)", 10)
            placement.submit(FLOOD, priority=0)   # runs until the hierarchy stops
            run_phase("alert (10) beside the flood (0)", 10)
            run_phase("alert beside the flood, both priority 0", 0)
        finally:
            stop.set()
            hierarchy.stop()
    return results


def priority_table(results: list[PhaseFigures], uplink_bytes_per_s: int) -> str:
    def ms(value: float | None) -> str:
        return "n/a" if value is None else f"{value / 1000:.1f} s"

    rows = [(f"each door's uplink: {uplink_bytes_per_s:,} bytes/s", "")]
    for r in results:
        rows.append((r.name, f"{r.alerts} alert rows, latency p50 {ms(r.p50_ms)}, p95 {ms(r.p95_ms)}; "
                             f"{r.queued_bytes:,} bytes waiting in the uplinks"))
    return figures_table(rows)
