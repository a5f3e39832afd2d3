"""The hazardous-materials plant (issue 40): its gas_spread view, a 3-way window join of the
gas motes placed at the plant, run bottom-up equals the central reference over the scenario's
samples, and finds every staged spread and nothing of the local leaks."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa

from base.plan import RAW_SAMPLE_SOURCE_COLUMNS, SAMPLE_QUANTITIES
from dsp.operators.expressions import arrow_schema
from edge.agent import ReceptorAgent
from glue.standing import standing_views
from glue.topology import load_topology
from services.bench import hazmat
from services.bench.events import staged_scenario
from services.judge import as_ms
from services.paths import HAZMAT_TOPOLOGY
from tests.test_equivalence import run_bottom_up

PLANT = load_topology(HAZMAT_TOPOLOGY)
SECONDS = 300.0


def _samples(readings: list[dict]) -> dict[str, list[dict]]:
    by_edge: dict[str, list[dict]] = {}
    for line in readings:
        for s in line.get("samples", ()):
            by_edge.setdefault(line["node"], []).append({"receptor_id": s["receptor_id"], **s["values"],
                                                         "ts": s["timestamp_ms"]})
    return by_edge


def _batch(rows: list[dict]) -> pa.Table:
    return pa.Table.from_pylist([{**{q: r.get(q) for q in SAMPLE_QUANTITIES}, "receptor_id": r["receptor_id"],
                                  "ts": dt.datetime.fromtimestamp(r["ts"] / 1000, dt.UTC)} for r in rows],
                                schema=arrow_schema(RAW_SAMPLE_SOURCE_COLUMNS))


def test_the_gas_spread_view_bottom_up_equals_the_reference_and_finds_every_spread_and_no_leak():
    agent = ReceptorAgent(staged_scenario(PLANT, hazmat.OFFLINE_START_MS, 101), bootstrap="")
    readings = list(agent.offline_readings(SECONDS))
    standing = next(s for s in standing_views(PLANT) if s.view.name == hazmat.VIEW)
    assert standing.node == "plant" and len(standing.tasks) > 3   # a part per zone, the join at the plant
    end_ms = agent.start_ms + int(SECONDS * 1000)
    got = run_bottom_up([(t.topic, t.plan) for t in standing.tasks], _samples(readings), raw=_batch,
                        sentinel=lambda edge, ms: {"receptor_id": f"{edge}-m1", "ts": ms}, relations={},
                        end_ms=end_ms, batches=40)[standing.export.topic]
    want = hazmat.offline_rows(PLANT, agent.scenario, readings)
    columns = [name for name, _ in standing.export.columns]
    assert want and sorted(tuple(as_ms(v) for v in row) for row in got) == \
        sorted(tuple(as_ms(row[c]) for c in columns) for row in want)
    # every row right (none from a local leak: one leaks at zone b 30 s after each spread, within
    # the join's window of zone a's rows), every spread due found
    scored = hazmat.score("offline", want, hazmat.spreads(agent.scenario, hazmat.threshold(PLANT)),
                          end_ms - hazmat.HORIZON_MS)
    assert scored.spreads >= 3 and scored.precision == scored.recall == 1.0, scored
