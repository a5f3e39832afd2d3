"""The receptor agent: drives emulated readers in real time, publishes, and logs ground truth.

One agent process drives every reader of a topology. Each read cycle of each reader is one
RfidReadCycle message on `hifi.raw.<edge-node>`, keyed "<receptor>:<cycle>".

Ground truth (JSON Lines, one object per reader cycle; `truth_path`):
  {"t": cycle time (epoch ms), "receptor": id, "node": edge node, "location": reader location,
   "present": [tag ids truly in range], "reads": [[tag, antenna, strength], ...],
   "topic": topic, "key": message key}
so every reading can be scored against where its tag really was, and any result of the hierarchy
can be recomputed offline from the readings actually emitted.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, Any

from dsp.codec import encode_read_cycle
from edge.reader import ReaderModel
from edge.world import World, sgtin_like_ids
from glue import bus
from glue.topology import Topology, TopologyError, duration_ms


@dataclass(frozen=True)
class Scenario:
    world: World
    readers: tuple[ReaderModel, ...]
    cycle_ms: int
    seed: int


def scenario_from_topology(topology: Topology) -> Scenario:
    spec: dict[str, Any] = topology.scenario
    seed = int(spec.get("seed", 1))
    cycle_ms = duration_ms(spec.get("cycle", "200 ms"))
    readers = []
    strength = spec.get("strength", {}) or {}
    for receptor in topology.receptors:
        if receptor.kind != "rfid":
            continue
        rate = float(receptor.options.get("read_rate", spec.get("read_rate", 0.7)))
        try:
            readers.append(ReaderModel(receptor.id, receptor.location, receptor.node, rate,
                                       float(strength.get("mean", 0.6)), float(strength.get("stddev", 0.1)),
                                       int(receptor.options.get("antennas", 1))))
        except ValueError as exc:
            raise TopologyError(f"scenario: {exc}") from None
    if cycle_ms <= 0:
        raise TopologyError("scenario: cycle must be positive")
    locations = tuple(dict.fromkeys(r.location for r in readers))
    world = World(seed, sgtin_like_ids(int(spec.get("tags", 16))), locations,
                  duration_ms(spec.get("dwell", "4 seconds")), float(spec.get("away_share", 0.2)))
    return Scenario(world, tuple(readers), cycle_ms, seed)


@dataclass
class AgentStats:
    cycles: int = 0
    readings: int = 0
    started_ms: int = 0
    stopped_ms: int = 0
    per_node_readings: dict[str, int] = field(default_factory=dict)


class ReaderAgent:
    """Runs a scenario's readers until stopped; `run()` blocks, `start()` runs it in a thread."""

    def __init__(self, scenario: Scenario, bootstrap: str, truth_path: str | None = None,
                 on_cycle: Callable[[int], None] | None = None) -> None:
        self.scenario = scenario
        self.bootstrap = bootstrap
        self.truth_path = truth_path
        self.on_cycle = on_cycle
        self.stats = AgentStats()
        if truth_path:
            open(truth_path, "a").close()  # exists from now on, even before the first cycle
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, duration_s: float | None = None) -> None:
        self._thread = threading.Thread(target=self.run, args=(duration_s,), name="hifi-agent", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def run(self, duration_s: float | None = None) -> AgentStats:
        scenario = self.scenario
        bus.ensure_topics(self.bootstrap, sorted({bus.raw_topic(r.edge_node) for r in scenario.readers}))
        producer = bus.make_producer(self.bootstrap)
        rng = random.Random(scenario.seed)
        truth: IO[str] | None = open(self.truth_path, "a") if self.truth_path else None  # noqa: SIM115
        cycle_ms = scenario.cycle_ms
        # Cycles sit on a grid aligned to the epoch, so windows and cycles line up across runs.
        next_t = (int(time.time() * 1000) // cycle_ms + 1) * cycle_ms
        self.stats.started_ms = next_t
        end_ms = next_t + int(duration_s * 1000) if duration_s else None
        cycle = 0
        try:
            while not self._stop.is_set() and (end_ms is None or next_t < end_ms):
                delay = next_t / 1000 - time.time()
                if delay > 0 and self._stop.wait(delay):
                    break
                for reader in scenario.readers:
                    present = scenario.world.tags_at(reader.location, next_t)
                    reads = reader.read_cycle(present, rng)
                    key, value = encode_read_cycle(reader.receptor_id, cycle, next_t, reads)
                    topic = bus.raw_topic(reader.edge_node)
                    producer.send(topic, key=key, value=value)
                    self.stats.readings += len(reads)
                    self.stats.per_node_readings[reader.edge_node] = (
                        self.stats.per_node_readings.get(reader.edge_node, 0) + len(reads))
                    if truth is not None:
                        truth.write(json.dumps({
                            "t": next_t, "receptor": reader.receptor_id, "node": reader.edge_node,
                            "location": reader.location, "present": present,
                            "reads": [[r.tag_id, r.antenna, r.read_strength] for r in reads],
                            "topic": topic, "key": key.decode(),
                        }) + "\n")
                self.stats.cycles += 1
                cycle += 1
                if self.on_cycle is not None:
                    self.on_cycle(cycle)
                next_t += cycle_ms
        finally:
            producer.flush()
            producer.close(timeout=5)
            if truth is not None:
                truth.close()
            self.stats.stopped_ms = next_t
        return self.stats


def read_truth(path: str) -> list[dict[str, Any]]:
    with open(path) as fh:
        return [json.loads(line) for line in fh if line.strip()]
