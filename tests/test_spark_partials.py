"""Spark's path of a part's per-batch work equals the driver's (dsp.spark.partials against dsp.operators).

Every part of generated plans (the grammar of tests/test_equivalence.py: filters, lookup joins,
windows tumbling and sliding, keys, every aggregate, HAVING, queries over the smoothed view, the
parents' merges of their children's partials and markers) is run bottom-up twice in step: each
batch pushed into the driver's evaluator and into its twin through Spark over the batch as a
DataFrame, the rows each emits and the state each keeps compared after every batch. Some raw
batches carry Data Triage's weights (rows standing for several readings), so the weighted
partials are compared too; the last raw batch brings readings late by then (counted, dropped).
One Spark session, batches as DataFrames: no hierarchy is started.
"""

from __future__ import annotations

import copy
import os
import random
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pyarrow as pa
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F

from base.plan_json import to_json
from dsp.bottom_up import pushed
from dsp.operators.aggregate import AggregateOp
from dsp.operators.build import build
from dsp.operators.core import Operator
from dsp.operators.topic_batch import TOPIC_COLUMN
from dsp.operators.tree import sources_under
from dsp.spark.partials import BatchOnSpark, collect_batch, computable, push
from dsp.spark.partials import plan as plan_on_spark
from glue.analyzer import analyze
from glue.planner import plan_query
from glue.sql.lexer import SqlError
from tests.test_engine import raw_batch
from tests.test_equivalence import (
    CATALOG,
    RELATIONS,
    START_MS,
    TAGS,
    close,
    evaluator_state,
    feeding,
    queries,
    readings,
    run_bottom_up,
    same_table,
    standing_tasks,
)

PLANS = int(os.environ.get("HIFI_SPARK_PLANS", "300"))   # parts of generated queries, each checked both ways
THREADS = 4   # queries checked at once (Spark's small jobs are mostly waiting: 8 were slower)
ROUNDS = 1   # micro-batches per edge (then the sentinel's): each a few hundred rows


def weighted(reads: list[tuple[str, str, float, int]]) -> pa.Table:
    """A raw batch as Data Triage leaves it: some rows stand for several readings (weight 2-4)."""
    table = raw_batch(reads)
    rng = random.Random(len(reads))
    weights = [rng.choice((1, 1, 2, 4)) for _ in range(table.num_rows)]
    return (table.append_column("weight", pa.array(weights, pa.int32()))
            .append_column("partition", pa.array([0] * table.num_rows, pa.int32()))
            .append_column("offset", pa.array(range(table.num_rows), pa.int64())))


def late_too(make: Callable[[list], pa.Table]) -> Callable[[list], pa.Table]:
    """A raw batch maker whose last batch (the sentinel's, run_bottom_up) also brings two readings
    from the data's first seconds: late by then, counted and dropped by both paths alike."""
    def raw(chunk: list) -> pa.Table:
        if len(chunk) == 1 and chunk[0][1] == "sentinel":
            receptor = chunk[0][0]
            chunk = [*chunk, (receptor, TAGS[0], 0.5, START_MS + 100), (receptor, TAGS[1], 0.7, START_MS + 2_100)]
        return make(chunk)
    return raw


@dataclass
class Companion:
    """Another part's share of a batch, as `collect` sees it: only its partials' DataFrame."""

    grouped: object


