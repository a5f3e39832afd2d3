"""`hifi bench idle` and `sharing`: what the DSP runtime costs a node (capacity: services.bench.capacity).

idle     one edge node (and the core above it) with its standing views and no input: the CPU the
         whole process tree (driver, Spark's JVM, its Python workers) uses, in cores.
sharing  the same hierarchy with its agents running and 1, 10, 100 **distinct** user queries over
         the edge's stream (services.bench.workload: different windows, slides, keys, filters,
         aggregates, HAVING, each with rows): CPU-seconds per minute for each count, the hierarchy's
         alone and with the broker and Redis (fifty result topics are written by the broker), the
         results' latency (a window's first emit after its end, p50 / p95), and the answers
         checked against the central reference evaluator (services.judge; all of them up to
         CHECKED queries, a sample of CHECKED beyond).

CPU is read from /proc (utime + stime of the process and every descendant, the embedded broker
and Redis only where said), so it counts the JVM and Spark's Python workers, and the receptor
agents, which run in this process; compare counts as ratios within one run (the machine is shared).
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from glue.topology import Topology, parse_topology
from services.bench.workload import distinct_queries

# The supply chain's edge views (cleaning, smoothing), as the benchmarks' small topologies run them
EDGE_VIEWS = """
  - tiers: [edge]
    materialize: false
    sql: |
      CREATE VIEW cleaned_rfid_stream AS
      SELECT receptor_id, tag_id FROM rfid_stream rs WHERE read_strength >= strength_T
  - tiers: [edge]
    sql: |
      CREATE VIEW smoothed_rfid_stream AS
      SELECT receptor_id, tag_id, count(*) AS reads FROM cleaned_rfid_stream [range by 't1', slide by 't2']
      GROUP BY receptor_id, tag_id HAVING count(*) >= count_T
"""
ONE_EDGE = """
name: one-edge
parameters: {strength_T: 0.2, count_T: 1, t1: 2 seconds, t2: 2 seconds}
nodes:
  - {id: rt-core, tier: core}
  - {id: rt-edge, tier: edge, parent: rt-core}
receptors:
  - {id: rt-r1, kind: rfid, node: rt-edge, location: inbound-dock, area: north, x: 0.0, y: 0.0}
  - {id: rt-r2, kind: rfid, node: rt-edge, location: inbound-dock, area: north, x: 2.0, y: 0.0}
relations:
  - {name: receptor_locations, columns: [[receptor_id, string], [location, string]], replicas: ["*"]}
views:
""" + EDGE_VIEWS.strip("\n") + """
scenario:
  name: one-edge
  seed: 11
  cycle: 100 ms
  world: {pallets: 4, arrival_gap: 6 seconds, dwell: 10 seconds, repeat: true}
  readers:
    - {id: rt-r1, node: rt-edge, location: inbound-dock, antennas: 2}
    - {id: rt-r2, node: rt-edge, location: inbound-dock, antennas: 2}
