"""`hifi bench chaos`: faults injected into a hierarchy of node processes, and what each costs.

The topology (CHAOS: core <- agg <- edge-a, edge-b; one reader per edge) runs as `hifi up
--processes` runs it: `hifi node` processes under services.supervisor, which starts a node that
dies again; the placement service and the receptor agents run in this process. One query
(reads per receptor per 2 s windows, answered at agg, the two edges' lowest common ancestor)
runs throughout, and the faults come one after another, each followed by `settle_s` of normal running:

  kill -9 of an edge           SIGKILL of edge-a
  kill -9 of an aggregation    SIGKILL of agg, the query's root
  crash between flush and fence  edge-b started with HIFI_FAULT=after-flush@<t> (dsp.runtime.faults): it
                               dies right after a micro-batch's rows went out, before recording it
  broker unreachable 30 s      the embedded broker frozen (SIGSTOP) for BROKER_DOWN_S, then let
                               go: the agents spool what it does not take (edge.outbox) and
                               forward it; the nodes' reads and writes fail and are retried
  Redis restarted              the embedded Redis killed and started again from its append-only file
  parent dead 60 s             SIGKILL of agg (the edges' parent) kept down for PARENT_DOWN_S: after
                               the topology's adopt_after (5 s here) the core adopts its parts
                               (services.adoption) and results flow on; agg, started again, takes
                               them back at a window boundary

For each: the seconds from the node's restart (the broker's return; the fault, for Redis and the
dead parent) until the query emits a window that began after the fault; and over the windows from
the fault to the next one: readings published (the agents' log) vs readings the query counted,
duplicated windows (a window and receptor emitted twice), and whether every window equals the
fault-free answer (the count over the log, which is what any run with the same readings must give):
as the project's own reader gets them (it drops a batch it has seen), and as a reader outside the
project does (`committed_rows`: librdkafka at isolation.level=read_committed, every record of the
results topic decoded as it stands, nothing dropped).
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from services.bench.report import figures_table

CHAOS = """
name: chaos
parameters: {strength_T: 0.2, level_lateness: 2 seconds, adopt_after: 5 seconds}
nodes:
  - {id: chaos-core, tier: core}
  - {id: chaos-agg, tier: aggregation, parent: chaos-core}
  - {id: chaos-edge-a, tier: edge, parent: chaos-agg}
  - {id: chaos-edge-b, tier: edge, parent: chaos-agg}
receptors:
  - {id: chaos-a-r1, kind: rfid, node: chaos-edge-a, location: inbound-dock, area: north, x: 0.0, y: 0.0}
  - {id: chaos-b-r1, kind: rfid, node: chaos-edge-b, location: outbound-door, area: north, x: 9.0, y: 0.0}
relations:
  - {name: receptor_locations, columns: [[receptor_id, string], [location, string]], replicas: ["*"]}
views: []
scenario:
  name: chaos
  seed: 11
  cycle: 200 ms
  world: {pallets: 4, arrival_gap: 8 seconds, dwell: 8 seconds, repeat: true}
  readers:
    - {id: chaos-a-r1, node: chaos-edge-a, location: inbound-dock, antennas: 2}
    - {id: chaos-b-r1, node: chaos-edge-b, location: outbound-door, antennas: 2}
"""
QUERY = "SELECT receptor_id, count(*) AS reads FROM rfid_stream [range by '2 seconds'] GROUP BY receptor_id"
WINDOW_MS = 2000
EDGE, AGG, OTHER_EDGE = "chaos-edge-a", "chaos-agg", "chaos-edge-b"
BROKER_DOWN_S = 30.0
PARENT_DOWN_S = 60.0


BROKER_DOWN = f"broker unreachable for {BROKER_DOWN_S:.0f} s"
PARENT_DOWN = f"the edges' parent dead for {PARENT_DOWN_S:.0f} s (re-parented and back)"
FAULTS = ("kill -9 of an edge", "kill -9 of an aggregation", "crash between flush and fence", BROKER_DOWN,
          "Redis restarted", PARENT_DOWN)


@dataclass
class FaultFigures:
    fault: str
    at_ms: int
    back_s: float | None          # from the node's restart (or the fault) to a window that began after the fault
    since: str = "it was back"    # what back_s is counted from
    note: str = ""
    published: int = 0            # readings in the windows of its period, by the agents' log
    counted: int = 0              # the same windows as the query counted them
    duplicates: int = 0           # (window, receptor) emitted more than once
    windows: int = 0
    equal: int = 0                # windows equal to the fault-free answer
    committed_duplicates: int = 0   # the same, as a read_committed consumer that drops nothing reads them
    committed_equal: int = 0


class Results:
    """The query's rows as a reader gets them (repeats of a batch dropped: wire.codec)."""

    def __init__(self) -> None:
        self.rows: list[tuple[int, str, int, int]] = []   # window start ms, receptor, reads, emitted ms
        self._lock = threading.Lock()

    def add(self, _topic: str, row: dict) -> None:
        with self._lock:
            self.rows.append((int(row["window_start"].timestamp() * 1000), row["receptor_id"], int(row["reads"]),
                              int(row["_emitted_ms"])))

    def first_after(self, since_ms: int) -> int | None:
        """When the first window that began at or after `since_ms` was emitted."""
        with self._lock:
            return min((emitted for start, _, _, emitted in self.rows if start >= since_ms), default=None)