class BothPaths:
    """run_bottom_up's push: the driver's path, and for a part Spark can compute its twin beside it,
    a round's batches of all its topics in one DataFrame (a shared reader's batch, the topic a
    column; one topic's alone, as a raw reader's)."""

    def __init__(self, spark, plans: set[str]) -> None:
        # only the query's own parts: the standing views' are the same few plans in every query
        self.spark, self.plans, self.twins, self.checked, self.calls = spark, plans, {}, set(), 0

    def __call__(self, root: Operator, batches: list[tuple[str, pa.Table]]) -> list[pa.Table | None]:
        ours = computable(root) and to_json(root.plan) in self.plans   # type: ignore[attr-defined]
        twin = self.twins.setdefault(id(root), copy.deepcopy(root)) if ours else None
        outs = pushed(root, batches)
        if twin is None:
            return outs
        filled = [(topic, table) for topic, table in batches if table.num_rows]
        topics = [topic for topic, _ in filled]
        if not filled or len(set(topics)) < len(topics):   # an empty batch reaches no part in the runtime
            assert all(same_table(a, b) for a, b in zip(pushed(twin, batches), outs, strict=True))
            return outs
        if len(filled) == 1:   # a raw reader's batch: one topic, no topic column
            frame = self.spark.createDataFrame(filled[0][1])
        else:
            frame = self.spark.createDataFrame(pa.concat_tables(
                [table.append_column(TOPIC_COLUMN, pa.array([topic] * table.num_rows)) for topic, table in filled]))
        # a batch of one topic is deferred every other time (its statistics computed with the
        # partials), so both ways of a raw reader's batch are held to the driver's
        self.calls += 1
        batch = BatchOnSpark.progress(frame, topics, sources_under(twin), defer=self.calls % 2 == 0)
        planned = plan_on_spark(twin, batch)
        # computed in the batch's one job beside another part of another shape (collect's union in
        # slots by type): the twin's partials must come back its own
        other = Companion(frame.groupBy().agg(F.count(F.lit(1)).alias("n"), F.max(F.lit("x")).alias("s")))
        got = None if planned is None else planned.finish(collect_batch(batch, [other, planned])[1])
        found = [out for out in outs if out is not None]
        want = pa.concat_tables(found) if found else None
        assert same_table(got, want), (topics, got, want)
        assert close(evaluator_state(twin), evaluator_state(root)), (topics, twin, root)
        self.checked.add(id(root))
        return outs


def generated(count: int) -> list[tuple[str, int, list[str]]]:
    """(sql, seed, its parts Spark can compute) of generated queries until `count` such parts."""
    found: list[tuple[str, int, list[str]]] = []

    @settings(max_examples=count, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
    @given(sql=queries(), seed=st.integers(0, 3))
    def draw(sql: str, seed: int) -> None:
        if sum(len(parts) for _, _, parts in found) >= count:
            return
        try:
            plan = plan_query(analyze(sql, CATALOG), CATALOG, "q")
        except SqlError:
            reject()
        parts = [task.node for task in plan.tasks if computable(build(task.plan, RELATIONS))]
        if parts:
            found.append((sql, seed, parts))

    draw()
    return found


def run_both_ways(spark, sql: str, seed: int) -> tuple[int, int]:
    """The query's parts and the standing ones they read, bottom-up, the query's parts' batches
    both ways; the parts checked, and the rows their twins counted late."""
    plan = plan_query(analyze(sql, CATALOG), CATALOG, "q")
    tasks = feeding(standing_tasks(), [(task.topic, task.plan) for task in plan.tasks])
    both = BothPaths(spark, {to_json(task.plan) for task in plan.tasks})
    run_bottom_up(tasks, readings(seed), raw=late_too(weighted if seed % 2 else raw_batch), batches=ROUNDS, push=both)
    late = sum(evaluator_state(twin)[1] for twin in both.twins.values() if isinstance(twin, AggregateOp))
    return len(both.checked), late


def test_spark_computes_every_batch_of_generated_plans_as_the_driver_does(spark):
    queries_drawn = generated(PLANS)
    parts = sum(len(p) for _, _, p in queries_drawn)
    assert parts >= PLANS, f"only {parts} parts Spark can compute were generated"
    # the queries are independent: four at a time (Spark's jobs are small; its fixed cost per job,
    # ~0.3 s, is mostly waiting)
    # jobs over a few hundred rows: no re-planning (~0.1 s a job) and no code generated for each
    # (every batch's late-row bound is a new literal, a new class to compile): 68 -> 54 s for 60 parts
    settings_here = {"spark.sql.adaptive.enabled": "false", "spark.sql.codegen.wholeStage": "false",
                     "spark.sql.codegen.factoryMode": "NO_CODEGEN"}
    before = {key: spark.conf.get(key, None) for key in settings_here}
    for key, value in settings_here.items():
        spark.conf.set(key, value)
    try:
        with ThreadPoolExecutor(THREADS) as pool:
            checked = list(pool.map(lambda drawn: run_both_ways(spark, drawn[0], drawn[1]), queries_drawn))
    finally:
        for key, value in before.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)
    assert all(n >= len(parts) for (n, _), (_, _, parts) in zip(checked, queries_drawn, strict=True))
    assert sum(late for _, late in checked) > 0, "no twin met a late row"


