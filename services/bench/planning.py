"""`hifi bench planning`: how long parsing, binding, placement and rewriting take on a large
generated hierarchy (the MDR's catalog as the placement service sees it, no I/O); with
`--submit`, the whole submission on a running hierarchy: catalog read from the MDR, plan, place,
and deploy over gRPC on the nodes (each of which compiles and starts its Spark query).

The topology is a tree of `fanout`-wide levels (core, regions, warehouses, doors); every edge has
receptors, every node exports views, so the planner looks through hundreds of them for reuse.
For `--submit` the generated tree is registered in the MDR of a running `deep.yaml` hierarchy,
beside its real nodes, and the submitted queries read the real doors' receptors.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

from base.plan import RAW_RFID_SOURCE_COLUMNS, Window
from glue.analyzer import analyze
from glue.catalog import Catalog, ExportedView, NodeInfo, ReceptorInfo, Relation
from glue.planner import plan_query
from glue.topology import Topology
from mdr.repository import MDR, ViewRecord
from services.bench.report import figures_table, percentile

VIEW_COLUMNS = (("window_start", "timestamp"), ("window_end", "timestamp"), ("receptor_id", "string"),
                ("tag_id", "string"), ("reads", "long"))


def generated_catalog(fanout: int = 4, levels: int = 4, receptors_per_edge: int = 4, views_per_node: int = 6,
                      ) -> Catalog:
    """A `levels`-deep tree with `fanout` children per node and `views_per_node` exported views each."""
    nodes = {"core": NodeInfo("core", "core", "")}
    frontier = ["core"]
    for level in range(1, levels):
        tier = "edge" if level == levels - 1 else "aggregation"
        frontier = [f"{parent}.{i}" for parent in frontier for i in range(fanout)]
        for node in frontier:
            nodes[node] = NodeInfo(node, tier, node.rsplit(".", 1)[0])
    receptors = [ReceptorInfo(f"{edge}-r{i}", edge, f"loc-{edge}", f"area-{edge.split('.')[1]}")
                 for edge in frontier for i in range(receptors_per_edge)]
    views = [ExportedView(f"view_{i}", node, f"hifi.view.{node}.view_{i}", VIEW_COLUMNS, Window(2000, 2000), "")
             for node in nodes for i in range(views_per_node)]
    views += [ExportedView("smoothed_rfid_stream", edge, f"hifi.view.{edge}.smoothed_rfid_stream", VIEW_COLUMNS,
                           Window(2000, 2000), "") for edge in frontier]
    relation = Relation("receptor_locations", (("receptor_id", "string"), ("location", "string")),
                        tuple((r.id, r.location) for r in receptors), ("*",))
    return Catalog({"rfid_stream": RAW_RFID_SOURCE_COLUMNS}, views, {"receptor_locations": relation}, nodes,
                   receptors, {})


def _queries(catalog: Catalog, n: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    receptors = [r.id for r in catalog.receptors]
    shapes = [
        "SELECT tag_id, count(*) AS n FROM rfid_stream [range by '10 seconds', slide by '2 seconds'] GROUP BY tag_id",
        "SELECT location, count(DISTINCT tag_id) AS tags FROM rfid_stream [range by '6 seconds', slide by '4 seconds']"
        " JOIN receptor_locations USING (receptor_id) GROUP BY location",
        "SELECT receptor_id, avg(read_strength) AS s FROM rfid_stream [range by '4 seconds'] "
        "WHERE receptor_id IN ('{a}', '{b}') GROUP BY receptor_id HAVING count(*) > 2",
        "SELECT receptor_id, count(*) AS seen FROM smoothed_rfid_stream [range by '8 seconds'] "
        "WHERE receptor_id = '{a}' GROUP BY receptor_id",
    ]
    return [rng.choice(shapes).format(a=rng.choice(receptors), b=rng.choice(receptors)) for _ in range(n)]


@dataclass
class PlanningFigures:
    nodes: int
    views: int
    queries: int
    p50_ms: float
    p95_ms: float
    max_ms: float
    tasks_per_query: float

    def table(self) -> str:
        rows = [("nodes in the hierarchy", f"{self.nodes}"), ("exported views in the catalog", f"{self.views}"),
                ("queries planned", f"{self.queries}"), ("node plans per query (mean)", f"{self.tasks_per_query:.1f}"),
                ("parse + bind + place + rewrite, p50", f"{self.p50_ms:.2f} ms"),
                ("parse + bind + place + rewrite, p95", f"{self.p95_ms:.2f} ms"),
                ("parse + bind + place + rewrite, max", f"{self.max_ms:.2f} ms")]
        return figures_table(rows)


def _percentiles(timings: list[float]) -> tuple[float, float]:
    p50, p95 = percentile(timings, 50), percentile(timings, 95)
    assert p50 is not None and p95 is not None
    return p50, p95


def register_generated(mdr: MDR, catalog: Catalog, under: str) -> None:
    """Put a generated tree's nodes (alive, its root's children hung below `under`) and views in the MDR."""
    for node in catalog.nodes.values():
        if node.id == "core":
            continue
        parent = under if node.parent == "core" else node.parent
        mdr.register_node(node.id, node.tier, parent, (), "", {})
        mdr.heartbeat(node.id, 3_600_000)
    for view in catalog.views:
        if view.node != "core":
            mdr.export_view(ViewRecord(view.name, view.node, view.topic, "", "", "", view.columns, ("*",), 0))


SUBMITTED = (
    "SELECT tag_id, count(*) AS n FROM rfid_stream [range by '10 seconds', slide by '2 seconds'] GROUP BY tag_id",
    "SELECT location, count(DISTINCT tag_id) AS tags FROM rfid_stream [range by '6 seconds', slide by '4 seconds'] "
    "JOIN receptor_locations USING (receptor_id) GROUP BY location",
    "SELECT tag_id, avg(read_strength) AS s FROM rfid_stream [range by '4 seconds'] WHERE receptor_id = 'door1-r1' "
    "GROUP BY tag_id HAVING count(*) > 2",
)


@dataclass
class SubmitFigures:
    nodes: int
    views: int
    submissions: int
    node_plans: int
    plan_p50_ms: float
    plan_p95_ms: float
    submit_p50_ms: float
    submit_p95_ms: float

    def table(self) -> str:
        rows = [("nodes in the MDR", f"{self.nodes}"), ("exported views in the MDR", f"{self.views}"),
                ("queries submitted (each cancelled after)", f"{self.submissions}"),
                ("node plans deployed", f"{self.node_plans}"),
                ("read catalog + plan + place, p50", f"{self.plan_p50_ms:.1f} ms"),
                ("read catalog + plan + place, p95", f"{self.plan_p95_ms:.1f} ms"),
                ("plan + place + disseminate (deployed on every node), p50", f"{self.submit_p50_ms:.1f} ms"),
                ("plan + place + disseminate (deployed on every node), p95", f"{self.submit_p95_ms:.1f} ms")]
        return figures_table(rows)


def run_submit_bench(topology: Topology, submissions: int, fanout: int, levels: int,
                     progress: Callable[[str], None]) -> SubmitFigures:
    from services.embedded import embedded_or_external
    from services.hierarchy import Hierarchy
    from services.placement import load_catalog

    with embedded_or_external() as servers:
        hierarchy = Hierarchy(topology, servers.redis_url, servers.bootstrap)
        try:
            hierarchy.start(progress)
            assert hierarchy.placement is not None
            register_generated(hierarchy.mdr, generated_catalog(fanout, levels), topology.root)
            catalog = load_catalog(hierarchy.mdr)
            progress(f"MDR holds {len(catalog.nodes)} nodes and {len(catalog.views)} views")
            planned, submitted, node_plans = [], [], 0
            for i in range(submissions):
                sql = SUBMITTED[i % len(SUBMITTED)]
                began = time.perf_counter()
                hierarchy.placement.plan(sql)
                planned.append((time.perf_counter() - began) * 1000)
                began = time.perf_counter()
                plan = hierarchy.placement.submit(sql)
                submitted.append((time.perf_counter() - began) * 1000)
                node_plans += sum(not t.reused for t in plan.tasks)
                progress(f"{i + 1}/{submissions}: {submitted[-1]:.0f} ms, {len(plan.tasks)} node plans")
                hierarchy.placement.cancel(plan.query_id)
        finally:
            hierarchy.stop()
    return SubmitFigures(len(catalog.nodes), len(catalog.views), submissions, node_plans,
                         *_percentiles(planned), *_percentiles(submitted))


def run_planning_bench(queries: int = 200, fanout: int = 4, levels: int = 4) -> PlanningFigures:
    catalog = generated_catalog(fanout, levels)
    timings, tasks = [], []
    for i, text in enumerate(_queries(catalog, queries)):
        began = time.perf_counter()
        plan = plan_query(analyze(text, catalog), catalog, f"q{i}")
        timings.append((time.perf_counter() - began) * 1000)
        tasks.append(len(plan.tasks))
    return PlanningFigures(len(catalog.nodes), len(catalog.views), queries, *_percentiles(timings), max(timings),
                           statistics.mean(tasks))
