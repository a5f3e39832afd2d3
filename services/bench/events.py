"""`hifi bench events`: a topology's standing event views against the events its scenario stages.

The detectors are the topology's views marked `alert: <kind>` whose SQL is an event pattern; the
kind names the staged events they look for in the agents' ground truth (`truth.jsonl`: shoplifting,
pallet-missing, person-in-danger). A detection is right when the truth holds an event of its kind
for its tag within TOLERANCE_MS of its end, and a staged event is found when a detection is right
about it: an alert repeated for one event is right, not a second event (a pattern partitioned by
room matches a person in a burning room again every second). Only what could be decided in
the run is scored: staged events and detections up to HORIZON_MS before the readings end (a trailing
NOT is only decided WITHIN after its first row).

Live (the default): the hierarchy runs for the duration; each row of an event view is an alert,
raised when its RowBatch was emitted. Latency is from the match's end (its last reading; for a
pattern ending in NOT, the end of its WITHIN) to that alert. `--offline`: the same SQL evaluated
centrally by the reference evaluator over the readings the agents would publish, no broker or
Spark: what the patterns themselves get right, apart from the runtime.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from dsp.plan import EVENT_TIME, Match
from edge.agent import read_jsonl
from edge.scenario import Scenario
from edge.supply_chain import StagedEvent
from glue.analyzer import analyze
from glue.catalog import Catalog
from glue.reference import Reference
from glue.standing import StandingView, standing_views, topology_catalog
from glue.topology import Topology
from services.bench.report import figures_table, percentile
from services.judge import as_ms

TOLERANCE_MS = 60_000
HORIZON_MS = 60_000
OFFLINE_START_MS = 1_700_000_000_000   # a whole number of every window and pane


@dataclass(frozen=True)
class Detector:
    view: str
    node: str
    topic: str
    kind: str                 # the staged events' kind it detects (the view's alert)
    within_ms: int
    trailing_not: bool        # matched once WITHIN has passed, not at a reading
    tag_column: str           # the output column naming the tag the event is about


@dataclass(frozen=True)
class Detection:
    kind: str
    tag_id: str
    end_ms: int                       # the match's end (EVENT_TIME)
    alert_ms: int | None = None       # when the node emitted it (live runs)


@dataclass(frozen=True)
class KindScore:
    kind: str
    staged: int
    detected: int
    right: int            # detections that match a staged event
    found: int            # staged events some detection matches
    latency_p50_ms: float | None
    latency_p95_ms: float | None
    within_ms: int
    trailing_not: bool

    @property
    def precision(self) -> float | None:
        return self.right / self.detected if self.detected else None

    @property
    def recall(self) -> float | None:
        return self.found / self.staged if self.staged else None


def _match_of(standing: StandingView) -> Match | None:
    plan = standing.tasks[-1].plan if standing.tasks else None
    while plan is not None and not isinstance(plan, Match):
        plan = getattr(plan, "child", None)
    return plan


def detectors(topology: Topology, standing: list[StandingView] | None = None) -> list[Detector]:
    """The topology's alerting event views, with what scoring needs of their patterns."""
    found = []
    for view in standing if standing is not None else standing_views(topology):
        match = _match_of(view)
        if match is None or not view.view.alert:
            continue
        tag = next((name for name, step, column in match.outputs if column == "tag_id"), None)
        if tag is None:
            raise ValueError(f"event view {view.view.name!r} selects no tag_id: its detections cannot be scored")
        found.append(Detector(view.view.name, view.node, view.export.topic, view.view.alert, match.within_ms,
                              match.steps[-1].negated, tag))
    return found


def staged_events(truth: Iterable[dict]) -> list[StagedEvent]:
    """The staged events of an agents' truth.jsonl (fires and people in danger among them)."""
    return [StagedEvent(e["kind"], e["t_ms"], e["tag_id"], e["location"])
            for line in truth for e in line.get("events", ())]


def score(detector: Detector, detections: list[Detection], staged: list[StagedEvent], until_ms: int) -> KindScore:
    """Precision over the detections that end by `until_ms`, recall over the staged events whose
    detection is due by then (a trailing NOT is decided WITHIN after its first row, which comes
    before the staged time), latency over all of them."""
    events = [s for s in staged if s.kind == detector.kind]
    mine = [d for d in detections if d.kind == detector.kind]

    def about(detection: Detection, event: StagedEvent) -> bool:
        return event.tag_id == detection.tag_id and abs(event.t_ms - detection.end_ms) <= TOLERANCE_MS

    decided = [d for d in mine if d.end_ms <= until_ms]
    due = [s for s in events if s.t_ms <= until_ms - (detector.within_ms if detector.trailing_not else 0)]
    latencies = [d.alert_ms - d.end_ms for d in mine if d.alert_ms is not None]
    return KindScore(detector.kind, len(due), len(decided), sum(1 for d in decided if any(about(d, s) for s in events)),
                     sum(1 for s in due if any(about(d, s) for d in mine)), percentile(latencies, 50),
                     percentile(latencies, 95), detector.within_ms, detector.trailing_not)


