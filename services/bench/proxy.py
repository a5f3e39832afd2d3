"""`hifi bench proxy`: what the sensor proxy (glue.proxy) saves on the Intel Lab replay, and
whether every query still gets its exact answer. Offline: no broker or Spark.

The 50 real motes are replayed (edge.agent, one 30-minute step a second, faults injected) under
one edge node, `lab`, with each mote in a room by its position in the lab plan. For each workload
(a set of standing queries), every query is planned as a user's query is; the proxy derives each
mote's rule from the queries' parts at `lab`; a sample is sent when its mote's rule wants it.
Printed per workload: samples (the motes' radio messages) and SensorBatch bytes to the edge with
and without the proxy (which also tells the motes the quantities the queries read), and per query
whether its answer from the samples sent equals its answer from every sample taken (the
reference evaluator over each).
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass, replace

import pyarrow as pa

from base.plan import RAW_SAMPLE_SOURCE_COLUMNS, RAW_STREAMS, Filter, Source
from dsp.operators.build import build
from dsp.operators.expressions import arrow_schema
from edge.agent import ReceptorAgent, replay_receptor
from edge.intel_lab import load_intel_lab
from edge.scenario import load_scenario
from glue.analyzer import analyze
from glue.catalog import Catalog, NodeInfo, ReceptorInfo, Relation
from glue.planner import plan_query
from glue.proxy import mote_fields, mote_rules
from glue.reference import Reference, evaluate_expr, sensor_samples
from glue.rewrite.selectivity import estimate, order_terms
from services.bench.report import figures_table
from services.paths import SCENARIOS
from wire.codec import Sample, encode_sensor_batch
from wire.receptor_settings import ReceptorSettings, describe, wants
from wire.topics import raw_topic

INTEL_LAB_SCENARIO = os.path.join(SCENARIOS, "intel-lab.yaml")
EDGE = "lab"
START_MS = 1_700_000_000_000   # a whole number of every window

# Standing queries of a building's operators, in replay time (one lab half hour a second).
HOT_SPOTS = "SELECT receptor_id, temperature, ts FROM sensor_stream WHERE temperature > 30"
HUMID_TREND = ("SELECT receptor_id, max(humidity) - min(humidity) AS swing, count(*) AS samples "
               "FROM sensor_stream [range by '12 seconds'] WHERE humidity >= 45 GROUP BY receptor_id")
ROOM_AVERAGES = ("SELECT location, avg(temperature) AS temperature, avg(humidity) AS humidity "
                 "FROM sensor_stream [range by '12 seconds'] JOIN receptor_locations USING (receptor_id) "
                 "GROUP BY location")
# Per-room averages per minute as TinyDB poses them (`SAMPLE PERIOD 1 min`): one sample a mote a
# minute, so the answer is defined on those samples and exact with far fewer
MINUTE_AVERAGES = ROOM_AVERAGES.replace("[range by '12 seconds']", "[range by '1 minute', sample every '1 minute']")
WORKLOADS = {
    "alerts: hot spots, humid trend": {"hot spots": HOT_SPOTS, "humid trend": HUMID_TREND},
    "alerts and per-room averages per minute (sample every minute)": {
        "hot spots": HOT_SPOTS, "humid trend": HUMID_TREND, "room averages": MINUTE_AVERAGES},
    # every sample is in these averages' answers: the proxy cannot send fewer (the fields only)
    "alerts and per-room averages over every sample": {"hot spots": HOT_SPOTS, "humid trend": HUMID_TREND,
                                                       "room averages": ROOM_AVERAGES},
}


@dataclass(frozen=True)
class WorkloadResult:
    name: str
    samples: int              # every sample the motes took
    sent: int                 # those the proxy let through
    batch_bytes: int          # SensorBatch bytes to the edge without the proxy
    sent_bytes: int           # with it
    identical: dict[str, bool]
    rules: dict[str, str]     # a few motes' rules, as told


def room(x: float) -> str:
    """The lab plan's thirds, west to east (its x runs 0-41 m)."""
    return "west" if x < 14 else "centre" if x < 28 else "east"


def lab_catalog(data: str) -> Catalog:
    motes = [(replay_receptor(m.mote_id), room(m.x)) for m in load_intel_lab(data)]
    return Catalog(
        streams={name: raw.columns for name, raw in RAW_STREAMS.items()},
        views=[],
        relations={"receptor_locations": Relation("receptor_locations", (("receptor_id", "string"),
                                                                         ("location", "string")),
                                                  tuple(motes), ("*",))},
        nodes={EDGE: NodeInfo(EDGE, "edge", "")},
        receptors=[ReceptorInfo(mote, EDGE, location, "", "mote") for mote, location in motes])


def run(duration_s: float = 240.0) -> list[WorkloadResult]:
    scenario = load_scenario(INTEL_LAB_SCENARIO, START_MS)
    assert scenario.replay is not None
    catalog = lab_catalog(scenario.replay.data)
    lines = [line for line in ReceptorAgent(scenario, "").offline_readings(duration_s) if "samples" in line]
    motes = sorted(r.id for r in catalog.receptors)
    taken = sensor_samples(lines)
    results = []
    for name, queries in WORKLOADS.items():
        planned = {q: analyze(sql, catalog) for q, sql in queries.items()}
        parts = [t.plan for q in planned.values() for t in plan_query(q, catalog, "bench").tasks if t.node == EDGE]
        told = ReceptorSettings(EDGE, 1, 0, mote_rules(parts, motes), mote_fields(parts, motes))
        sent_lines = [{**line, "samples": [{**s, "values": told.sent(s["receptor_id"], s["values"])}
                                           for s in line["samples"]
                                           if wants(told.rule(s["receptor_id"]), s["values"], s["timestamp_ms"])]}
                      for line in lines]
        sent = sensor_samples(sent_lines)
        identical = {q: Reference([], catalog, samples=sent).run(query) == Reference([], catalog, samples=taken)
                     .run(query) for q, query in planned.items()}
        results.append(WorkloadResult(
            name, len(taken), len(sent), _bytes(lines), _bytes(sent_lines), identical,
            {mote: f"{describe(told.rule(mote))}, {', '.join(told.fields.get(mote, ())) or 'every quantity'}"
             for mote in motes[:2]}))
    return results


