"""The past on Spark: a part's archived batches (dsp.runtime.archive) read by Spark as one batch.

A part deployed over the past (`hifi query --since`, a replay) is first fed what the readers it
joins archived from then on (dsp.runtime.history_feed). The driver's path reads the archive batch by
batch and pushes each (dsp.operators). When Spark computes the part (`spark_partials.computable`,
and `SparkBatches.past`), Spark reads the archive's Parquet files themselves — each batch's file
or folder, a closed hour's compacted file whole — as one DataFrame with each row's topic, and the
part takes it as one batch (`spark_partials.push(..., together=True)`): the partials are computed
on the executors, only one row per group and window comes back, and the part then joins the live
stream at the next batch as on the driver's path.

Late rows: as one batch, no row of the past is late against another: every archived row is in
its window, and every row is judged against the bound the part had before its past (none, for a
new part). The driver's path keeps the rows that came up to the latest lateness the archive shows
(capped at 10 minutes: dsp.runtime.history_feed's HISTORY_LATENESS_CAP_MS), so the two differ only for a row
that came over 10 minutes late, which the intake refuses by default (its max_behind).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import reduce

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from dsp.operators.topic_batch import TOPIC_COLUMN


def archived_frame(spark: SparkSession, stored: Sequence[tuple[str, str | pa.Table]],
                   topics_of: Mapping[str, Sequence[str]]) -> DataFrame | None:
    """One DataFrame of the archived batches `stored` names (dsp.runtime.archive.Archive.stored: paths
    Spark reads, tables of a compacted hour's row groups), each row with its topic in the topic
    column: a whole batch's file has it (only `topics_of` its key's rows are kept), a topic's
    file is its key's one topic's; None when there is none."""
    paths: dict[str, list[str]] = {}
    tables: dict[str, list[pa.Table]] = {}
    for key, where in stored:
        if isinstance(where, str):
            paths.setdefault(key, []).append(where)
        else:
            tables.setdefault(key, []).append(where)
    frames = [_topics(spark.read.option("mergeSchema", "true").parquet(*found), topics_of[key])
              for key, found in paths.items()]
    frames += [_topics(spark.createDataFrame(pa.concat_tables(found, promote_options="default")), topics_of[key])
               for key, found in tables.items()]
    if not frames:
        return None
    return reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), frames)


def _topics(frame: DataFrame, topics: Sequence[str]) -> DataFrame:
    """An archive key's rows with their topic: those of `topics` (a whole batch's file tags each
    row), else all of its one topic's (a topic's own file)."""
    if TOPIC_COLUMN in frame.columns:
        return frame.where(F.col(TOPIC_COLUMN).isin(list(topics)))
    return frame.withColumn(TOPIC_COLUMN, F.lit(topics[0]))