def detection_of(detector: Detector, row: dict) -> Detection:
    alert = row.get("_emitted_ms")
    return Detection(detector.kind, row[detector.tag_column], as_ms(row[EVENT_TIME]),
                     int(alert) if alert is not None else None)


def world_catalog(topology: Topology, scenario: Scenario, standing: list[StandingView]) -> Catalog:
    """The catalog a running hierarchy's MDR holds: the topology's, its relations' rows derived
    from the emulated world too, and its standing views."""
    from services.emulation import receptors_for, relation_rows

    catalog = topology_catalog(topology)
    receptors = receptors_for(topology, scenario)
    relations = {r.name: replace(catalog.relations[r.name], rows=tuple(relation_rows(r, receptors, scenario)))
                 for r in topology.relations}
    return replace(catalog, relations=relations, views=[s.export for s in standing])


def offline_detections(topology: Topology, scenario: Scenario, readings: Iterable[dict]) -> list[Detection]:
    """Every detector's matches, by the reference evaluator over the agents' readings log."""
    standing = standing_views(topology)
    catalog = world_catalog(topology, scenario, standing)
    reference = Reference.from_log(readings, catalog)
    sql = {s.view.name: s.view.sql for s in standing}
    return [detection_of(d, row) for d in detectors(topology, standing)
            for row in reference.run(analyze(sql[d.view], catalog))]


def run_offline(topology: Topology, duration_s: float) -> list[KindScore]:
    from edge.agent import ReceptorAgent
    from services.emulation import scenario_of

    agent = ReceptorAgent(scenario_of(topology, OFFLINE_START_MS), bootstrap="")
    readings = list(agent.offline_readings(duration_s))
    until = agent.start_ms + int(duration_s * 1000) - HORIZON_MS
    found = offline_detections(topology, agent.scenario, readings)
    staged = agent.world.events + staged_events([{"events": agent.offline_fire_events(duration_s)}])
    return [score(d, found, staged, until) for d in detectors(topology)]


def run_live(topology: Topology, duration_s: float, progress: Callable[[str], None],
             trigger_ms: int = 1000) -> list[KindScore]:
    from services.embedded import embedded_or_external
    from services.hierarchy import Hierarchy
    from services.judge import topic_rows

    found = detectors(topology)
    with embedded_or_external() as servers:
        hierarchy = Hierarchy(topology, servers.redis_url, servers.bootstrap, trigger_ms=trigger_ms)
        try:
            hierarchy.start(progress)
            agent = hierarchy.start_agents()
            progress(f"running for {duration_s:.0f} s")
            time.sleep(duration_s)
            agent.stop()
            time.sleep(2 * trigger_ms / 1000 + 3)   # the last batches reach the detectors
            detections = [detection_of(d, row) for d in found for row in topic_rows(servers.bootstrap, d.topic)]
            truth = read_jsonl(agent.truth_path)
        finally:
            hierarchy.stop()
    until = agent.stats.stopped_ms - HORIZON_MS
    progress(f"{len(detections)} alerts; scoring those up to {HORIZON_MS // 1000} s before the agents stopped")
    return [score(d, detections, staged_events(truth), until) for d in found]


def table(scores: list[KindScore], live: bool) -> str:
    def fraction(value: float | None) -> str:
        return "n/a" if value is None else f"{value:.3f}"

    def seconds(value: float | None) -> str:
        return "n/a" if value is None else f"{value / 1000:.1f} s"

    rows = []
    for s in scores:
        rows += [(f"{s.kind}: staged / detected", f"{s.staged} / {s.detected}"),
                 (f"{s.kind}: precision", f"{fraction(s.precision)} ({s.right} of {s.detected})"),
                 (f"{s.kind}: recall", f"{fraction(s.recall)} ({s.found} of {s.staged})")]
        if live:
            last = "its WITHIN's end" if s.trailing_not else "its last reading"
            rows += [(f"{s.kind}: alert after {last}, p50", seconds(s.latency_p50_ms)),
                     (f"{s.kind}: alert after {last}, p95", seconds(s.latency_p95_ms))]
            if s.trailing_not:
                rows.append((f"{s.kind}: alert after its last reading, p50",
                             seconds(None if s.latency_p50_ms is None else s.latency_p50_ms + s.within_ms)))
    return figures_table(rows)
