"""`hifi bench fanin`: what a parent's number of children costs, at the same total reading rate.

For each N (`--children`), one `hifi up`-style hierarchy of its own: a warehouse over N dock doors,
one reader a door, every reader's cycle N x 25 ms (so 8 doors read at 200 ms, and the readings per
second stay the same whatever N); the doors smooth (the supply chain's edge views) and the
warehouse counts each door's tags per 2 s window (`door_tags`, over every door: a view rooted at
the warehouse, its partials pushed down). After `settle` seconds, for `duration` seconds:
- the cores the whole process tree used (nodes, Spark's JVM and Python workers, the agents),
  alone and with the broker and Redis;
- the warehouse's windows: their first emit after the window's end (p50 / p95); their first emit
  after the reading that closed them reached the broker (p50 / p95: per door, the first reading
  at or past the window's end + the raw stream's lateness, which moves the door's watermark past
  the end; the last door's) — what the system takes once the window can close, without the
  lateness and the readers' cycle before it; and what the warehouse added (its emit after the last
  door's emit of the same window end, p50 / max): how far it is behind its inputs, window by window;
- the warehouse's two lag gauges, sampled every half second: its input lag (how long its input
  waited for it: dsp.runtime.inputs.RecentInput), which says whether it keeps up, and its event-time
  lag (services.node_gauges: now - the newest window end it emitted), which saws by a window (2 s)
  above the doors' own delay, so it says how fresh the warehouse's answers are;
- the Spark streaming queries the warehouse ran to read its children.

Compare N as ratios within one run (the machine is shared). The doors' cost is in those cores,
and grows with N by their own readers; hence the second table, **the parent alone**
(`run_parent_bench`): the warehouse is the only node running, in this process, and its N doors
are emulated by a publisher process (`emulate_children`) that writes what each door's part of
`door_tags` would write to its topic — per 2 s window one row of the door's distinct tags (the
same TAGS_PER_WINDOW split among the doors, whatever N) and then a progress marker past the
window. Measured: the cores of this process tree (the parent: driver, JVM, Python workers; not
the publisher, broker or Redis), and what the parent adds — its first emit of a window after the
last child's marker passed the window's end (p50 / p95).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from glue.rewrite.distribute import LATENESS
from glue.topology import Topology, parse_topology
from services.bench.runtime import EDGE_VIEWS, cores_with_servers
from wire.windows import duration_ms

CYCLE_MS_PER_CHILD = 25
WINDOW_MS = 2_000
TAGS_PER_WINDOW = 400   # the parent alone: distinct tags a window, over all the emulated doors


def fanin_topology(children: int) -> Topology:
    doors = "\n".join(f"  - {{id: fi{children}-d{i}, tier: edge, parent: fi{children}-wh}}" for i in range(children))
    receptors = "\n".join(f"  - {{id: fi{children}-d{i}-r1, kind: rfid, node: fi{children}-d{i}, "
                          f"location: inbound-dock, area: north, x: {i}.0, y: 0.0}}" for i in range(children))
    readers = "\n".join(f"    - {{id: fi{children}-d{i}-r1, node: fi{children}-d{i}, location: inbound-dock, "
                        f"antennas: 1}}" for i in range(children))
    return parse_topology(f"""
name: fanin-{children}
parameters: {{strength_T: 0.2, count_T: 1, t1: 2 seconds, t2: 2 seconds}}
nodes:
  - {{id: fi{children}-wh, tier: core}}
{doors}
receptors:
{receptors}
relations:
  - {{name: receptor_locations, columns: [[receptor_id, string], [location, string]], replicas: ["*"]}}
views:
{EDGE_VIEWS.strip(chr(10))}
  - nodes: [fi{children}-wh]
    sql: |
      CREATE VIEW door_tags AS
      SELECT receptor_id, count(DISTINCT tag_id) AS tags FROM smoothed_rfid_stream [range by '2 seconds']
      GROUP BY receptor_id
