"""`hifi bench joins`, its hazardous-materials part: the hazmat topology's `gas_spread` view (a
3-way window join, deploy/topologies/hazmat.yaml) against the gas releases its scenario stages.

A staged release is a **spread** when its cloud reaches the view's three motes (zone-a-m1,
zone-b-m1, zone-c-m1) with more than gas_T ppm; the local leaks reach one zone only. A row of the
view is right when one spread was at each of its three motes at the times the row says it saw gas
there (from the cloud's arrival to the end of its stay, a sample period's slack); a spread is
found when a row is right about it. Only what could be decided is scored: spreads and rows whose
last mote's time is HORIZON_MS before the readings end (a spread's rows at zone c come ~40 s
after its release).

Offline (always): the view evaluated centrally by the reference evaluator over the readings the
agents would publish, over several seeds. Live (`--hazmat-duration`, 0 to skip): the hierarchy
runs the scenario; each row is an alert, raised when the plant emitted it; latency is from the
row's time (its zone-c sample) to that alert.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from edge.motes import GasRelease
from edge.scenario import Scenario
from glue.analyzer import analyze
from glue.reference import Reference
from glue.standing import standing_views
from glue.topology import Topology
from services.bench.events import world_catalog
from services.bench.report import detection_rows, figures_table, percentile
from services.judge import as_ms

VIEW = "gas_spread"
MOTES = {"a": "zone-a-m1", "b": "zone-b-m1", "c": "zone-c-m1"}   # the view's three motes, in its order
SEEN = {"a": "seen_a", "b": "seen_b", "c": "ts"}                   # the view's column of each one's time
SLACK_MS = 1_000                    # a sample period: a cloud's stay is seen at the next sample
HORIZON_MS = 60_000
OFFLINE_START_MS = 1_700_000_000_000
SEEDS = (101, 202, 303)


@dataclass(frozen=True)
class Spread:
    arrives: dict[str, int]         # alias -> when the cloud reaches its mote
    duration_ms: int

    def saw(self, alias: str, at_ms: int) -> bool:
        arrives = self.arrives[alias]
        return arrives <= at_ms <= arrives + self.duration_ms + SLACK_MS


@dataclass(frozen=True)
class HazmatScore:
    mode: str                       # "offline" | "live"
    spreads: int
    rows: int
    right: int
    found: int
    latency_p50_ms: float | None = None
    latency_p95_ms: float | None = None

    @property
    def precision(self) -> float | None:
        return self.right / self.rows if self.rows else None

    @property
    def recall(self) -> float | None:
        return self.found / self.spreads if self.spreads else None


def spreads(scenario: Scenario, threshold_ppm: float) -> list[Spread]:
    """The staged releases whose cloud reaches all three motes above `threshold_ppm`."""
    where = {m.receptor_id: (m.x, m.y) for m in scenario.motes}
    found = []
    for release in scenario.environment.releases:
        arrives = {alias: release.arrives_ms(*where[mote]) for alias, mote in MOTES.items()}
        if all(a is not None and _peak(release, *where[MOTES[alias]]) > threshold_ppm for alias, a in arrives.items()):
            found.append(Spread({alias: a for alias, a in arrives.items() if a is not None}, release.duration_ms))
    return found


def _peak(release: GasRelease, x: float, y: float) -> float:
    arrives = release.arrives_ms(x, y)
    return 0.0 if arrives is None else release.ppm(x, y, arrives)


def score(mode: str, rows: Sequence[dict], staged: Sequence[Spread], until_ms: int) -> HazmatScore:
    decided = [row for row in rows if as_ms(row["ts"]) <= until_ms]
    due = [s for s in staged if s.arrives["c"] + s.duration_ms <= until_ms]

    def about(row: dict, spread: Spread) -> bool:
        return all(spread.saw(alias, as_ms(row[column])) for alias, column in SEEN.items())

    latencies = [row["_emitted_ms"] - as_ms(row["ts"]) for row in rows if row.get("_emitted_ms") is not None]
    return HazmatScore(mode, len(due), len(decided), sum(any(about(r, s) for s in staged) for r in decided),
                       sum(any(about(r, s) for r in rows) for s in due),
                       percentile(latencies, 50), percentile(latencies, 95))


def threshold(topology: Topology) -> float:
    return float(topology.parameters["gas_T"])


def offline_rows(topology: Topology, scenario: Scenario, readings: Iterable[dict]) -> list[dict]:
    """The view's rows by the reference evaluator over the agents' readings."""
    standing = standing_views(topology)
    catalog = world_catalog(topology, scenario, standing)
    view = next(s.view for s in standing if s.view.name == VIEW)
    return Reference.from_log(readings, catalog).run(analyze(view.sql, catalog))


def run_offline(topology: Topology, duration_s: float, seeds: Sequence[int] = SEEDS) -> HazmatScore:
    from edge.agent import ReceptorAgent
    from services.bench.events import staged_scenario

    scores = []
    for seed in seeds:
        agent = ReceptorAgent(staged_scenario(topology, OFFLINE_START_MS, seed), bootstrap="")
        rows = offline_rows(topology, agent.scenario, agent.offline_readings(duration_s))
        until = agent.start_ms + int(duration_s * 1000) - HORIZON_MS
        scores.append(score("offline", rows, spreads(agent.scenario, threshold(topology)), until))
    return HazmatScore("offline", *(sum(getattr(s, f) for s in scores) for f in ("spreads", "rows", "right", "found")))


def run_live(topology: Topology, duration_s: float, progress: Callable[[str], None],
             trigger_ms: int = 1000) -> HazmatScore:
    from services.embedded import embedded_or_external
    from services.hierarchy import Hierarchy
    from services.judge import topic_rows

    standing = next(s for s in standing_views(topology) if s.view.name == VIEW)
    with embedded_or_external() as servers:
        hierarchy = Hierarchy(topology, servers.redis_url, servers.bootstrap, trigger_ms=trigger_ms)
        try:
            hierarchy.start(progress)
            agent = hierarchy.start_agents()
            progress(f"running the hazmat plant for {duration_s:.0f} s")
            time.sleep(duration_s)
            agent.stop()
            time.sleep(2 * trigger_ms / 1000 + 3)   # the last batches reach the plant
            rows = topic_rows(servers.bootstrap, standing.export.topic)
        finally:
            hierarchy.stop()
    until = agent.stats.stopped_ms - HORIZON_MS
    return score("live", rows, spreads(agent.scenario, threshold(topology)), until)


def hazmat_table(scores: Sequence[HazmatScore]) -> str:
    rows = []
    for s in scores:
        rows += detection_rows(f"gas spread ({s.mode}, rows)", s.spreads, s.rows, s.right, s.found)
        if s.latency_p50_ms is not None:
            rows.append((f"gas spread ({s.mode}): alert after its zone-c sample, p50 / p95",
                         f"{s.latency_p50_ms / 1000:.1f} / {(s.latency_p95_ms or 0) / 1000:.1f} s"))
    return figures_table(rows)