def _bytes(lines: list[dict]) -> int:
    """The SensorBatch records' bytes (key and value), one a tick as the agent sends them."""
    total = 0
    for tick, line in enumerate(lines):
        key, value = encode_sensor_batch(EDGE, tick, [Sample(**s) for s in line["samples"]], line["t"])
        total += len(key) + len(value)
    return total


def table(results: list[WorkloadResult]) -> str:
    rows: list[tuple[str, str]] = []
    for r in results:
        rows += [(f"{r.name}", ""),
                 ("  samples taken / sent", f"{r.samples} / {r.sent}  ({r.samples / max(r.sent, 1):.1f}x fewer)"),
                 ("  bytes to the edge without / with", f"{r.batch_bytes} / {r.sent_bytes}  "
                                                        f"({r.batch_bytes / max(r.sent_bytes, 1):.1f}x fewer)"),
                 *((f"  answer of {q}", "identical" if same else "DIFFERENT") for q, same in r.identical.items()),
                 *((f"  {mote} told", rule) for mote, rule in r.rules.items())]
    return figures_table(rows)


# Thresholds an operator of the lab would write, for the selectivity estimates.
TERMS = ("temperature > 18", "temperature > 20", "temperature > 22", "temperature > 25", "temperature <= 30",
         "humidity >= 30", "humidity >= 35", "humidity >= 40", "humidity < 45", "humidity > 50")


@dataclass(frozen=True)
class SelectivityResult:
    terms: list[tuple[str, float, float, float]]   # term, estimate, true share then, true share after
    worst_ms: float       # the filter evaluated in the worst written order, per pass over the replay
    planned_ms: float     # in the order the planner chose
    planned_order: str


def run_selectivity(duration_s: float = 240.0, passes: int = 50) -> SelectivityResult:
    """Each term's share estimated from the histograms the motes had sent by the replay's middle,
    against its true share of the samples they took until then and of those they took after; and
    a two-term filter written least selective first, evaluated as written and as planned."""
    scenario = load_scenario(INTEL_LAB_SCENARIO, START_MS)
    assert scenario.replay is not None
    agent, middle = ReceptorAgent(scenario, ""), START_MS + int(duration_s * 500)
    halves: tuple[list[dict], list[dict]] = ([], [])
    histograms = None
    for line in agent.offline_readings(duration_s):
        if "samples" in line:
            if line["t"] >= middle and histograms is None:
                histograms = agent.histograms(EDGE)   # what the motes had sent by then
            halves[line["t"] >= middle].append(line)
    catalog = replace(lab_catalog(scenario.replay.data), histograms=histograms or {})
    motes = [r.id for r in catalog.receptors]
    before, after = sensor_samples(halves[0]), sensor_samples(halves[1])
    terms = []
    for text in TERMS:
        term = analyze(f"SELECT receptor_id FROM sensor_stream WHERE {text}", catalog).predicate
        share = estimate(term, catalog, motes)
        assert share is not None
        terms.append((text, share, *(sum(evaluate_expr(term, row) is True for row in rows) / len(rows)
                                     for rows in (before, after))))
    worst = "SELECT receptor_id, temperature, ts FROM sensor_stream WHERE humidity >= 30 AND temperature > 25"
    query = analyze(worst, catalog)
    ordered, estimates = order_terms(query, catalog)
    table_ = pa.Table.from_pylist(before + after, schema=arrow_schema(RAW_SAMPLE_SOURCE_COLUMNS))

    source = Source((raw_topic(EDGE),), "rows", RAW_SAMPLE_SOURCE_COLUMNS, "ts", 0)
    filters = {"written": build(Filter(source, query.predicate), {}),
               "planned": build(Filter(source, ordered.predicate), {})}
    best = dict.fromkeys(filters, float("inf"))
    for _ in range(passes):   # interleaved, the fastest pass of each: the machine is shared
        for name, operator in filters.items():
            started = time.perf_counter()
            operator.push(raw_topic(EDGE), table_)
            best[name] = min(best[name], (time.perf_counter() - started) * 1000)
    return SelectivityResult(terms, best["written"], best["planned"], ", ".join(e.describe() for e in estimates))


def selectivity_table(result: SelectivityResult) -> str:
    errors = sorted(abs(share - then) for _, share, then, _ in result.terms)
    ahead = sorted(abs(share - after) for _, share, _, after in result.terms)
    rows = [(f"  {text}", f"estimated {share:.3f}, true {then:.3f} (then), {after:.3f} (after)")
            for text, share, then, after in result.terms]
    return figures_table([
        ("selectivity from the motes' histograms (at the replay's middle)", ""), *rows,
        ("  median absolute error, then / after", f"{statistics.median(errors):.3f} / {statistics.median(ahead):.3f}"),
        ("filter written least selective first, fastest pass", f"{result.worst_ms:.2f} ms as written, "
                                                              f"{result.planned_ms:.2f} ms as planned"),
        ("  planned order", result.planned_order)])
