"""`hifi bench capacity`: the reading rate an edge node sustains, beside its own client's floors.

A publisher process offers the edge node's raw topic a rate of readings for `step_s` seconds
(default 120), one step after another, each rate higher than the last (default 10 k, doubling
to 320 k readings/s), on the supply-chain mix (`mixed_cycles`: many tags, two antennas,
weak reads, overlapping neighbours, ghosts, read cycles sent twice). Twice a second the bench reads
how far the edge's raw reader is behind the topic's end (its last finished micro-batch's end
offset) and turns the records behind into seconds at the rate published. A rate is **held** when
the lag over the step's second half never exceeds two trigger intervals (flat: the node keeps up);
the steps stop at the first rate not held, and the headline is the highest rate held.

Beside it, measured in the same run over the same topic (the last FLOOR_RECORDS records the steps
published) in one process: librdkafka fetching the topic (the client the node's readers use, wire.kafka.ranges), and
librdkafka fetching plus the node's own decode (dsp.spark.kafka_source's reader, intake checks
included). The node runs its reads in two Spark tasks; the floors are one process each.
The hierarchy's cores during each step are read from /proc (the publisher, broker and Redis left out).

`--spark-cluster` runs the hierarchy's Spark application on a standalone cluster this bench starts
(services.spark_cluster: two workers of one core, the machine's two) instead of local mode, and
counts the tasks its executors finished; their processes are the bench's children, so their cores
are the nodes' (the master's and workers' daemons too).
"""

from __future__ import annotations

import multiprocessing
import os
import random
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from dsp.spark.session import stop_session
from edge.rfid import Antenna, RfidReader
from services.bench.publisher import Cycle, publish
from services.spark_event_log import applications

RATES = (10_000, 20_000, 40_000, 80_000, 160_000, 320_000)
STEP_S = 120.0
SAMPLE_S = 0.5
POOL_CYCLES = 20_000    # distinct read cycles generated once and sent round, each stamped when sent
TAGS = 5_000            # the tags that pass the doors
RESENT = 0.02           # share of read cycles a reader sends twice (an outbox retry: intake drops it)


