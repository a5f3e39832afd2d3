"""The receptor agent: runs a scenario (edge.scenario) against the broker and writes what really
happened beside what it published.

One agent drives every receptor of a scenario: RFID readers over the supply-chain world, sensor
motes in their environment, and the Intel Lab replay. Scenario time advances in ticks (the gcd of
the read cycle and the mote periods). At each tick every running reader publishes one read cycle
(RfidReadCycle, key "<receptor>:<cycle>") and the due motes of each edge node one SensorBatch
(key "<node>:samples:<tick>", header hifi-type: sensor-batch), both on hifi.raw.<node>; the keys
are fixed by the scenario, so a retried publish is recognisably the same message.

Output directory (schema in deploy/scenarios/README.md):
  readings.jsonl  every message published, with its topic and key: any result of the hierarchy
                  can be recomputed offline from it
  truth.jsonl     what was really there: the scenario's fault plan first, then per tick the tags
                  that appeared (EPC, kind, parent) and moved, every sampled mote's true values
                  and active fault, the faulty readers, and staged events
"""

from __future__ import annotations

import json
import math
import os
import random
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from typing import IO, Any

from edge.control import ControlFollower
from edge.ground_truth import GroundTruth, replay_receptor
from edge.intel_lab import Fault, MoteSample, load_intel_lab, plan_faults, replay
from edge.motes import MoteReading
from edge.outbox import DEFAULT_SPOOL_BYTES, PRODUCER_TIMEOUTS, Outbox
from edge.scenario import Scenario
from edge.supply_chain import AWAY, SupplyChainWorld
from wire import histogram
from wire.codec import RECORD_TYPE_HEADER, SENSOR_BATCH, Histograms, Sample, encode_read_cycle, encode_sensor_batch
from wire.kafka import admin, producers
from wire.receptor_settings import wants
from wire.spool import Spool, SpooledRecord
from wire.topics import raw_topic

READINGS_FILE = "readings.jsonl"
TRUTH_FILE = "truth.jsonl"
LOG_FLUSH_S = 0.5   # the logs reach the disk at least this often while the agent runs
HISTOGRAM_PERIOD_MS = 10_000   # how often the motes send their histograms of recent values (scenario time)


def tick_ms(scenario: Scenario) -> int:
    """The agent's time step: every read cycle and every mote sample falls on one."""
    return math.gcd(scenario.cycle_ms, *(m.period_ms for m in scenario.motes))


@dataclass
class AgentStats:
    ticks: int = 0
    cycles: int = 0
    readings: int = 0
    samples: int = 0
    held: int = 0          # samples the motes held back: no running query could use them (the sensor proxy)
    settings_refused: int = 0   # control records the agent could not take (edge.control)
    messages: int = 0
    payload_bytes: int = 0
    started_ms: int = 0
    stopped_ms: int = 0
    wall_s: float = 0.0
    max_late_ms: int = 0   # paced runs: the latest a tick started after its due time
    late_ticks: int = 0    # paced runs: ticks that started more than a tick late
    spooled: int = 0       # messages kept on disk while the broker did not take them (edge.outbox)
    forwarded: int = 0     # of those, sent since
    spool_dropped: int = 0   # messages a full spool refused


@dataclass
class _Tick:
    """What one tick published and what was true during it, before it is written out."""

    t: int
    messages: list[tuple[str, bytes, bytes, list]] = field(default_factory=list)   # topic, key, value, headers
    readings: list[dict[str, Any]] = field(default_factory=list)
    motes: dict[str, dict[str, Any]] = field(default_factory=dict)


class _RunLogs:
    """readings.jsonl and truth.jsonl, appended to tick by tick and flushed at least every
    LOG_FLUSH_S (readers of the live logs: `--reference`)."""

    def __init__(self, readings_path: str, truth_path: str) -> None:
        self._readings: IO[str] = open(readings_path, "a")  # noqa: SIM115 - closed by close()
        self._truth: IO[str] = open(truth_path, "a")  # noqa: SIM115
        self._flushed = time.monotonic()

    def truth(self, line: dict[str, Any]) -> None:
        self._truth.write(json.dumps(line) + "\n")

    def tick(self, readings: list[dict[str, Any]], truth: dict[str, Any]) -> None:
        for line in readings:
            self._readings.write(json.dumps(line) + "\n")
        self.truth(truth)
        if time.monotonic() - self._flushed >= LOG_FLUSH_S:
            self._readings.flush()
            self._truth.flush()
            self._flushed = time.monotonic()

    def close(self) -> None:
        self._readings.close()
        self._truth.close()