def committed_rows(bootstrap: str, topic: str, timeout_s: float = 60.0) -> list[tuple[int, str, int, int]]:
    """Every row of `topic` as a read_committed librdkafka consumer reads it, repeats and all:
    (window start ms, receptor, reads, emitted ms), decoded from each RowBatch as it stands."""
    from confluent_kafka import Consumer, TopicPartition

    from protos import hifi_pb2
    from wire.kafka.config import librdkafka_client

    consumer = Consumer({**librdkafka_client(bootstrap), "group.id": "hifi-chaos-judge", "enable.auto.commit": False,
                         "isolation.level": "read_committed", "enable.partition.eof": True})
    rows: list[tuple[int, str, int, int]] = []
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        left, deadline = set(partitions), time.monotonic() + timeout_s
        while left and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is None:
                continue
            if message.error() is not None:
                left.discard(message.partition())   # the end (partition EOF) or a read error
                continue
            batch = hifi_pb2.RowBatch.FromString(message.value())
            at = {name: n for n, name in enumerate(batch.columns)}
            for row in batch.rows if at else ():
                values = row.values
                rows.append((values[at["window_start"]].ts_ms, values[at["receptor_id"]].s,
                             values[at["reads"]].i, batch.emitted_ms))
    finally:
        consumer.close()
    return rows


