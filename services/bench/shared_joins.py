"""`hifi bench joins`, its sharing part: queries over the same join read one running join.

Ten different queries over one 2-way window join of the hazmat plant's motes (a sample at zone a,
then one at zone b within 2 s; each query its own threshold on the rise between them, so its own
final part) are planned as the placement service plans them, one after another, each against the
catalog the ones before left: the first deploys the inputs' selections, the join and its final
part; each later one finds the selections and the join running (glue.rewrite.distribute) and
deploys its final part only. Three cases are built in one process and fed the same samples
(every mote a sample each SAMPLE_MS, rounds of ROUND_MS) through dsp.bottom_up: one query; the
ten sharing the join; the ten each with the join inside its final part, as joins ran before they
were shared (the selections shared as always). Printed per case: the parts and joins deployed,
the CPU-seconds of the parts' work (the least of REPEATS: the machine is shared), and the rows
the queries answered (the ten cases must agree). Goal (issue 40): ten sharing ≤ 2 × one.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import pyarrow as pa

from base.part_spec import PartSpec
from base.plan import RAW_SAMPLE_SOURCE_COLUMNS, Plan, Source
from dsp.bottom_up import BottomUp
from dsp.operators.expressions import arrow_schema, timestamps
from glue.analyzer import analyze
from glue.catalog import Catalog, exported_view
from glue.planner import plan_query
from glue.topology import Topology
from services.bench.report import figures_table
from wire.topics import raw_topic

QUERY = ("SELECT a.receptor_id, b.receptor_id AS other, b.gas - a.gas AS rise, ts FROM sensor_stream a "
         "JOIN sensor_stream b ON b.ts BETWEEN a.ts AND a.ts + INTERVAL '2' SECONDS "
         "WHERE a.receptor_id IN ({a}) AND b.receptor_id IN ({b}) AND b.gas - a.gas > {k}")
ZONES = ("zone-a", "zone-b")
QUERIES = 10
SAMPLE_MS = 100
ROUND_MS = 500
SECONDS = 60
START_MS = 1_700_000_000_000
REPEATS = 3


@dataclass(frozen=True)
class SharingRun:
    case: str          # what was deployed
    queries: int
    parts: int         # parts deployed
    joins: int         # of them, parts that join
    cpu_s: float       # the parts' work over the samples, the least of REPEATS
    answered: int      # result rows of all the queries


def join_queries(topology: Topology, count: int = QUERIES) -> list[str]:
    """`count` different queries over one join: the same inputs, keys and bounds, thresholds apart."""
    motes = {zone: ", ".join(f"'{r.id}'" for r in topology.receptors if r.node == zone) for zone in ZONES}
    return [QUERY.format(a=motes[ZONES[0]], b=motes[ZONES[1]], k=-10 + 2 * k) for k in range(count)]


def deployed(catalog: Catalog, queries: Sequence[str], share: bool) -> list[PartSpec]:
    """The parts `queries`, submitted in turn, deploy: what each finds running is reused; not
    `share`: each query's join inside its final part (the selections are shared either way)."""
    running, parts = catalog, []
    for n, sql in enumerate(queries):
        plan = plan_query(analyze(sql, running), running, f"q{n}", start_ms=START_MS)
        joins = {t.topic: t.plan for t in plan.tasks if t.role == "join"}
        new = [t for t in plan.tasks if not t.reused and (share or t.role != "join")]
        if not share:
            new = [replace(t, plan=_inlined(t.plan, joins)) if t.role == "final" else t for t in new]
        parts += new
        made = [exported_view(t) for t in new if t.role != "final"]
        running = replace(running, views=[*running.views, *made])
    return parts


def _inlined(plan: Plan, joins: dict[str, Plan]) -> Plan:
    """`plan` with its reader of a join's rows replaced by that join."""
    if isinstance(plan, Source) and len(plan.topics) == 1 and plan.topics[0] in joins:
        return joins[plan.topics[0]]
    child = getattr(plan, "child", None)
    return plan if child is None else replace(plan, child=_inlined(child, joins))


def samples(topology: Topology, seed: int) -> list[dict[str, list[pa.Table]]]:
    """Rounds of each zone's raw batches: every mote a sample each SAMPLE_MS, gas 0-40 ppm."""
    rng = random.Random(seed)
    motes = {zone: [r.id for r in topology.receptors if r.node == zone] for zone in ZONES}
    schema = arrow_schema(RAW_SAMPLE_SOURCE_COLUMNS)
    rounds = []
    for begin in range(START_MS, START_MS + SECONDS * 1000, ROUND_MS):
        batches = {}
        for zone, ids in motes.items():
            times = [ms for ms in range(begin, begin + ROUND_MS, SAMPLE_MS) for _ in ids]
            names = [mote for _ in range(begin, begin + ROUND_MS, SAMPLE_MS) for mote in ids]
            columns = {"receptor_id": pa.array(names, pa.string()),
                       **{name: pa.nulls(len(times), pa.float64()) for name, _ in RAW_SAMPLE_SOURCE_COLUMNS[1:-1]},
                       "ts": timestamps(times)}
            columns["gas"] = pa.array([round(rng.uniform(0, 40), 1) for _ in times], pa.float64())
            batches[raw_topic(zone)] = [pa.table(columns, schema=schema)]
        rounds.append(batches)
    return rounds


def _cost(parts: Sequence[PartSpec], catalog: Catalog, rounds: list[dict[str, list[pa.Table]]]) -> tuple[float, int]:
    """CPU-seconds of the parts' work over the rounds, and the rows their final parts emitted."""
    relations = {name: list(relation.rows) for name, relation in catalog.relations.items()}
    bottom_up = BottomUp([(p.topic, p.plan) for p in parts], relations, keep_rows=False)
    started = time.process_time()
    for batches in rounds:
        bottom_up.round({topic: list(tables) for topic, tables in batches.items()})
    spent = time.process_time() - started
    return spent, sum(bottom_up.counted[p.topic] for p in parts if p.role == "final")


def run_shared_joins(topology: Topology, catalog: Catalog, progress: Callable[[str], None]) -> list[SharingRun]:
    queries = join_queries(topology)
    rounds = samples(topology, seed=11)
    cases = (("1 query", queries[:1], True), (f"{QUERIES} sharing one join", queries, True),
             (f"{QUERIES}, a join in each", queries, False))
    found = []
    for case, chosen, share in cases:
        parts = deployed(catalog, chosen, share)
        runs = [_cost(parts, catalog, rounds) for _ in range(REPEATS)]
        joins = sum(p.role == ("join" if share else "final") for p in parts)   # not shared: each final joins
        found.append(SharingRun(case, len(chosen), len(parts), joins, min(cpu for cpu, _ in runs), runs[0][1]))
        progress(f"{case}: {len(parts)} parts, {found[-1].cpu_s:.2f} CPU-s")
    return found


def shared_joins_table(runs: Sequence[SharingRun]) -> str:
    rows = [("deployed", "queries | parts | joins | CPU-s | x of 1 query | rows answered")]
    base = runs[0].cpu_s if runs else 0.0
    rows += [(run.case, f"{run.queries} | {run.parts} | {run.joins} | {run.cpu_s:.2f} | "
                        f"{run.cpu_s / base if base else float('nan'):.2f} | {run.answered:,}") for run in runs]
    return figures_table(rows)
