"""`hifi bench batches`: where Spark's fixed cost pays off — a backlog drained by the driver's path and by Spark's.

For each backlog size (`--backlogs`, readings), one node's shared runtime in this process drains a
raw topic holding that many readings (the supply-chain mix, capacity.mixed_cycles) with a windowed
count of readings per receptor, twice: the **driver's path** (the readers hand their rows over in
files and the driver's Arrow engine computes, dsp.operators) and **Spark's** (HIFI_SPARK_BATCH_RECORDS=1:
Spark computes the part's partials over the batch's DataFrame and its tasks archive it,
dsp.spark.partials). Printed per size and path: seconds from the deploy to the last window's count
and the CPU-seconds of this process tree meanwhile (driver, JVM, Python workers), and whether the
counts of the two paths agree. Both paths run in one Spark session, one after the other, in one run.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from services.bench.report import paired

RECEPTORS = ("r1", "r2", "r3", "r4")
WINDOW_MS = 2_000


@dataclass(frozen=True)
class Drain:
    backlog: int          # readings published
    path: str             # "driver" or "spark"
    seconds: float        # deploy -> every window counted
    cpu_s: float          # this process tree's CPU-seconds meanwhile
    counted: int          # readings the windows counted
    spark_batches: int    # batches Spark computed


def run_batches_bench(backlogs: Sequence[int], progress: Callable[[str], None]) -> list[Drain]:
    from dsp.spark.session import spark_session
    from services.embedded import embedded_or_external

    found = []
    with embedded_or_external() as servers:
        spark = spark_session("hifi-bench-batches")
        for backlog in backlogs:
            for path in ("driver", "spark"):
                drain = _drain(spark, servers.bootstrap, backlog, path)
                progress(f"{backlog:,} readings by the {path}'s path: {drain.seconds:.1f} s, "
                         f"{drain.cpu_s:.1f} CPU-s, {drain.counted:,} counted")
                found.append(drain)
    return found


def _publish(bootstrap: str, topic: str, backlog: int, start_ms: int, first: int = 0) -> int:
    """About `backlog` readings of the supply-chain mix, stamped 50 read cycles a millisecond from
    `start_ms`, numbered from `first` (intake drops a cycle number it has seen); how many."""
    from services.bench.capacity import mixed_cycles
    from wire.codec import encode_read_cycle
    from wire.kafka import producers

    total, n = 0, first
    pool = mixed_cycles(list(RECEPTORS), 4_000)
    producer = producers.make_producer(bootstrap)
    while total < backlog:
        receptor, reads = pool[n % len(pool)]
        key, value = encode_read_cycle(receptor, n, start_ms + (n - first) // 50, reads)
        producer.send(topic, key=key, value=value)
        total, n = total + len(reads), n + 1
    producer.flush()
    producer.close()
    return total


def _drain(spark, bootstrap: str, backlog: int, path: str) -> Drain:
    from base.part_spec import PartSpec
    from base.plan import RAW_RFID_SOURCE_COLUMNS, Aggregate, AggSpec, Source, Window
    from dsp.runtime.shared import SharedRuntime
    from services.bench.runtime import tree_cpu_s
    from services.judge import topic_rows
    from wire.kafka import admin

    node = f"bb{backlog}{path[0]}"
    raw, out = f"hifi.raw.{node}", f"hifi.rqs.count.{node}"
    admin.ensure_topics(bootstrap, [raw, out, f"hifi.dead.{node}"])
    start_ms = int(time.time() * 1000) - 120_000   # inside the intake's 10 minutes behind
    published = _publish(bootstrap, raw, backlog, start_ms)
    _publish(bootstrap, raw, 1, start_ms + 60_000, first=10**9)   # a minute on: closes every window before it
    previous = os.environ.get("HIFI_SPARK_BATCH_RECORDS")
    os.environ["HIFI_SPARK_BATCH_RECORDS"] = "1" if path == "spark" else "0"
    try:
        runtime = SharedRuntime(spark, node, bootstrap, tempfile.mkdtemp(prefix="hifi-bench-batches-"), trigger_ms=500)
    finally:
        if previous is None:
            os.environ.pop("HIFI_SPARK_BATCH_RECORDS", None)
        else:
            os.environ["HIFI_SPARK_BATCH_RECORDS"] = previous
    plan = Aggregate(Source((raw,), "rfid", RAW_RFID_SOURCE_COLUMNS, "ts", 0), ("receptor_id",),
                     (AggSpec("n", "count"),), None, Window(WINDOW_MS, WINDOW_MS))
    cpu, started = tree_cpu_s(), time.monotonic()
    runtime.deploy(PartSpec("count", plan, out, start_offsets={f"{raw}:0": 0}))
    counted = 0
    deadline = started + 600
    while time.monotonic() < deadline:
        counted = sum(r["n"] for r in topic_rows(bootstrap, out))
        if counted >= published:
            break
        time.sleep(0.5)
    seconds, cpu_s = time.monotonic() - started, tree_cpu_s() - cpu
    taken = runtime.spark_batches_taken
    runtime.stop_all()
    return Drain(backlog, path, seconds, cpu_s, counted, taken)


def batches_table(drains: list[Drain]) -> str:
    """
    >>> print(batches_table([Drain(10, "driver", 2.0, 3.0, 10, 0), Drain(10, "spark", 4.0, 5.0, 10, 1)]))
    | backlog | driver s / CPU-s | Spark s / CPU-s | Spark / driver (time) | counts agree | Spark batches |
    |---|---|---|---|---|---|
    | 10 | 2.0 / 3.0 | 4.0 / 5.0 | 2.00 | yes | 1 |
    """
    lines = ["| backlog | driver s / CPU-s | Spark s / CPU-s | Spark / driver (time) | counts agree | Spark batches |",
             "|---|---|---|---|---|---|"]
    for backlog, driver, spark in paired(drains, lambda drain: drain.backlog):
        lines.append(f"| {backlog:,} | {driver.seconds:.1f} / {driver.cpu_s:.1f} | {spark.seconds:.1f} / "
                     f"{spark.cpu_s:.1f} | {spark.seconds / driver.seconds:.2f} | "
                     f"{'yes' if driver.counted == spark.counted else 'NO'} | {spark.spark_batches} |")
    return "\n".join(lines)
