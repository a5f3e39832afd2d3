"""The past on Spark: a part's archived batches (dsp.archive) read by Spark as one batch.

A part deployed over the past (`hifi query --since`, a replay) is first fed what the readers it
joins archived from then on (dsp.history_feed). The driver's path reads the archive batch by
batch and pushes each (dsp.engine). When Spark computes the part (`spark_partials.computable`,
and `SparkBatches.past`), Spark reads the archive's Parquet files themselves — each batch's file
or folder, a closed hour's compacted file whole — as one DataFrame with each row's topic, and the
part takes it as one batch (`spark_partials.push(..., together=True)`): the partials are computed
on the executors, only one row per group and window comes back, and the part then joins the live
stream at the next batch as on the driver's path.

Late rows: as one batch, no row of the past is late against another: every archived row is in
its window, and every row is judged against the bound the part had before its past (none, for a
new part). The driver's path keeps the rows that came up to the latest lateness the archive shows
(capped at 10 minutes: dsp.history_feed's HISTORY_LATENESS_CAP_MS), so the two differ only for a row
that came over 10 minutes late, which the intake refuses by default (its max_behind).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import reduce

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from dsp.kafka_source import TOPIC_COLUMN


def archived_frame(spark: SparkSession, stored: Sequence[tuple[str, str | pa.Table]],
                   topic_of: Mapping[str, str]) -> DataFrame | None:
    """One DataFrame of the archived batches `stored` names (dsp.archive.Archive.stored: paths
    Spark reads, tables of a compacted hour's row groups), each row with its reader key's topic
    (`topic_of`) in the topic column; None when there is none."""
    paths: dict[str, list[str]] = {}
    tables: dict[str, list[pa.Table]] = {}
    for key, where in stored:
        if isinstance(where, str):
            paths.setdefault(key, []).append(where)
        else:
            tables.setdefault(key, []).append(where)
    frames = [spark.read.option("mergeSchema", "true").parquet(*found).withColumn(TOPIC_COLUMN, F.lit(topic_of[key]))
              for key, found in paths.items()]
    frames += [spark.createDataFrame(pa.concat_tables(found, promote_options="default"))
               .withColumn(TOPIC_COLUMN, F.lit(topic_of[key])) for key, found in tables.items()]
    if not frames:
        return None
    return reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), frames)