def test_spark_computes_the_mote_quality_part_as_the_driver_does(spark):
    """A Qualify's per-period means on Spark, the judging on the driver: rows and state equal."""
    from tests.test_mote_quality import POSITIONS, QUALIFY, RAW, grid_samples

    driver, twin = build(QUALIFY, POSITIONS), build(QUALIFY, POSITIONS)
    assert computable(twin)
    for batch in grid_samples()[1]:
        want = driver.push(RAW, batch)
        got = push(twin, BatchOnSpark.progress(spark.createDataFrame(batch), [RAW], sources_under(twin)))
        assert same_table(got, want) and got.num_rows == want.num_rows, (got, want)
        assert (twin.judged, twin.quality.to_json()) == (driver.judged, driver.quality.to_json())
    assert driver.judged == 11


def mixed_parts(count: int) -> list[Operator]:
    """`count` different aggregates over one raw topic: windows, keys and aggregates of their own."""
    from base.plan import RAW_RFID_SOURCE_COLUMNS, Aggregate, AggSpec, Source, Window

    raw = Source(("raw",), "rfid", RAW_RFID_SOURCE_COLUMNS, "ts", 1000)
    shapes = [(("receptor_id",), (AggSpec("n", "count"),)),
              (("tag_id",), (AggSpec("top", "max", "read_strength"), AggSpec("at", "argmax", "receptor_id",
                                                                               "read_strength"))),
              ((), (AggSpec("tags", "count_distinct", "tag_id"), AggSpec("mean", "avg", "read_strength")))]
    return [build(Aggregate(raw, *shapes[i % len(shapes)], None, Window(1000 * (1 + i % 7), 1000 * (1 + i % 7))), {})
            for i in range(count)]


def jobs_of(spark, work: Callable[[], object]) -> int:
    """The Spark jobs `work` ran (its job group's, counted by Spark's status tracker)."""
    group = f"counted-{random.random()}"
    spark.sparkContext.setJobGroup(group, "counted")
    try:
        work()
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
    return len(spark.sparkContext.statusTracker().getJobIdsForGroup(group))


def test_one_job_computes_a_raw_batchs_statistics_and_every_parts_partials_each_its_own(spark):
    """A raw reader's batch (one topic) costs one Spark job, its statistics and every part's
    partials (1 part or 10), and each part's partials taken out of it are its own: its rows and
    state equal the driver's evaluator's."""
    batches = [raw_batch([(f"r{i % 3}", f"t{i % 5}", 0.1 * (i % 9), START_MS + 137 * i + 500 * b)
                          for i in range(60)]) for b in range(2)]
    jobs = {}
    for count in (1, 10):
        fused, driver = mixed_parts(count), mixed_parts(count)
        per_batch = []
        for table in batches:
            frame = spark.createDataFrame(table)
            outs: list = []

            def batch(frame=frame, fused=fused, outs=outs) -> None:
                on_spark = BatchOnSpark.progress(frame, ["raw"], [s for p in fused for s in sources_under(p)],
                                                 defer=True)
                planned = [plan_on_spark(p, on_spark) for p in fused]
                found = collect_batch(on_spark, planned)
                outs.extend(p.finish(f) for p, f in zip(planned, found, strict=True))

            per_batch.append(jobs_of(spark, batch))
            for out, on_driver in zip(outs, driver, strict=True):
                assert same_table(out, on_driver.push("raw", table))
            assert [evaluator_state(p) for p in fused] == [evaluator_state(p) for p in driver]
        jobs[count] = max(per_batch)
    assert jobs == {1: 1, 10: 1}, jobs
