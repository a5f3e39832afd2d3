"""The default topology's people-in-danger view (deploy/topologies/supply-chain.yaml: a pattern
over receptor_stream, the dock's motes and readers in one stream) over the default scenario's
emulated readings and samples, its fires, a dying mote, ghosts and reads through the door
included. Pure: no Spark, broker or Redis.

Run in the runtime's evaluator, fed the raw topic's two readers' batches (readings, samples) as
the node is, the view emits what the reference evaluator finds centrally over the union; and what
it finds is the people the scenario put in a burning room."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest

from base.plan import RAW_SAMPLE_SOURCE_COLUMNS, SAMPLE_QUANTITIES
from base.plan_schema import sources
from dsp.operators.expressions import arrow_schema
from edge.agent import ReceptorAgent
from glue.analyzer import analyze
from glue.reference import Reference
from glue.standing import standing_views
from glue.topology import load_topology
from services.bench.events import OFFLINE_START_MS, SEEDS, detectors, run_offline, world_catalog
from services.emulation import scenario_of
from services.judge import as_ms, same_rows
from services.paths import DEFAULT_TOPOLOGY
from tests.test_engine import raw_batch
from tests.test_equivalence import run_bottom_up

DURATION_S = 600   # fires at 2, 5 and 8 minutes; the dying mote climbs past 100 °C from 45 s on


@pytest.fixture(scope="module")
def dock():
    topology = load_topology(DEFAULT_TOPOLOGY)
    agent = ReceptorAgent(scenario_of(topology, OFFLINE_START_MS), bootstrap="")
    logged = list(agent.offline_readings(DURATION_S))
    standing = standing_views(topology)
    view = next(s for s in standing if s.view.name == "people_in_danger")
    return topology, logged, view, world_catalog(topology, agent.scenario, standing)


def _receptor_batches(items: list[tuple]) -> list[pa.Table]:
    """The raw topic's batches of a chunk of ("read", receptor, tag, strength, ms) and ("sample",
    mote, values, ms) items: the readings reader's and the samples reader's."""
    reads = raw_batch([item[1:] for item in items if item[0] == "read"])
    samples = pa.Table.from_pylist(
        [{"receptor_id": mote, **{q: values.get(q) for q in SAMPLE_QUANTITIES},
          "ts": dt.datetime.fromtimestamp(item[3] / 1000, dt.UTC)}
         for item in items if item[0] == "sample" for _, mote, values, _ in [item]],
        schema=arrow_schema(RAW_SAMPLE_SOURCE_COLUMNS))
    return [reads, samples]


def test_the_view_reads_both_forms_of_the_dock_raw_topic_and_is_matched_at_the_dock(dock):
    topology, _, view, _ = dock
    [task] = view.tasks
    assert task.node == "door1"
    assert sorted(s.format for s in sources(task.plan)) == ["rfid", "samples"]
    assert [d.kind for d in detectors(topology) if d.view == "people_in_danger"] == ["person-in-danger"]


def test_the_view_run_on_the_readers_batches_equals_its_sql_evaluated_centrally(dock):
    _, logged, view, catalog = dock
    items: list[tuple] = []
    for line in logged:
        if line["node"] != "door1":
            continue
        items += [("read", line["receptor"], tag, strength, line["t"]) for tag, _, strength in line.get("reads", ())]
        items += [("sample", s["receptor_id"], s["values"], s["timestamp_ms"]) for s in line.get("samples", ())]
    [task] = view.tasks
    end_ms = OFFLINE_START_MS + DURATION_S * 1000
    emitted = run_bottom_up([(task.topic, task.plan)], {"door1": items}, _receptor_batches,
                            sentinel=lambda edge, ms: ("read", "door1-r1", "sentinel", 0.0, ms),
                            relations={name: list(r.rows) for name, r in catalog.relations.items()}, end_ms=end_ms,
                            batches=DURATION_S // 10)   # 10 s each: within the grace a union waits for an input
    columns = [name for name, _ in view.export.columns]
    got = [tuple(as_ms(v) for v in row) for row in emitted[task.topic]]
    central = Reference.from_log(logged, catalog).run(analyze(view.view.sql, catalog))
    want = [tuple(r[c] for c in columns) for r in central]
    assert len(want) >= 10 and same_rows(got, want), (sorted(got)[:3], sorted(want)[:3])


def test_the_view_finds_the_people_in_a_burning_room_and_no_one_else():
    [score] = [s for s in run_offline(load_topology(DEFAULT_TOPOLOGY), 2 * DURATION_S, SEEDS[:1])
               if s.kind == "person-in-danger"]
    assert score.staged >= 5, score
    assert score.precision >= 0.9 and score.recall >= 0.9, score