scenario:
  name: fanin-{children}
  seed: 11
  cycle: {children * CYCLE_MS_PER_CHILD} ms
  world: {{pallets: 4, arrival_gap: 6 seconds, dwell: 10 seconds, repeat: true}}
  readers:
{readers}
""", f"bench fan-in {children}")


@dataclass
class FaninFigures:
    children: int
    cores: float
    cores_with_servers: float
    readings_per_s: float
    close_to_emit_ms: list[float] = field(default_factory=list)   # the warehouse's windows: emit - end
    added_ms: list[float] = field(default_factory=list)   # its emit - the last door's emit of that window
    readers: int = 0     # Spark streaming queries reading the warehouse's inputs
    doors_ms: list[float] = field(default_factory=list)   # the doors' windows (smoothed_rfid_stream): emit - end
    lag_ms: list[float] = field(default_factory=list)   # the warehouse's lag gauge, sampled every half second
    input_lag_ms: list[float] = field(default_factory=list)   # its input lag gauge, sampled with it
    closed_to_emit_ms: list[float] = field(default_factory=list)   # its emit - the last door's closing reading


def run_fanin_bench(children: Sequence[int], settle_s: float, duration_s: float,
                    progress: Callable[[str], None]) -> list[FaninFigures]:
    from services.bench.lag import first_emits
    from services.embedded import embedded_or_external
    from services.hierarchy import Hierarchy
    from services.judge import topic_records
    from wire.codec import cycle_key
    from wire.topics import raw_topic, view_topic

    found = []
    for n in children:
        topology = fanin_topology(n)
        parent = topology.root
        with embedded_or_external() as servers:
            hierarchy = Hierarchy(topology, servers.redis_url, servers.bootstrap)
            try:
                hierarchy.start(progress)
                agent = hierarchy.start_agents()
                progress(f"{n} children: settling for {settle_s:.0f} s, then measuring for {duration_s:.0f} s")
                time.sleep(settle_s)
                since_ms, readings = int(time.time() * 1000), agent.stats.readings
                with sampling_lag(hierarchy.nodes[parent]) as lags:
                    cores, with_servers = cores_with_servers(duration_s, servers)
                rate = (agent.stats.readings - readings) / duration_s
                time.sleep(5)
                until_ms = int(time.time() * 1000) - 5_000
                readers = len(hierarchy.nodes[parent].dsp.stream.manager.queries())
                top = first_emits(topic_records(servers.bootstrap, view_topic(parent, "door_tags")))
                doors = [first_emits(topic_records(servers.bootstrap, view_topic(d, "smoothed_rfid_stream")))
                         for d in topology.children(parent)]
                readings = [[(head[2], r.timestamp) for r in topic_records(servers.bootstrap, raw_topic(d))
                             if (head := cycle_key(r.value)) is not None] for d in topology.children(parent)]
            finally:
                hierarchy.stop()
        ends = [e for e in top if since_ms <= e <= until_ms]
        lateness_ms = duration_ms(str(topology.parameters.get("lateness") or LATENESS))
        closed = window_closes([closing_readings(r, ends, lateness_ms) for r in readings])
        figures = FaninFigures(n, cores, with_servers, rate, [top[e] - e for e in ends],
                               [top[e] - max(d[e] for d in doors) for e in ends if all(e in d for d in doors)],
                               readers, [d[e] - e for d in doors for e in d if since_ms <= e <= until_ms],
                               lags["lag_ms"], lags["input_lag_ms"], [top[e] - closed[e] for e in ends if e in closed])
        found.append(figures)
        progress(f"{n} children: {cores:.2f} cores, windows p50 {_p(figures.close_to_emit_ms, 50)} s after they close")
    return found


def closing_readings(readings: Sequence[tuple[int, int]], ends: Sequence[int], lateness_ms: int) -> dict[int, int]:
    """Window end -> when the reading that closed the window at a door reached the broker: the first
    of `readings` ((event ms, Kafka ms) in the topic's order) at or past end + `lateness_ms`, which
    moves the door's watermark past the end (pure).

    >>> closing_readings([(900, 905), (1_700, 1_702), (2_500, 2_503)], [0, 1_000, 2_000], 700)
    {0: 905, 1000: 1702}
    """
    found: dict[int, int] = {}
    pending = sorted(ends)
    for event_ms, kafka_ms in readings:
        while pending and event_ms >= pending[0] + lateness_ms:
            found[pending.pop(0)] = kafka_ms
    return found


def window_closes(doors: Sequence[Mapping[int, int]]) -> dict[int, int]:
    """Window end -> when its last door's closing reading reached the broker, for the ends every
    door closed (pure).

    >>> window_closes([{0: 905, 1_000: 1_702}, {0: 1_210}])
    {0: 1210}
    """
    ends = set.intersection(*(set(d) for d in doors)) if doors else set()
    return {end: max(d[end] for d in doors) for end in sorted(ends)}


@contextlib.contextmanager
def sampling_lag(node) -> Iterator[dict[str, list[float]]]:
    """The node's lag gauges (services.node_gauges), read from the MDR every half second while the
    block runs: `lag_ms` (now - the newest event time it emitted) and `input_lag_ms` (how long its
    input waited for it: dsp.runtime.inputs.RecentInput)."""
    found: dict[str, list[float]] = {"lag_ms": [], "input_lag_ms": []}
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.5):
            stats = node.mdr.stats(node.id)
            for gauge, samples in found.items():
                samples.append(stats.get(gauge, 0.0))
    thread = threading.Thread(target=sample, name="lag-sampler", daemon=True)
    thread.start()
    try:
        yield found
    finally:
        done.set()
        thread.join(5)


def _p(values: list[float], q: int) -> str:
    from services.bench.report import percentile

    found = percentile(values, q)
    return "n/a" if found is None else f"{found / 1000:.2f}"


def fanin_table(figures: list[FaninFigures]) -> str:
    lines = ["children  readings/s  cores  x of first  with broker+Redis  parent's readers  "
             "window end -> parent emit p50 / p95 s  closing reading -> parent emit p50 / p95 s  "
             "parent adds p50 / max s  windows  "
             "doors' windows p50 / p95 s  parent's input lag p50 / max s  parent's event-time lag gauge p50 / max s"]
    base = figures[0].cores if figures else 0.0
    for f in figures:
        ratio = f.cores / base if base else 0.0
        lines.append(f"{f.children:>8}  {f.readings_per_s:>10,.0f}  {f.cores:>5.2f}  {ratio:>10.2f}  "
                     f"{f.cores_with_servers:>17.2f}  {f.readers:>16}  "
                     f"{_p(f.close_to_emit_ms, 50):>20} / {_p(f.close_to_emit_ms, 95):<17}  "
                     f"{_p(f.closed_to_emit_ms, 50):>26} / {_p(f.closed_to_emit_ms, 95):<15}  "
                     f"{_p(f.added_ms, 50):>14} / {max(f.added_ms, default=0) / 1000:<5.2f}  "
                     f"{len(f.close_to_emit_ms):>7}  {_p(f.doors_ms, 50):>14} / {_p(f.doors_ms, 95):<9}  "
                     f"{_p(f.input_lag_ms, 50):>22} / {max(f.input_lag_ms, default=0) / 1000:<5.2f}  "
                     f"{_p(f.lag_ms, 50):>26} / {max(f.lag_ms, default=0) / 1000:<5.2f}")
    return "\n".join(lines)


@dataclass
class ParentFigures:
    children: int
    cores: float
    added_ms: list[float] = field(default_factory=list)   # parent's emit - the last child's marker past the end
    readers: int = 0


def emulate_children(bootstrap: str, children: list[tuple[str, str, str]], columns: list[str], seconds: float) -> int:
    """Write, for `seconds`, what each child (node, topic, stream) of a `door_tags` parent writes: at
    each window's end, the window's row of its share of the tags, then a marker past it (a process
    of its own). The rows sent."""
    import datetime as dt

    from dsp.spark.kafka_sink import new_run, send_marker, send_rows
    from wire.kafka import producers

    producer, run, sent = producers.make_producer(bootstrap, linger_ms=5), new_run(), 0
    share = max(1, TAGS_PER_WINDOW // len(children))
    batch, started = 0, time.time()
    window = int(started * 1000) // WINDOW_MS * WINDOW_MS + WINDOW_MS   # the first whole window's start
    while time.time() < started + seconds:
        end = window + WINDOW_MS
        time.sleep(max(0.0, end / 1000 - time.time()))
        futures = []
        for n, (node, topic, stream) in enumerate(children):
            tags = [f"urn:epc:id:sgtin:0614141.812345.{n * share + (i + batch) % share}" for i in range(share)]
            row = (dt.datetime.fromtimestamp(window / 1000, dt.UTC), dt.datetime.fromtimestamp(end / 1000, dt.UTC),
                   f"{node}-r1", tags)
            # as a part numbers its messages: rows, then the marker, each its own batch id
            futures += send_rows(producer, topic, node, stream, columns, [row], 2 * batch + 1, run)
            futures.append(send_marker(producer, topic, node, stream, 2 * batch + 2, end, run))
            sent += 1
        producers.deliver(producer, futures)
        window, batch = end, batch + 1
    producer.close()
    return sent


def run_parent_bench(children: Sequence[int], settle_s: float, duration_s: float,
                     progress: Callable[[str], None]) -> list[ParentFigures]:
    """For each N: the warehouse alone in this process, its N doors emulated by a publisher process."""
    import multiprocessing

    from base.plan_schema import output_columns
    from glue.standing import standing_views
    from services.bench.lag import first_emits
    from services.bench.runtime import tree_cpu_s
    from services.embedded import embedded_or_external
    from services.hierarchy import Hierarchy
    from services.judge import topic_records
    from wire.topics import view_topic

    found = []
    for n in children:
        topology = fanin_topology(n)
        parent = topology.root
        door_tags = next(s for s in standing_views(topology) if s.view.name == "door_tags")
        doors = [t for t in door_tags.tasks if t.node != parent]
        columns = [name for name, _ in output_columns(doors[0].plan)]
        with embedded_or_external() as servers:
            hierarchy = Hierarchy(topology, servers.redis_url, servers.bootstrap, only=frozenset([parent]))
            try:
                hierarchy.start(progress)
                progress(f"{n} emulated children: settling for {settle_s:.0f} s, then measuring for {duration_s:.0f} s")
                with multiprocessing.get_context("spawn").Pool(1) as publisher:
                    emulating = publisher.apply_async(emulate_children, (
                        servers.bootstrap, [(t.node, t.topic, t.query_id) for t in doors], columns,
                        settle_s + duration_s + 5))
                    time.sleep(settle_s)
                    leave_out = {*getattr(servers, "pids", set()), *(p.pid for p in multiprocessing.active_children())}
                    since_ms, cpu, started = int(time.time() * 1000), tree_cpu_s(leave_out=leave_out), time.monotonic()
                    time.sleep(duration_s)
                    cores = (tree_cpu_s(leave_out=leave_out) - cpu) / (time.monotonic() - started)
                    until_ms = int(time.time() * 1000) - 3_000
                    emulating.get()
                readers = len(hierarchy.nodes[parent].dsp.stream.manager.queries())
                emits = first_emits(topic_records(servers.bootstrap, view_topic(parent, "door_tags")))
                passed = [markers_past(topic_records(servers.bootstrap, t.topic)) for t in doors]
            finally:
                hierarchy.stop()
        ends = [e for e in emits if since_ms <= e - WINDOW_MS and e <= until_ms and all(e in p for p in passed)]
        figures = ParentFigures(n, cores, [emits[e] - max(p[e] for p in passed) for e in ends], readers)
        found.append(figures)
        progress(f"{n} emulated children: the parent {cores:.2f} cores, adds p50 {_p(figures.added_ms, 50)} s")
    return found


def markers_past(records) -> dict[int, int]:
    """window end (ms) -> when the first marker at or past it was emitted (ms), over RowBatch records."""
    from wire.codec import readable_batches

    first: dict[int, int] = {}
    for _, batch in readable_batches(records):
        if not batch.rows and batch.watermark_ms:
            first[batch.watermark_ms] = min(first.get(batch.watermark_ms, batch.emitted_ms), batch.emitted_ms)
    return first


def parent_table(figures: list[ParentFigures]) -> str:
    lines = ["children (emulated)  parent cores  x of first  parent's readers  parent adds p50 / p95 s  windows"]
    base = figures[0].cores if figures else 0.0
    for f in figures:
        lines.append(f"{f.children:>19}  {f.cores:>12.2f}  {f.cores / base if base else 0.0:>10.2f}  {f.readers:>16}  "
                     f"{_p(f.added_ms, 50):>14} / {_p(f.added_ms, 95):<8}  {len(f.added_ms):>7}")
    return "\n".join(lines)