"""
# (A node-id prefix of its own: the test broker keeps every topic of other topologies.)
TICKS = os.sysconf("SC_CLK_TCK")


def one_edge_topology() -> Topology:
    return parse_topology(ONE_EDGE, "bench one-edge")


def tree_cpu_s(root: int | None = None, leave_out: set[int] | frozenset[int] = frozenset()) -> float:
    """CPU seconds (user + system) of process `root` (default: this one) and all its descendants
    but those in `leave_out` and theirs, those that have ended included."""
    root = root or os.getpid()
    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(entry)] = int(fields[1])
        # with its children's that have ended (cutime, cstime): Spark ends a Python worker idle
        # for a minute, and its CPU must not leave the sum (an idle node measured -0.000 cores)
        times[int(entry)] = sum(int(f) for f in fields[11:15]) / TICKS
    total, stack = 0.0, [root]
    while stack:
        pid = stack.pop()
        total += times.get(pid, 0.0)
        stack.extend(child for child, parent in parents.items() if parent == pid and child not in leave_out)
    return total


def cores_over(seconds: float, servers) -> float:
    """Cores the process tree (without the embedded broker and Redis, when they run) used
    during the next `seconds`."""
    return cores_with_servers(seconds, servers)[0]


def cores_with_servers(seconds: float, servers) -> tuple[float, float]:
    """Cores the process tree used during the next `seconds`: without the embedded broker and
    Redis, and with them."""
    leave_out = getattr(servers, "pids", set())

    def both() -> tuple[float, float]:
        return tree_cpu_s(leave_out=leave_out), sum(tree_cpu_s(pid) for pid in leave_out)

    (tree, serving), started = both(), time.monotonic()
    time.sleep(seconds)
    (tree_after, serving_after), spent = both(), time.monotonic() - started
    return (tree_after - tree) / spent, (tree_after - tree + serving_after - serving) / spent


@dataclass
class SharingFigures:
    queries: int
    cpu_s_per_min: float
    checked: int          # queries whose answers equal the reference
    windows: int          # windows compared, over all queries
    cpu_with_servers_s_per_min: float = 0.0   # the broker and Redis included
    latency_ms: list[float] = field(default_factory=list)   # per window: its first emit - its end
    judged: int = 0       # queries compared with the reference (all, or a sample)


CHECKED = 20


def run_idle_bench(seconds: float, progress: Callable[[str], None]) -> float:
    from services.embedded import embedded_or_external
    from services.hierarchy import Hierarchy

    with embedded_or_external() as servers:
        hierarchy = Hierarchy(one_edge_topology(), servers.redis_url, servers.bootstrap)
        try:
            hierarchy.start(progress)
            progress("settling for 15 s")
            time.sleep(15)
            progress(f"measuring for {seconds:.0f} s")
            return cores_over(seconds, servers)
        finally:
            hierarchy.stop()


def run_sharing_bench(counts: Sequence[int], seconds: float, progress: Callable[[str], None]) -> list[SharingFigures]:
    from services.embedded import embedded_or_external
    from services.hierarchy import Hierarchy
    from services.judge import compare_to_reference

    figures = []
    for n in counts:
        with embedded_or_external() as servers:
            hierarchy = Hierarchy(one_edge_topology(), servers.redis_url, servers.bootstrap)
            try:
                hierarchy.start(progress)
                hierarchy.start_agents()
                receptors = [r.id for r in hierarchy.topology.receptors]
                plans = [hierarchy.placement.submit(sql) for sql in distinct_queries(n, receptors)]
                progress(f"{n} queries submitted; settling for 15 s, then measuring for {seconds:.0f} s")
                time.sleep(15)
                alone, with_servers = cores_with_servers(seconds, servers)
                time.sleep(5)
                judged = plans if n <= CHECKED else random.Random(n).sample(plans, CHECKED)
                verdicts = [compare_to_reference(hierarchy, plan) for plan in judged]
                latency = [ms for plan in plans for ms in first_emit_after_end_ms(servers.bootstrap, plan.result_topic)]
                figures.append(SharingFigures(n, alone * 60, sum(v.equal for v in verdicts),
                                              sum(v.windows for v in verdicts), with_servers * 60, latency,
                                              len(judged)))
                progress(f"{n} queries: {alone * 60:.1f} CPU-s/min ({with_servers * 60:.1f} with the broker and "
                         f"Redis), {figures[-1].checked} of {len(judged)} checked equal the reference")
            finally:
                hierarchy.stop()
    return figures


def first_emit_after_end_ms(bootstrap: str, topic: str) -> list[float]:
    """Per window of a results topic: its first emit's time after the window's end."""
    from services.bench.lag import first_emits
    from services.judge import topic_records

    return [emitted - end for end, emitted in first_emits(topic_records(bootstrap, topic)).items()]


def sharing_table(figures: list[SharingFigures]) -> str:
    from services.bench.report import percentile

    lines = ["queries  CPU-s/min  x of 1  with broker+Redis  x of 1  result p50 / p95 s  answers = reference  "
             "windows compared"]
    base = figures[0] if figures else None
    for f in figures:
        ratio = f.cpu_s_per_min / base.cpu_s_per_min if base and base.cpu_s_per_min else float("nan")
        served = (f.cpu_with_servers_s_per_min / base.cpu_with_servers_s_per_min
                  if base and base.cpu_with_servers_s_per_min else float("nan"))
        p50, p95 = percentile(f.latency_ms, 50), percentile(f.latency_ms, 95)
        latency = f"{p50 / 1000:.2f} / {p95 / 1000:.2f}" if p50 is not None and p95 is not None else "n/a"
        lines.append(f"{f.queries:>7}  {f.cpu_s_per_min:>9.1f}  {ratio:>6.2f}  {f.cpu_with_servers_s_per_min:>17.1f}  "
                     f"{served:>6.2f}  {latency:>18}  {f.checked:>6} of {f.judged:<3} checked  {f.windows:>16}")
    return "\n".join(lines)