def _published(readings_path: str) -> Counter:
    """Readings per (window start, receptor) by the agents' log of every cycle they published."""
    counts: Counter = Counter()
    with open(readings_path) as fh:
        for line in fh:
            cycle = json.loads(line)
            if "reads" in cycle:
                counts[(cycle["t"] // WINDOW_MS * WINDOW_MS, cycle["receptor"])] += len(cycle["reads"])
    return counts


def run_chaos_bench(settle_s: float, progress: Callable[[str], None]) -> list[FaultFigures]:
    from glue.topology import parse_topology
    from services.embedded import embedded_or_external
    from services.hierarchy import Hierarchy, follow_results

    workdir = tempfile.mkdtemp(prefix="hifi-chaos-")
    path = os.path.join(workdir, "chaos.yaml")
    with open(path, "w") as fh:
        fh.write(CHAOS)
    topology = parse_topology(CHAOS, path)
    stop = threading.Event()
    with embedded_or_external() as servers:
        if len(servers.pids) < 2:
            raise RuntimeError("hifi bench chaos kills and freezes its Redis and broker: run it without "
                               "HIFI_REDIS_URL and HIFI_KAFKA_BOOTSTRAP (it starts its own)")
        # the nodes as processes under the supervisor, as `hifi up --processes` runs them
        hierarchy = Hierarchy(topology, servers.redis_url, servers.bootstrap, state_dir=workdir, processes=True)
        try:
            hierarchy.start(progress)
            supervisor = hierarchy.supervisor
            assert supervisor is not None
            agent = hierarchy.start_agents()
            plan = hierarchy.placement.submit(QUERY)
            results = Results()
            threading.Thread(target=follow_results, args=(servers.bootstrap, [plan.result_topic], stop, results.add),
                             daemon=True).start()
            _wait(lambda: results.first_after(0) is not None, 300, "the query's first window")
            progress(f"query {plan.query_id} answers at {plan.placement.root}; the faults begin")
            time.sleep(settle_s)

            def restarted(node: str, after_s: float) -> float:
                return _wait(lambda: next((s for s in supervisor.nodes[node].starts if s >= after_s), None), 120,
                             f"{node} to be started again")

            figures = []
            for fault in FAULTS:
                progress(f"fault: {fault}")
                at = time.time()
                if fault == "kill -9 of an edge":
                    supervisor.kill(EDGE)
                    back_from = restarted(EDGE, at)
                elif fault == "kill -9 of an aggregation":
                    supervisor.kill(AGG)
                    back_from = restarted(AGG, at)
                elif fault == "crash between flush and fence":
                    crash_at = int((time.time() + 60) * 1000)   # after its start: the restarted process runs on
                    supervisor.replace(OTHER_EDGE, {"HIFI_FAULT": f"after-flush@{crash_at}"})
                    _wait(lambda: supervisor.nodes[OTHER_EDGE].exits and
                          supervisor.nodes[OTHER_EDGE].exits[-1] != 0, 180, "the injected crash")
                    at = crash_at / 1000
                    back_from = restarted(OTHER_EDGE, at)
                elif fault == BROKER_DOWN:
                    servers.freeze_broker()
                    time.sleep(BROKER_DOWN_S)
                    servers.thaw_broker()
                    back_from = time.time()
                elif fault == PARENT_DOWN:
                    supervisor.kill(AGG, down_s=PARENT_DOWN_S)
                    back_from = at
                else:
                    servers.restart_redis(down_s=2)
                    back_from = at
                emitted = _wait(lambda at=at: results.first_after(int(at * 1000)), 300, "results after the fault")
                figures.append(FaultFigures(fault, int(at * 1000), emitted / 1000 - back_from,
                                            "the fault" if back_from == at else "it was back"))
                if fault == PARENT_DOWN:
                    figures[-1].note = _moved_and_back(hierarchy.mdr, at)
                progress(f"{fault}: results again {figures[-1].back_s:.1f} s after {figures[-1].since}"
                         f"{'; ' + figures[-1].note if figures[-1].note else ''}")
                time.sleep(settle_s)
            agent.stop()
            time.sleep(10)   # the last windows close and come up
            _judge(figures, results.rows, committed_rows(servers.bootstrap, plan.result_topic),
                   _published(agent.readings_path), plan.start_ms or 0)
            return figures
        finally:
            stop.set()
            hierarchy.stop()


def _by_window(rows: list[tuple[int, str, int, int]]) -> dict[tuple[int, str], list[int]]:
    found: dict[tuple[int, str], list[int]] = defaultdict(list)
    for start, receptor, reads, _ in rows:
        found[(start, receptor)].append(reads)
    return found


def _judge(figures: list[FaultFigures], rows: list, committed: list, published: Counter, start_ms: int) -> None:
    """Each fault's period (from it to the next fault; the last: to the last window emitted)
    against the fault-free answer, window by window: as the project's reader got the rows and as
    a read_committed consumer reads them."""
    emitted, seen = _by_window(rows), _by_window(committed)
    last = max(start for start, _ in emitted) if emitted else 0
    first = (start_ms // WINDOW_MS + 1) * WINDOW_MS   # the query's first whole window
    for n, figure in enumerate(figures):
        low = max(first, figure.at_ms // WINDOW_MS * WINDOW_MS)
        high = figures[n + 1].at_ms // WINDOW_MS * WINDOW_MS if n + 1 < len(figures) else last + 1
        keys = {k for k in (*published, *emitted) if low <= k[0] < high and k[0] <= last}
        figure.windows = len(keys)
        figure.published = sum(published[k] for k in keys)
        figure.counted = sum(sum(emitted.get(k, [])) for k in keys)
        figure.duplicates = sum(len(emitted.get(k, [])) > 1 for k in keys)
        figure.equal = sum(emitted.get(k, []) == ([published[k]] if published[k] else []) for k in keys)
        figure.committed_duplicates = sum(len(seen.get(k, [])) > 1 for k in keys)
        figure.committed_equal = sum(seen.get(k, []) == ([published[k]] if published[k] else []) for k in keys)


def _moved_and_back(mdr, at: float) -> str:
    """When the core adopted agg's parts, and when agg had them back (both from the fault)."""
    adopted = _wait(lambda: (found := mdr.adoptions().get(AGG)) and found.parts and found, 120,
                    "the core to adopt the dead parent's parts")
    _wait(lambda: AGG not in mdr.adoptions(), PARENT_DOWN_S + 180, "the parent to take its parts back")
    return (f"adopted by {adopted.adopter} {adopted.since_ms / 1000 - at:.1f} s after the fault, "
            f"handed back {time.time() - at:.0f} s after it")


def _wait(condition: Callable[[], object], timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise TimeoutError(f"chaos bench: timed out after {timeout_s:.0f} s waiting for {what}")


def chaos_table(figures: list[FaultFigures]) -> str:
    rows = []
    for f in figures:
        back = f"{f.back_s:.1f} s" if f.back_s is not None else "never"
        note = f"; {f.note}" if f.note else ""
        rows.append((f.fault, f"results again {back} after {f.since}{note}; readings published {f.published:,}, "
                              f"counted {f.counted:,}; duplicated windows {f.duplicates}; windows equal to the "
                              f"fault-free answer {f.equal}/{f.windows}; a read_committed consumer: duplicated "
                              f"{f.committed_duplicates}, equal {f.committed_equal}/{f.windows}"))
    return figures_table(rows)
