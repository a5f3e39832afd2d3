"""A batch of one form of a node's input, read by Spark's own Kafka source and decoded by its tasks.

Spark's Kafka connector (`spark-sql-kafka-0-10`, fetched by set-up: deploy/jvm/spark) reads the
records of the batch's offset ranges in the JVM; each task's Python worker decodes its records
(`mapInArrow`) with the form's decoder (dsp.spark.kafka_source.RangeDecoder: the intake checks, dead
letters and ingest counts of every other read), so a batch is a DataFrame of the form's rows that
Spark's operators compute on (dsp.spark.partials). The protobuf is decoded in Python rather than
by `from_protobuf` in the JVM: Maven Central serves no `spark-protobuf` to this project's machines.

A task's range is its records' own (first offset to last + 1): Spark splits a partition's new
records among `minPartitions` tasks the same way whenever a batch is replayed, so a replayed range
is fenced and counted as the first read was.
"""

from __future__ import annotations

import hashlib
import json
import os
import urllib.parse
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from dsp.operators.topic_batch import TOPIC_COLUMN
from dsp.spark.kafka_source import KafkaDataSource, KafkaStreamReader
from dsp.spark.lane_offsets import OffsetRange
from wire.kafka import config
from wire.kafka.ranges import Record

Offsets = Mapping[str, int]   # "topic:partition" -> offset
RECORDS_PER_TASK = KafkaStreamReader.RECORDS_PER_TASK   # a partition's batch: tasks of at least this many records
GROUP_PREFIX = "hifi-spark"   # the consumers' group ids begin so (the broker's ACLs: services.kafka_acls)
# How long the broker may hold a fetch that finds nothing new. A read's consumer prefetches past
# the range it read, at the log's end, and the next batch's read waits for that fetch before it
# can seek: at Kafka's default (500 ms) every batch's tasks waited for it (docs/architecture.md).
# A range's records exist already, so a fetch never needs to wait for more.
FETCH_WAIT_MS = 10


def java_client_options(bootstrap: str, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The Kafka source's client settings: the process's broker and credentials (wire.kafka.
    client_security), as the Java client spells them.

    >>> options = java_client_options("b:9092", {"HIFI_KAFKA_USERNAME": "node-d1", "HIFI_KAFKA_PASSWORD": 'p"q',
    ...                                          "HIFI_KAFKA_CA": "/t/ca.pem"})
    >>> options["kafka.security.protocol"], options["kafka.ssl.truststore.type"]
    ('SASL_SSL', 'PEM')
    >>> options["kafka.sasl.jaas.config"]
    'org.apache.kafka.common.security.scram.ScramLoginModule required username="node-d1" password="p\\\\"q";'
    >>> java_client_options("b:9092", {})
    {'kafka.bootstrap.servers': 'b:9092'}
    """
    security = config.client_security(environ)
    options = {"kafka.bootstrap.servers": bootstrap}
    if not security:
        return options

    def quoted(text: str) -> str:
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'

    options |= {
        "kafka.security.protocol": security["security_protocol"],
        "kafka.sasl.mechanism": security["sasl_mechanism"],
        "kafka.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
                                  f"username={quoted(security['sasl_plain_username'])} "
                                  f"password={quoted(security['sasl_plain_password'])};",
    }
    if "ssl_cafile" in security:
        options |= {"kafka.ssl.truststore.type": "PEM", "kafka.ssl.truststore.location": security["ssl_cafile"]}
    return options


def offsets_by_topic(offsets: Offsets) -> dict[str, dict[str, int]]:
    """Offsets as the Kafka source's JSON takes them, topic -> partition -> offset.

    >>> offsets_by_topic({"hifi.raw.d1:0": 5, "hifi.raw.d1:1": 7, "v:0": 0})
    {'hifi.raw.d1': {'0': 5, '1': 7}, 'v': {'0': 0}}
    """
    found: dict[str, dict[str, int]] = {}
    for key, offset in offsets.items():
        topic, _, partition = key.rpartition(":")
        found.setdefault(topic, {})[partition] = offset
    return found


def tasks_for(start: Offsets, end: Offsets, cores: int) -> int:
    """How many tasks read the batch: a partition's records in pieces of RECORDS_PER_TASK or more,
    up to the cores Spark has (at least one a partition).

    >>> tasks_for({"t:0": 0}, {"t:0": 100}, 2), tasks_for({"t:0": 0}, {"t:0": 100_000}, 2)
    (1, 2)
    """
    partitions = sum(1 for key in end if end[key] > start.get(key, end[key]))
    records = sum(max(0, end[key] - start.get(key, end[key])) for key in end)
    return max(partitions, min(cores, records // RECORDS_PER_TASK))


def group_id(node_id: str, form: str) -> str:
    """The consumer group of one form's reads (never committed: the ranges are assigned). The same
    every batch, so that Spark's executors keep the form's consumers, and their authenticated
    connections, from batch to batch (spark.kafka.consumer.cache: its key is the group and the
    partition; a new group per read made every task open, encrypt and authenticate anew).

    >>> group_id("door1", "hifi.raw.door1")
    'hifi-spark-door1-ef179cdd75'
    """
    return f"{GROUP_PREFIX}-{node_id}-{hashlib.sha1(form.encode()).hexdigest()[:10]}"


def read_form(spark: SparkSession, options: Mapping[str, str], start: Offsets, end: Offsets,
              archive_to: str = "", group: str = "") -> DataFrame:
    """Form `options`' (a `hifi_kafka` source's options: dsp.spark.kafka_source) records from `start` to
    `end` as a DataFrame of its rows, read and decoded by Spark's tasks; `archive_to`: a folder
    where the tasks also write the rows they decode (`archived`), for the node's archive; `group`:
    the consumers' group (`group_id`; by default a new one a read)."""
    options = {key: value for key, value in options.items() if key != "handoff_dir"}   # rows, not files
    wanted = {key: stop for key, stop in end.items() if stop > start.get(key, stop)}
    schema = StructType.fromDDL(KafkaDataSource(options).schema())   # parsed here: a worker has no session
    if not wanted:
        return spark.createDataFrame([], schema)
    records = (spark.read.format("kafka").options(**java_client_options(options["bootstrap"]))
               .option("assign", json.dumps({t: [int(p) for p in ps] for t, ps in offsets_by_topic(wanted).items()}))
               .option("startingOffsets", json.dumps(offsets_by_topic({k: start.get(k, 0) for k in wanted})))
               .option("endingOffsets", json.dumps(offsets_by_topic(wanted)))
               .option("includeHeaders", "true").option("groupIdPrefix", GROUP_PREFIX)
               .option("kafka.fetch.max.wait.ms", str(FETCH_WAIT_MS))
               .options(**({"kafka.group.id": group} if group else {}))
               .option("minPartitions", str(tasks_for(start, wanted, spark.sparkContext.defaultParallelism)))
               .option("failOnDataLoss", "true").load()
               .select("topic", "partition", "offset", "timestamp", "value", "headers"))
    return records.mapInArrow(Decode(schema, options, archive_to), schema)


