"""`hifi bench idle`, `sharing` and `capacity`: what the DSP runtime costs a node.

capacity the readings/s that edge node's standing views take in (a backlog published faster than
         it reads; the median of several), beside kafka-python's rate fetching the same topic.
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

import json
import os
import random
import statistics
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


@dataclass
class CapacityFigures:
    readings: int
    client_rate: float      # readings/s kafka-python consumes the raw topic at (records decoded by nothing)
    node_rates: list[float]  # each backlog's readings/s through the edge node's standing views, over its batches' time
    drains_s: list[float]
    decoding_rate: float = 0.0   # readings/s kafka-python consumes it at, each record parsed into readings

    @property
    def node_rate(self) -> float:
        return statistics.median(self.node_rates)

    @property
    def drain_s(self) -> float:
        return statistics.median(self.drains_s)


READS_PER_CYCLE = 10


def publish_backlog(bootstrap: str, topic: str, receptors: Sequence[str], readings: int) -> None:
    """`readings` valid readings (READS_PER_CYCLE per read cycle, stamped now) on `topic`."""
    from wire import bus
    from wire.codec import TagObservation, encode_read_cycle

    producer = bus.make_producer(bootstrap, linger_ms=20, batch_size=512 * 1024)
    for cycle in range(readings // READS_PER_CYCLE):
        receptor = receptors[cycle % len(receptors)]
        reads = [TagObservation(f"urn:epc:id:sgtin:0614141.812345.{(cycle + i) % 500}", 1, 0.5)
                 for i in range(READS_PER_CYCLE)]
        key, value = encode_read_cycle(receptor, cycle, int(time.time() * 1000), reads)
        producer.send(topic, key=key, value=value)
    producer.flush()
    producer.close()


def client_rate(bootstrap: str, topic: str, decode: bool = False) -> float:
    """Readings/s kafka-python fetches `topic` at: every record, nothing decoded (the floor a
    Python reader of the topic stands on), or with `decode` each record parsed and its readings
    made Python values (what any Python consumer of the readings does at least)."""
    from kafka import TopicPartition

    from protos import hifi_pb2
    from wire import bus

    consumer = bus.make_consumer(bootstrap)
    cycle = hifi_pb2.RfidReadCycle()
    try:
        readings, started = 0, time.monotonic()
        for tp in bus.partitions_of(consumer, [topic]):
            end = bus.end_offsets(consumer, [tp])[tp]
            for record in bus.read_range(consumer, TopicPartition(tp.topic, tp.partition), 0, end):
                if decode:
                    cycle.ParseFromString(record.value)
                    readings += len([(cycle.receptor_id, r.tag_id, r.antenna, r.read_strength, cycle.timestamp_ms)
                                     for r in cycle.reads])
                else:
                    readings += READS_PER_CYCLE
        return readings / (time.monotonic() - started)
    finally:
        consumer.close()


def run_capacity_bench(readings: int, progress: Callable[[str], None], drains: int = 3) -> CapacityFigures:
    """Start the hierarchy; `drains` times, stop the edge's raw reader (the data listener its
    standing views share), publish `readings` on its topic, start the reader again and time it
    until its micro-batches have taken them all through the standing views (Spark's progress says
    the batch that reached the topic's end is done): the node alone on the CPU, not sharing it with
    the publisher. A backlog's rate is its readings over its micro-batches' time; its drain's time
    also holds the reader's restart. One backlog is one or two micro-batches of a few seconds on a
    shared machine: the median of several is the figure. Then time kafka-python fetching the topic."""
    from dsp.shared import READER_PREFIX
    from services.embedded import embedded_or_external
    from services.hierarchy import Hierarchy
    from wire.topics import raw_topic

    topology = one_edge_topology()
    edge = topology.edge_nodes()[0]
    rates, times = [], []
    with embedded_or_external() as servers:
        topic = raw_topic(edge)
        hierarchy = Hierarchy(topology, servers.redis_url, servers.bootstrap)
        try:
            hierarchy.start(progress)
            time.sleep(10)
            readers = hierarchy.nodes[edge].dsp.spark_queries
            for drain in range(1, drains + 1):
                rate, drain_s = _drain_backlog(readers, f"{READER_PREFIX}rfid:{topic}", servers.bootstrap, topic,
                                               [r.id for r in topology.receptors_of(edge)], readings, progress)
                rates.append(rate)
                times.append(drain_s)
                progress(f"backlog {drain} of {drains}: {rate:,.0f} readings/s over its micro-batches")
        finally:
            hierarchy.stop()
        floor = client_rate(servers.bootstrap, topic)
        decoding = client_rate(servers.bootstrap, topic, decode=True)
    return CapacityFigures(readings, floor, rates, times, decoding)


def _drain_backlog(readers, reader: str, bootstrap: str, topic: str, receptors: list[str], readings: int,
                   progress: Callable[[str], None]) -> tuple[float, float]:
    """One backlog published with the reader stopped, then drained: (readings/s over the
    micro-batches, seconds from the reader's restart to the end)."""
    from dsp.manager import last_progress
    from wire import bus

    readers.suspend(reader)
    progress(f"publishing {readings:,} readings")
    publish_backlog(bootstrap, topic, receptors, readings)
    ends = bus.current_ends(bootstrap, [topic])
    progress("published; the node reads them")
    started = time.monotonic()
    readers.resume(reader)
    handle = readers._get(reader).handle

    def reached_the_end() -> bool:
        offsets = _offsets((last_progress(handle).get("sources") or [{}])[0].get("endOffset"))
        return all(int(offsets.get(key, -1)) >= end for key, end in ends.items())

    while not reached_the_end():
        time.sleep(0.05)
    drain = time.monotonic() - started
    # the batches since the clock started and the records each took, from their offsets (a record
    # read before must not count; a small batch the driver read has no input rows in Spark's count)
    timed = [(b, _records_between(b["sources"][0]["startOffset"], b["sources"][0]["endOffset"]))
             for b in (json.loads(p.json()) for p in handle._jsq.recentProgress())
             if b["timestamp"] >= _iso_after(started) and b.get("sources")]
    busy_ms = sum(b["durationMs"].get("triggerExecution", 0) for b, records in timed if records)
    records = sum(records for _, records in timed)
    if records * READS_PER_CYCLE != readings:
        progress(f"the timed batches took {records * READS_PER_CYCLE:,} readings of the {readings:,} published")
    return records * READS_PER_CYCLE / (busy_ms / 1000), drain


def _offsets(value) -> dict:
    """A progress report's offsets ({"topic:partition": n}), which Spark gives as JSON text or not."""
    return json.loads(value) if isinstance(value, str) else (value or {})


def _records_between(start, end) -> int:
    """Records from one progress report's startOffset to its endOffset."""
    start, end = _offsets(start), _offsets(end)
    return sum(int(n) - int(start.get(key, 0)) for key, n in end.items())


def _iso_after(monotonic_at: float) -> str:
    """Spark's progress timestamp (ISO, UTC) of a moment taken from time.monotonic()."""
    import datetime as dt

    at = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=time.monotonic() - monotonic_at)
    return at.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def capacity_table(f: CapacityFigures) -> str:
    return "\n".join([
        f"backlog                                  {f.readings:,} readings",
        f"kafka-python consume rate (the floor)    {f.client_rate:,.0f} readings/s",
        f"kafka-python consuming, records decoded  {f.decoding_rate:,.0f} readings/s",
        f"edge node with its standing views        {f.node_rate:,.0f} readings/s over its micro-batches"
        + (f" (median of {len(f.node_rates)}: {', '.join(f'{r / 1000:,.0f} k' for r in f.node_rates)})"
           if len(f.node_rates) > 1 else ""),
        f"  the drain, the reader's restart with it  {f.drain_s:.1f} s ({f.readings / f.drain_s:,.0f} readings/s)",
        f"node / client                            {f.node_rate / f.client_rate:.0%}",
        f"node / decoding client                   {f.node_rate / f.decoding_rate:.0%}"])
