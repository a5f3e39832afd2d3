"""`hifi bench past`: a query over an hour of a node's archive, by the driver's path and by Spark's.

For each rate (`--rates`, readings a second), one node's shared runtime in this process, with a
live count over its raw topic (so its raw reader runs), is given a synthetic closed hour of
archive: a batch every half second (a reader's trigger) of that rate's readings, 4 receptors,
compacted as a node compacts an hour once it has passed (dsp.runtime.archive). Then a query over the past
(a windowed count of readings per receptor from the hour's start) is deployed twice, by the
driver's path (the archive read batch by batch and pushed through dsp.operators) and by Spark's
(dsp.spark.past: Spark reads the Parquet files as one batch and computes the partials). Printed per
rate and path: seconds of the deploy (the whole past fed), this process tree's CPU-seconds
meanwhile, the windows and readings its answer counted, and whether the two answers are the same
rows (every window's count per receptor).
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from services.bench.report import paired

RECEPTORS = ("r1", "r2", "r3", "r4")
WINDOW_MS = 10_000
BATCH_MS = 500
HOUR_MS = 3_600_000


@dataclass(frozen=True)
class PastRun:
    rate: int            # readings a second in the archived hour
    path: str            # "driver" or "spark"
    seconds: float       # the deploy, its past fed
    cpu_s: float
    windows: int         # (window, receptor) rows of the answer
    counted: int         # readings they counted
    answer: tuple = ()   # the answer's (window start, receptor, count), sorted: compared whole


def run_past_bench(rates: Sequence[int], progress: Callable[[str], None]) -> list[PastRun]:
    from dsp.spark.session import spark_session
    from services.embedded import embedded_or_external

    found = []
    with embedded_or_external() as servers:
        spark = spark_session("hifi-bench-past")
        for rate in rates:
            found += _both_paths(spark, servers.bootstrap, rate, progress)
    return found


def hour_batch(rate: int, batch: int, start_ms: int) -> pa.Table:
    """The `batch`-th half second of the hour: rate / 2 readings in a raw reader's shape."""
    from wire.cycle_columns import RAW_RFID_SCHEMA

    n = max(1, rate * BATCH_MS // 1000)
    rng = np.random.default_rng(batch)
    stamps = start_ms + batch * BATCH_MS + rng.integers(0, BATCH_MS, n)
    columns = {
        "receptor_id": pa.array(np.array(RECEPTORS)[rng.integers(0, len(RECEPTORS), n)]),
        "tag_id": pa.array([f"urn:epc:id:sgtin:0614141.812345.{t}" for t in rng.integers(0, 500, n)]),
        "antenna": pa.array(np.ones(n, np.int32)),
        "read_strength": pa.array(rng.uniform(0.1, 1.0, n)),
        "ts": pa.array(stamps * 1000, pa.timestamp("us", tz="UTC")),
        "cycle": pa.array(np.arange(n, dtype=np.int64) + batch * n),
        "partition": pa.array(np.zeros(n, np.int32)),
        "offset": pa.array(np.arange(n, dtype=np.int64) + batch * n),
    }
    return pa.Table.from_arrays([columns[f.name] if f.name in columns else pa.nulls(n, f.type)
                                 for f in RAW_RFID_SCHEMA], schema=RAW_RFID_SCHEMA)


def _both_paths(spark, bootstrap: str, rate: int, progress: Callable[[str], None]) -> list[PastRun]:
    from base.part_spec import PartSpec
    from base.plan import RAW_RFID_SOURCE_COLUMNS, Aggregate, AggSpec, Source, Window
    from dsp.runtime.archive import hour_of
    from dsp.runtime.shared import SharedRuntime
    from dsp.spark.partials import SparkBatches
    from services.bench.runtime import tree_cpu_s
    from services.judge import topic_rows
    from wire.kafka import admin

    node = f"bp{rate}"
    raw = f"hifi.raw.{node}"
    outs = {path: f"hifi.rqs.past{path}.{node}" for path in ("driver", "spark", "live")}
    admin.ensure_topics(bootstrap, [raw, *outs.values(), f"hifi.dead.{node}"])
    runtime = SharedRuntime(spark, node, bootstrap, tempfile.mkdtemp(prefix="hifi-bench-past-"), trigger_ms=1000)
    source = Source((raw,), "rfid", RAW_RFID_SOURCE_COLUMNS, "ts", 0)
    plan = Aggregate(source, ("receptor_id",), (AggSpec("n", "count"),), None, Window(WINDOW_MS, WINDOW_MS))
    runtime.deploy(PartSpec("live", plan, outs["live"]))   # the raw reader the past queries join
    start_ms = (int(time.time() * 1000) // HOUR_MS - 1) * HOUR_MS   # the hour before this one: closed
    key = f"read:rfid:{raw}"
    progress(f"{rate:,} readings/s: writing an hour of archive ({rate * 3600:,} readings)")
    for batch in range(HOUR_MS // BATCH_MS):
        runtime.archive.append(key, batch, hour_batch(rate, batch, start_ms), now_ms=start_ms + batch * BATCH_MS)
    runtime.archive.compact_closed(hour_of(start_ms + HOUR_MS))
    found = []
    try:
        for path in ("driver", "spark"):
            runtime.spark_batches = SparkBatches(False, 0, 1 if path == "spark" else 0)
            cpu, started = tree_cpu_s(), time.monotonic()
            runtime.deploy(PartSpec(f"past-{path}", plan, outs[path], history_from_ms=start_ms))
            seconds, cpu_s = time.monotonic() - started, tree_cpu_s() - cpu
            rows = [r for r in topic_rows(bootstrap, outs[path]) if r["window_start"] is not None]
            answer = tuple(sorted((str(r["window_start"]), r["receptor_id"], r["n"]) for r in rows))
            found.append(PastRun(rate, path, seconds, cpu_s, len(rows), sum(r["n"] for r in rows), answer))
            progress(f"{rate:,} readings/s, the {path}'s path: {seconds:.1f} s, {cpu_s:.1f} CPU-s, "
                     f"{len(rows)} windows, {found[-1].counted:,} readings")
    finally:
        runtime.stop_all()
    return found


def past_table(runs: list[PastRun]) -> str:
    """
    >>> print(past_table([PastRun(10, "driver", 2.0, 3.0, 4, 9, (1,)), PastRun(10, "spark", 1.0, 2.0, 4, 9, (1,))]))
    | readings/s (an hour) | driver s / CPU-s | Spark s / CPU-s | Spark / driver (time) | windows | answers agree |
    |---|---|---|---|---|---|
    | 10 | 2.0 / 3.0 | 1.0 / 2.0 | 0.50 | 4 | yes |
    """
    lines = ["| readings/s (an hour) | driver s / CPU-s | Spark s / CPU-s | Spark / driver (time) | windows "
             "| answers agree |", "|---|---|---|---|---|---|"]
    for rate, driver, spark in paired(runs, lambda run: run.rate):
        agree = driver.answer == spark.answer
        lines.append(f"| {rate:,} | {driver.seconds:.1f} / {driver.cpu_s:.1f} | {spark.seconds:.1f} / "
                     f"{spark.cpu_s:.1f} | {spark.seconds / driver.seconds:.2f} | {driver.windows} | "
                     f"{'yes' if agree else 'NO'} |")
    return "\n".join(lines)