@dataclass(frozen=True)
class Step:
    offered: float          # readings/s asked of the publisher
    published: float        # readings/s it sent (the machine may not let it offer more)
    lag_s: list[float]      # the reader's lag each sample, seconds at the published rate
    cores: float            # the hierarchy's (edge and core nodes), publisher, broker, Redis left out
    trigger_s: float
    others: tuple[float, float] = (0.0, 0.0)   # cores of the broker and Redis, and of the publisher

    @property
    def second_half(self) -> list[float]:
        return self.lag_s[len(self.lag_s) // 2:] or [float("inf")]

    @property
    def held(self) -> bool:
        """The lag stayed flat: never over two trigger intervals in the step's second half."""
        return max(self.second_half) <= 2 * self.trigger_s


@dataclass
class CapacityFigures:
    steps: list[Step] = field(default_factory=list)
    fetch_rate: float = 0.0     # readings/s librdkafka fetches the topic at (nothing decoded)
    decode_rate: float = 0.0    # readings/s librdkafka fetch + the node's decode, one process
    readings: int = 0           # readings the floors read (the whole topic)
    spark: str = "local"        # where the hierarchy's Spark ran: "local" or "cluster"
    executor_tasks: int = 0     # on a cluster: the tasks of its batches' jobs (Spark's event log)

    @property
    def sustained(self) -> float:
        held = [s.published for s in self.steps if s.held]
        return max(held, default=0.0)


def mixed_cycles(receptors: Sequence[str], cycles: int, seed: int = 7) -> list[Cycle]:
    """`cycles` read cycles of the supply-chain mix, round the receptors: pallets of 20-40 of
    TAGS tags pass each door for a few hundred cycles, read by two antennas at ~65 % a cycle with
    noisy strengths (some under the cleaning threshold), with the next door's tags overlapping
    weakly and ~1.5 ghost reads a cycle (pure, seeded).

    >>> mix = mixed_cycles(["r1", "r2"], 400)
    >>> len(mix), {r for r, _ in mix} == {"r1", "r2"}
    (400, True)
    >>> reads = [o for _, obs in mix for o in obs]
    >>> len({o.tag_id for o in reads}) > 100, any(o.read_strength < 0.2 for o in reads)
    (True, True)
    """
    rng = random.Random(seed)
    tags = [f"urn:epc:id:sgtin:0614141.812345.{n}" for n in range(TAGS)]
    ghosts = tuple(f"urn:epc:id:sgtin:0614141.999999.{n}" for n in range(TAGS))
    readers = [RfidReader(r, f"door-{i}", "edge", antennas=(Antenna(0.0, 0.0), Antenna(2.0, 0.0)),
                          ghost_rate=1.5, overlap=0.3, neighbours=(f"door-{(i + 1) % len(receptors)}",))
               for i, r in enumerate(receptors)]
    pallets = {r.location: rng.sample(tags, rng.randint(20, 40)) for r in readers}
    out = []
    for n in range(cycles):
        reader = readers[n % len(readers)]
        if rng.random() < 1 / 300:   # the pallet at this door leaves, another comes
            pallets[reader.location] = rng.sample(tags, rng.randint(20, 40))
        nearby = [(t, reader.neighbours[0]) for t in pallets[reader.neighbours[0]]]
        reads = reader.read_cycle(pallets[reader.location], nearby, n, rng, ghosts)
        out.append((reader.receptor_id, [read.observation for read in reads]))
    return out


CLUSTER_APP = "hifi"   # the application name of an in-process hierarchy (dsp.spark.session.spark_session's default)


@contextmanager
def spark_on_cluster(progress: Callable[[str], None]) -> Iterator:
    """A standalone cluster of two one-core workers, this process's Spark sessions pointed at it
    (SPARK_MASTER and its secret in the environment while it runs, and HIFI_SPARK_EVENT_LOG: what
    its batches ran is read from Spark's event log)."""
    from services.spark_cluster import local_cluster

    with tempfile.TemporaryDirectory(prefix="hifi-bench-cluster-") as workdir, \
            local_cluster(workdir, workers=2, cores_per_worker=1) as cluster:
        progress(f"a Spark standalone cluster at {cluster.master_url}: two workers of one core")
        environment = {**cluster.driver_env(), "HIFI_SPARK_EVENT_LOG": os.path.join(workdir, "event-log")}
        saved = {name: os.environ.get(name) for name in environment}
        os.environ.update(environment)
        try:
            yield cluster
        finally:
            stop_session()   # its applications end (their event logs closed) before the cluster and its folder go
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value


def run_capacity_bench(rates: Sequence[float], step_s: float, progress: Callable[[str], None],
                       spark_cluster: bool = False) -> CapacityFigures:
    """The one-edge hierarchy started with no agents; each rate offered in turn until one is not
    held. `spark_cluster`: its Spark on a standalone cluster (`spark_on_cluster`)."""
    if spark_cluster:
        with spark_on_cluster(progress):
            figures = _run_capacity(rates, step_s, progress)
            # the batches' tasks, from Spark's event log: the warm-up job every session runs left out
            work = applications(os.environ["HIFI_SPARK_EVENT_LOG"], CLUSTER_APP)
            figures.spark, figures.executor_tasks = "cluster", sum(w.tasks for w in work)
        return figures
    return _run_capacity(rates, step_s, progress)


def _run_capacity(rates: Sequence[float], step_s: float, progress: Callable[[str], None]) -> CapacityFigures:
    from services.bench.runtime import one_edge_topology
    from services.embedded import embedded_or_external
    from services.hierarchy import Hierarchy
    from wire.topics import raw_topic

    topology = one_edge_topology()
    edge = topology.edge_nodes()[0]
    receptors = [r.id for r in topology.receptors_of(edge)]
    progress(f"generating {POOL_CYCLES:,} read cycles of the supply-chain mix")
    pool = mixed_cycles(receptors, POOL_CYCLES)
    figures = CapacityFigures()
    with embedded_or_external() as servers:
        topic = raw_topic(edge)
        hierarchy = Hierarchy(topology, servers.redis_url, servers.bootstrap)
        try:
            hierarchy.start(progress)
            time.sleep(10)
            watch = _ReaderWatch(hierarchy, edge, topic, servers.bootstrap)
            for rate in rates:
                step = _step(watch, pool, rate, step_s, servers, hierarchy.trigger_ms / 1000, progress)
                figures.steps.append(step)
                progress(f"{rate:,.0f} readings/s offered, {step.published:,.0f} sent: lag in the second half "
                         f"max {max(step.second_half):.1f} s, {'held' if step.held else 'NOT held'}")
                if not step.held:
                    break
        finally:
            hierarchy.stop()
        progress("the floors: librdkafka over the same topic, fetching, then fetching and decoding")
        figures.readings, figures.fetch_rate, figures.decode_rate = floors(servers.bootstrap, topic)
    return figures


class _ReaderWatch:
    """How far the edge's stream is behind its raw topic's end, in records."""

    def __init__(self, hierarchy, edge: str, topic: str, bootstrap: str) -> None:
        from dsp.runtime.inputs import stream_key

        self.runtime = hierarchy.nodes[edge].dsp
        self.reader = stream_key()
        self.topic, self.bootstrap = topic, bootstrap

    def behind(self) -> int:
        from wire.kafka import offsets

        read = dict(self.runtime.checkpoint.positions.get(self.reader, {}))   # where its last batch ended
        ends = offsets.current_ends(self.bootstrap, [self.topic])
        return sum(max(0, end - int(read.get(key, 0))) for key, end in ends.items())


def _step(watch: _ReaderWatch, pool: list[Cycle], rate: float, step_s: float, servers, trigger_s: float,
          progress: Callable[[str], None]) -> Step:
    """One rate offered for `step_s`: the reader's lag sampled meanwhile, the hierarchy's cores."""
    from services.bench.runtime import tree_cpu_s

    records_per_reading = (1 + RESENT) / statistics.mean(len(reads) for _, reads in pool)
    progress(f"offering {rate:,.0f} readings/s for {step_s:.0f} s")
    with multiprocessing.get_context("spawn").Pool(1) as publisher:
        sending = publisher.apply_async(publish, (watch.bootstrap, watch.topic, pool, rate, step_s, RESENT))
        serving, publishing = set(getattr(servers, "pids", set())), {p.pid for p in multiprocessing.active_children()}

        def cpu() -> tuple[float, float, float]:
            return (tree_cpu_s(leave_out=serving | publishing), sum(tree_cpu_s(p) for p in serving),
                    sum(tree_cpu_s(p) for p in publishing))

        before, started, behind = cpu(), time.monotonic(), []
        while not sending.ready():
            behind.append(watch.behind())
            time.sleep(SAMPLE_S)
        spent = [(after - then) / (time.monotonic() - started) for after, then in zip(cpu(), before, strict=True)]
        published = sending.get().readings / step_s
    return Step(rate, published, [b / (published * records_per_reading) for b in behind], spent[0], trigger_s,
                (spent[1], spent[2]))


FLOOR_RECORDS = 300_000   # the floors read the topic's last records (~4 M readings of the mix)


def floors(bootstrap: str, topic: str) -> tuple[int, float, float]:
    """(readings read, readings/s librdkafka fetches them at, readings/s fetched and decoded by
    the node's reader), each one timed pass over the topic's last FLOOR_RECORDS records in this
    process, after an untimed pass that counts the readings (and warms the broker's cache for both
    alike)."""
    from dsp.spark.kafka_source import local_reader
    from dsp.spark.lane_offsets import OffsetRange
    from protos import hifi_pb2
    from wire.kafka import offsets
    from wire.kafka.ranges import read_range

    ends = offsets.current_ends(bootstrap, [topic])
    ranges = [(int(key.rpartition(":")[2]), max(0, end - FLOOR_RECORDS // len(ends)), end) for key, end in ends.items()]
    readings = sum(len(hifi_pb2.RfidReadCycle.FromString(record.value).reads)
                   for partition, start, end in ranges
                   for record in read_range(bootstrap, topic, partition, start, end) if record.value)
    started = time.monotonic()
    for partition, start, end in ranges:
        for _ in read_range(bootstrap, topic, partition, start, end):
            pass
    fetch_s, started = time.monotonic() - started, time.monotonic()
    reader = local_reader({"bootstrap": bootstrap, "topics": topic, "format": "rfid"})
    for partition, start, end in ranges:
        for _ in reader.read(OffsetRange(topic, partition, start, end)):
            pass
    return readings, readings / fetch_s, readings / (time.monotonic() - started)


def capacity_table(f: CapacityFigures) -> str:
    lines = ["offered/s  published/s  lag p50 / max in the 2nd half (s)  cores: nodes  broker+Redis  publisher  held"]
    for s in f.steps:
        lines.append(f"{s.offered:>9,.0f}  {s.published:>11,.0f}  {statistics.median(s.second_half):>13.2f} / "
                     f"{max(s.second_half):<18.2f}  {s.cores:>12.2f}  {s.others[0]:>12.2f}  {s.others[1]:>9.2f}  "
                     f"{'yes' if s.held else 'no'}")
    lines += [
        f"sustained (the highest rate held, lag <= 2 trigger intervals)   {f.sustained:,.0f} readings/s",
        f"librdkafka fetching the topic, one process (floor)             {f.fetch_rate:,.0f} readings/s",
        f"librdkafka fetching + the node's decode, one process (floor)   {f.decode_rate:,.0f} readings/s",
        f"sustained / fetch + decode                                      "
        f"{f.sustained / f.decode_rate:.0%}" if f.decode_rate else "n/a",
        f"(floors over the last {f.readings:,} readings the steps published)",
        "Spark: local mode" if f.spark == "local" else
        f"Spark: a standalone cluster of two one-core workers; its batches' jobs ran {f.executor_tasks:,} tasks"]
    return "\n".join(lines)