class Decode:
    """A task's records as its form's rows (pickled to the Python workers: the schema and options
    only), each range's rows also written under `archive_to` when it is set."""

    def __init__(self, schema: StructType, options: dict[str, str], archive_to: str = "") -> None:
        self.schema, self.options, self.archive_to = schema, options, archive_to

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        reader = KafkaStreamReader(self.schema, self.options)
        for (topic, partition), records in _records(batches).items():
            rows = list(reader.read(OffsetRange(topic, partition, records[0].offset, records[-1].offset + 1), records))
            if self.archive_to:
                _archive(self.archive_to, topic, f"{partition}-{records[0].offset}", rows)
            yield from rows


def archived(folder: str) -> dict[str, str]:
    """The topics whose rows the tasks wrote under `folder` (read_form's `archive_to`), and each
    one's folder of Parquet files (dsp.runtime.archive.Archive.adopt takes them)."""
    prefix = f"{TOPIC_COLUMN}="
    names = os.listdir(folder) if os.path.isdir(folder) else []
    return {urllib.parse.unquote(name[len(prefix):]): os.path.join(folder, name)
            for name in names if name.startswith(prefix)}


def _archive(folder: str, topic: str, name: str, rows: list[pa.RecordBatch]) -> None:
    """A range's rows in a Parquet file of its topic's folder (the topic column dropped), named
    after the range: a task run again writes the same file again."""
    table = pa.Table.from_batches(rows) if rows else None
    if table is None or not table.num_rows:
        return
    if TOPIC_COLUMN in table.column_names:
        table = table.drop_columns([TOPIC_COLUMN])
    into = os.path.join(folder, f"{TOPIC_COLUMN}={urllib.parse.quote(topic, safe='')}")
    os.makedirs(into, exist_ok=True)
    path, unfinished = os.path.join(into, f"{name}.parquet"), os.path.join(into, f".{name}.parquet.tmp")
    pq.write_table(table, unfinished)   # a name starting with "." is no part of the folder's table
    os.replace(unfinished, path)


def _records(batches: Iterator[pa.RecordBatch]) -> dict[tuple[str, int], list[Record]]:
    """The task's records by partition, in offset order (Kafka's record time in ms)."""
    found: dict[tuple[str, int], list[Record]] = {}
    for batch in batches:
        millis = pc.divide(pc.cast(batch["timestamp"], pa.int64()), 1000).to_pylist()
        columns: list[list[Any]] = [batch[name].to_pylist() for name in ("topic", "partition", "offset", "value",
                                                                         "headers")]
        for topic, partition, offset, value, headers, ms in zip(*columns, millis, strict=True):
            pairs = [(h["key"], h["value"]) for h in headers] if headers else None
            found.setdefault((topic, partition), []).append(Record(offset, ms, value, pairs))
    return found