class ReceptorAgent:
    """Runs a scenario until stopped or for a duration; `run()` blocks, `start()` runs a thread.

    `speed` is scenario seconds per wall second (0: as fast as the machine can go). Readings are
    stamped with scenario time, which starts at the scenario's anchor (edge.scenario); a paced run
    waits for the anchor on the wall clock.
    """

    def __init__(self, scenario: Scenario, bootstrap: str, out_dir: str | None = None, speed: float = 1.0,
                 spool_bytes: int = DEFAULT_SPOOL_BYTES) -> None:
        """`spool_bytes`: the bound of the spool on disk (`<out_dir>/spool`, else a temporary
        directory) that holds what the broker does not take while it is unreachable."""
        if speed < 0:
            raise ValueError(f"speed must be positive, or 0 for as fast as possible (got {speed})")
        self.scenario = scenario
        self.bootstrap = bootstrap
        self.speed = speed
        self.out_dir = out_dir
        self.spool_dir = os.path.join(out_dir, "spool") if out_dir else tempfile.mkdtemp(prefix="hifi-spool-")
        self.spool_bytes = spool_bytes
        self.stats = AgentStats()
        self.world = SupplyChainWorld(scenario.world)
        self.tick_ms = tick_ms(scenario)
        self.start_ms = scenario.world.start_ms
        if out_dir:
            os.makedirs(out_dir, exist_ok=True)
            for name in (READINGS_FILE, TRUTH_FILE):   # exist from now on, even before the first tick
                open(os.path.join(out_dir, name), "a").close()
        lab_faults: list[Fault] = []
        self._replay: Iterator[MoteSample] = iter(())
        self.replay_motes = 0
        if scenario.replay is not None:
            lab = load_intel_lab(scenario.replay.data)
            self.replay_motes = len(lab)
            lab_faults = plan_faults(lab, scenario.seed, scenario.replay.fault_share)
            self._replay = replay(lab, lab_faults, self.start_ms, scenario.replay.speed, scenario.seed)
        self._pending_replay: MoteSample | None = next(self._replay, None)
        self._ghosts: tuple[str, ...] = ()   # every tag of the world so far: the ghost reads' pool
        self.truth = GroundTruth(scenario, self.world, self.tick_ms, lab_faults)
        self._seq: dict[str, int] = defaultdict(int)
        self.control: ControlFollower | None = None   # the sensor proxies' settings (while running)
        # each mote's recent values (wire.histogram), per node: sent every HISTOGRAM_PERIOD_MS
        self._histograms: dict[str, Histograms] = defaultdict(dict)
        self._histograms_sent: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def readings_path(self) -> str:
        return os.path.join(self.out_dir or "", READINGS_FILE)

    @property
    def truth_path(self) -> str:
        return os.path.join(self.out_dir or "", TRUTH_FILE)

    @property
    def receptors(self) -> int:
        return self.scenario.receptors + self.replay_motes   # replay motes come from the data

    def histograms(self, node: str) -> Histograms:
        """The recent values of the node's motes, as they send them (wire.histogram)."""
        return {key: list(counts) for key, counts in self._histograms[node].items()}

    def nodes(self) -> list[str]:
        s = self.scenario
        found = {r.edge_node for r in s.readers} | {m.edge_node for m in s.motes}
        if s.replay is not None:
            found.add(s.replay.node)
        return sorted(found)

    # ------------------------------------------------------------ running

    def start(self, duration_s: float | None = None) -> None:
        self._thread = threading.Thread(target=self.run, args=(duration_s,), name="hifi-agent", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def run(self, duration_s: float | None = None) -> AgentStats:
        admin.ensure_topics(self.bootstrap, [raw_topic(n) for n in self.nodes()])
        producer = producers.make_producer(self.bootstrap, **PRODUCER_TIMEOUTS)
        outbox = Outbox(producer, Spool(self.spool_dir, self.spool_bytes))
        self.control = ControlFollower(self.bootstrap, self.nodes())
        rng = random.Random(self.scenario.seed)
        logs = _RunLogs(self.readings_path, self.truth_path) if self.out_dir else None
        if logs is not None:
            logs.truth({"t": self.start_ms, "plan": self.truth.plan()})
        t = self.start_ms
        end_ms = self.start_ms + int(duration_s * 1000) if duration_s else None
        wall_start: float | None = None   # when the first tick went out (a paced run waits for it)
        self.stats.started_ms = t
        try:
            while not self._stop.is_set() and (end_ms is None or t < end_ms):
                if self.speed > 0:
                    # The scenario starts at its anchor on the wall clock: a reading never goes out
                    # before the time it is stamped with (a query that starts at T must be able to
                    # take every reading stamped after T from the offsets it saw at T).
                    due = (self.start_ms + (t - self.start_ms) / self.speed) / 1000
                    delay = due - time.time()
                    if delay > 0 and self._stop.wait(delay):
                        break
                    late_ms = int((time.time() - due) * 1000)
                    self.stats.max_late_ms = max(self.stats.max_late_ms, late_ms)
                    self.stats.late_ticks += late_ms > self.tick_ms
                if wall_start is None:
                    wall_start = time.time()
                self.control.poll()   # the motes obey their proxy's newest settings from this tick on
                tick = self._tick(t, rng)
                sent_ms = int(time.time() * 1000)
                outbox.send([SpooledRecord(topic, key, value, headers, sent_ms)
                             for topic, key, value, headers in tick.messages])
                self.stats.messages += len(tick.messages)
                self.stats.payload_bytes += sum(len(key) + len(value) for _, key, value, _ in tick.messages)
                self._count(outbox)
                if logs is not None:
                    logs.tick(tick.readings, self.truth.line(t, tick.motes))
                self.stats.ticks += 1
                t += self.tick_ms
        finally:
            outbox.forward()   # what is still spooled then is taken up by the next agent on the directory
            self._count(outbox)
            producer.close(timeout=5)
            self.stats.settings_refused = self.control.refused
            self.control.close()
            self.control = None
            if logs is not None:
                logs.close()
            self.stats.stopped_ms = t
            self.stats.wall_s = time.time() - wall_start if wall_start is not None else 0.0
        return self.stats

    def _count(self, outbox: Outbox) -> None:
        self.stats.spooled, self.stats.forwarded = outbox.stats.spooled, outbox.stats.forwarded
        self.stats.spool_dropped = outbox.stats.dropped

    def offline_readings(self, duration_s: float) -> Iterator[dict[str, Any]]:
        """The readings.jsonl lines a run of `duration_s` publishes (the same draws for the seed),
        computed with no broker and no pacing: what benchmarks score cleaning on."""
        rng = random.Random(self.scenario.seed)
        for t in range(self.start_ms, self.start_ms + int(duration_s * 1000), self.tick_ms):
            yield from self._tick(t, rng).readings

    def offline_fire_events(self, duration_s: float) -> list[dict[str, Any]]:
        """The fires and people in danger a run of `duration_s` stages (as its truth.jsonl tells
        them), computed with no broker and no pacing."""
        return [event for t in range(self.start_ms, self.start_ms + int(duration_s * 1000), self.tick_ms)
                for event in self.truth.fire_events(t)]

    # ------------------------------------------------------------ one tick

    def _tick(self, t: int, rng: random.Random) -> _Tick:
        tick = _Tick(t)
        self.world.advance_to(t)
        if (t - self.start_ms) % self.scenario.cycle_ms == 0:
            self._read_cycles(tick, rng)
        samples: dict[str, list[Sample]] = defaultdict(list)
        held: dict[str, list[Sample]] = defaultdict(list)   # taken, not sent: no query could use them
        for mote in self.scenario.motes:
            if mote.due(t, self.start_ms):
                reading = mote.sample(self.scenario.environment, t, self.start_ms, rng)
                truth = reading.truth if reading else self.scenario.environment.truth(mote.x, mote.y, t, self.start_ms)
                fault = mote.fault.kind if mote.fault is not None and mote.fault.active(t) else ""
                tick.motes[mote.receptor_id] = {"true": truth, "fault": fault}
                if reading is not None:
                    self._route(mote.edge_node, self._sample(reading), samples, held)
        while self._pending_replay is not None and self._pending_replay.t_ms <= t:
            lab = self._pending_replay
            assert self.scenario.replay is not None
            receptor = replay_receptor(lab.mote_id)
            tick.motes[receptor] = {"true": lab.true_values, "fault": lab.fault}
            self._route(self.scenario.replay.node, self._sample(MoteReading(receptor, lab.t_ms, lab.values, {})),
                        samples, held)
            self._pending_replay = next(self._replay, None)
        tick_number = (t - self.start_ms) // self.tick_ms
        for node in sorted(samples.keys() | held.keys()):
            batch, version = samples[node], self.control.version(node) if self.control is not None else 0
            histograms = None
            if t - self._histograms_sent.get(node, t - HISTOGRAM_PERIOD_MS) >= HISTOGRAM_PERIOD_MS:
                histograms, self._histograms_sent[node] = self._histograms[node], t
            # sent even when every mote held its sample back: the batch's time moves the node's event time
            key, value = encode_sensor_batch(node, tick_number, batch, t, version, histograms)
            topic = raw_topic(node)
            tick.messages.append((topic, key, value, [(RECORD_TYPE_HEADER, SENSOR_BATCH)]))
            line = {"t": t, "node": node, "topic": topic, "key": key.decode(), "samples": [asdict(s) for s in batch]}
            if held[node]:
                line["held"] = [asdict(s) for s in held[node]]
            if version:
                line["settings_version"] = version
            tick.readings.append(line)
            self.stats.samples += len(batch)
            self.stats.held += len(held[node])
        return tick

    def _route(self, node: str, sample: Sample, samples: dict[str, list[Sample]],
               held: dict[str, list[Sample]]) -> None:
        """Send the sample with the quantities the queries read, or hold it back when its mote's
        settings say no query could use it; its mote's histograms count it whole either way."""
        for quantity, value in sample.values.items():
            if quantity in histogram.RANGES:
                counts = self._histograms[node].setdefault((sample.receptor_id, quantity), histogram.empty())
                histogram.add(counts, quantity, value)
        if self.control is None:
            samples[node].append(sample)
        elif wants(self.control.rule(node, sample.receptor_id), sample.values, sample.timestamp_ms):
            samples[node].append(replace(sample, values=self.control.sent(node, sample.receptor_id, sample.values)))
        else:
            held[node].append(sample)

    def _read_cycles(self, tick: _Tick, rng: random.Random) -> None:
        t = tick.t
        cycle = (t - self.start_ms) // self.scenario.cycle_ms
        at: dict[str, list[str]] = {}

        def tags_at(location: str) -> list[str]:
            if location not in at:
                at[location] = self.world.tags_at(location, t)
            return at[location]

        if len(self._ghosts) != len(self.world.tags):   # the world only grows
            self._ghosts = tuple(self.world.tags)
        for reader in self.scenario.readers:
            if not reader.cycles_at(t):
                continue
            present = tags_at(reader.location)
            nearby = [(tag, where) for where in reader.neighbours for tag in tags_at(where)]
            reads = reader.read_cycle(present, nearby, t, rng, self._ghosts)
            key, value = encode_read_cycle(reader.receptor_id, cycle, t, [r.observation for r in reads])
            topic = raw_topic(reader.edge_node)
            tick.messages.append((topic, key, value, []))
            tick.readings.append({
                "t": t, "receptor": reader.receptor_id, "node": reader.edge_node, "location": reader.location,
                "present": present,
                "reads": [[r.observation.tag_id, r.observation.antenna, r.observation.read_strength] for r in reads],
                "kinds": ["ghost" if r.ghost else "overlap" if r.overlap else "" for r in reads],
                "topic": topic, "key": key.decode()})
            self.stats.cycles += 1
            self.stats.readings += len(reads)

    def _sample(self, reading: MoteReading) -> Sample:
        self._seq[reading.receptor_id] += 1
        return Sample(reading.receptor_id, self._seq[reading.receptor_id], reading.t_ms, reading.values)

def read_jsonl(path: str, until_ms: int | None = None) -> list[dict[str, Any]]:
    """The lines of a log; `until_ms`: only those up to that time (the agent writes its lines in
    tick order, so reading stops at the first later one: a long run's log is not parsed whole)."""
    lines = []
    with open(path) as fh:
        for text in fh:
            if not text.strip():
                continue
            line = json.loads(text)
            if until_ms is not None and line["t"] > until_ms:
                break
            lines.append(line)
    return lines


class JsonlLog:
    """A growing log read on from where the last read stopped: a judge checking many queries against
    one run's log parses each line once (read_jsonl from the top took 18 of the 190 s a
    test module's checks spent)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.lines: list[dict[str, Any]] = []
        self._times: list[int] = []
        self._offset = 0

    def until(self, until_ms: int) -> list[dict[str, Any]]:
        """read_jsonl(path, until_ms): the lines before the first one later than `until_ms`."""
        self._read_on()
        later = next((i for i, t in enumerate(self._times) if t > until_ms), len(self._times))
        return self.lines[:later]

    def _read_on(self) -> None:
        if os.path.getsize(self.path) < self._offset:   # written anew (another run): from the top
            self.lines, self._times, self._offset = [], [], 0
        with open(self.path, "rb") as fh:
            fh.seek(self._offset)
            data = fh.read()
        whole = data.rfind(b"\n") + 1   # a line being written is read the next time
        for text in data[:whole].splitlines():
            if text.strip():
                line = json.loads(text)
                self.lines.append(line)
                self._times.append(line["t"])
        self._offset += whole


def tag_locations(truth: list[dict[str, Any]]) -> Iterator[tuple[int, dict[str, str]]]:
    """(t, {tag: location}) per tick, replayed from truth.jsonl's moves (tags away are left out)."""
    where: dict[str, str] = {}
    for line in truth:
        for tag, location in line.get("moves", ()):
            if location == AWAY:
                where.pop(tag, None)
            else:
                where[tag] = location
        if "plan" not in line:
            yield line["t"], dict(where)
