"""`hifi bench dashboard`: what watching the hierarchy costs and how fast it notices a failure.

Runs a topology (default small.yaml) with its agents and dashboard, then measures: the time to
build one dashboard snapshot and its size (what every open page is pushed each second), the time
and size of a Prometheus scrape of each service, the MDR operations per second each node makes,
and, after crashing an edge node (heartbeat and statistics stop), how long until the MDR and the
dashboard call it dead.
"""

from __future__ import annotations

import json
import statistics
import time
import urllib.request
from collections.abc import Callable

from glue.topology import Topology
from services.bench.report import percentile


def run_dashboard_bench(topology: Topology, duration_s: float, progress: Callable[[str], None]) -> str:
    from services.embedded import embedded_or_external
    from services.hierarchy import Hierarchy

    with embedded_or_external() as servers:
        hierarchy = Hierarchy(topology, servers.redis_url, servers.bootstrap)
        try:
            hierarchy.start(progress)
            hierarchy.start_agents()
            hierarchy.start_dashboard()
            progress(f"dashboard at {hierarchy.dashboard.url}; warming up 20 s, then measuring {duration_s:.0f} s")
            time.sleep(20)
            return _measure(hierarchy, duration_s, progress)
        finally:
            progress("stopping")
            hierarchy.stop()


def _measure(hierarchy, duration_s: float, progress: Callable[[str], None]) -> str:
    dashboard = hierarchy.dashboard
    operations_before = {n: sum(node.mdr.operations.values()) for n, node in hierarchy.nodes.items()}
    started = time.monotonic()
    build_ms, sizes = [], []
    while time.monotonic() - started < duration_s:
        t0 = time.perf_counter()
        snapshot = dashboard.snapshot()
        build_ms.append(1000 * (time.perf_counter() - t0))
        sizes.append(len(json.dumps(snapshot)))
        time.sleep(1.0)
    elapsed = time.monotonic() - started
    ops_per_s = {n: (sum(node.mdr.operations.values()) - operations_before[n]) / elapsed
                 for n, node in hierarchy.nodes.items()}
    scrapes = []
    for service, endpoints in sorted(hierarchy.mdr.endpoints().items()):
        url = endpoints.get("metrics")
        if not url:
            continue
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            with urllib.request.urlopen(url, timeout=10) as answer:
                body = answer.read()
            times.append(1000 * (time.perf_counter() - t0))
        scrapes.append((service, statistics.median(times), len(body)))

    edge = next(n for n, spec in hierarchy.topology.nodes.items() if spec.tier == "edge")
    progress(f"crashing {edge}")
    crashed = time.monotonic()
    hierarchy.nodes[edge].crash()
    mdr_dead = page_dead = None
    while time.monotonic() - crashed < 30 and (mdr_dead is None or page_dead is None):
        if mdr_dead is None and not hierarchy.mdr.node(edge).alive:
            mdr_dead = time.monotonic() - crashed
        if page_dead is None and any(n["id"] == edge and n["state"] == "dead" for n in dashboard.snapshot()["nodes"]):
            page_dead = time.monotonic() - crashed
        time.sleep(0.1)

    lines = [f"dashboard bench: topology {hierarchy.topology.name!r}, {len(hierarchy.nodes)} nodes, "
             f"{len(build_ms)} snapshots over {elapsed:.0f} s",
             f"snapshot build  p50 {percentile(build_ms, 50):.1f} ms  p95 {percentile(build_ms, 95):.1f} ms  "
             f"max {max(build_ms):.1f} ms",
             f"snapshot size   p50 {percentile(sizes, 50) / 1024:.1f} KiB (pushed to each open page every second)",
             "MDR operations/s per node: " + ", ".join(f"{n} {v:.1f}" for n, v in sorted(ops_per_s.items())),
             "metrics scrape (median of 5):"]
    lines += [f"  {service:<16} {ms:6.1f} ms  {size / 1024:6.1f} KiB" for service, ms, size in scrapes]
    lines.append(f"crash of {edge} -> dead in the MDR after {mdr_dead:.1f} s, on the dashboard after "
                 f"{page_dead:.1f} s (heartbeat TTL 5 s)" if mdr_dead and page_dead else
                 f"crash of {edge}: not seen dead within 30 s")
    return "\n".join(lines)
