"""The DSP's Kafka reader and writer on real Spark and a real broker."""

import gc
import glob
import math
import os
import time

import pytest

from base.part_spec import PartSpec
from base.plan import RAW_RFID_SOURCE_COLUMNS, BinOp, Col, Lit, Project, Source
from dsp.spark.compiler import Ingest
from dsp.spark.manager import DSPManager
from protos import hifi_pb2
from tests.conftest import topic_records, topic_rows, wait_for
from wire.codec import TagObservation, decode_dead_letter, encode_read_cycle
from wire.kafka import admin, clients, consumers, producers
from wire.kafka.ranges import LIBRDKAFKA_FROM, read_range, read_short_ranges
from wire.topics import dead_topic


def _publish_cycles(bootstrap, topic, first_cycle, cycles, reads_per_cycle=3, now=None):
    """Cycles first_cycle.. of receptor r1, stamped `now` (default the clock) - 10 s + cycle ms."""
    producer = producers.make_producer(bootstrap)
    now = now or int(time.time() * 1000)
    for cycle in range(first_cycle, first_cycle + cycles):
        reads = [TagObservation(f"tag-{cycle}-{i}", 1, 0.5) for i in range(reads_per_cycle)]
        key, value = encode_read_cycle("r1", cycle, now - 10_000 + cycle, reads)
        producer.send(topic, key=key, value=value)
    producer.flush()
    producer.close()


def _copy_plan(raw):
    source = Source((raw,), "rfid", RAW_RFID_SOURCE_COLUMNS, "ts", 1000)
    return Project(source, (("receptor_id", Col("receptor_id")), ("tag_id", Col("tag_id")), ("ts", Col("ts"))))


def test_every_record_is_consumed_exactly_once_across_restarts(servers, spark, tmp_path):
    raw, out = "hifi.raw.eo", "hifi.rqs.copy.eo"
    admin.ensure_topics(servers.bootstrap, [raw, out])
    _publish_cycles(servers.bootstrap, raw, 0, 200)
    manager = DSPManager(spark, "eo", servers.bootstrap, str(tmp_path), trigger_ms=500)
    manager.deploy(PartSpec("copy", _copy_plan(raw), out))
    wait_for(lambda: len(topic_rows(servers.bootstrap, out)) >= 600, 90, "the first 600 readings")

    manager.suspend("copy")                       # stop the streaming query, keep its checkpoint
    _publish_cycles(servers.bootstrap, raw, 200, 100)
    manager.resume("copy")
    wait_for(lambda: len(topic_rows(servers.bootstrap, out)) >= 900, 90, "readings after resume")
    manager.stop_all()

    _publish_cycles(servers.bootstrap, raw, 300, 100)
    restarted = DSPManager(spark, "eo", servers.bootstrap, str(tmp_path), trigger_ms=500)  # a node restart
    restarted.deploy(PartSpec("copy", _copy_plan(raw), out))
    wait_for(lambda: len(topic_rows(servers.bootstrap, out)) >= 1200, 90, "readings after a restart")
    time.sleep(2)  # a duplicate would arrive within the next micro-batches
    restarted.stop_all()

    tags = [row["tag_id"] for row in topic_rows(servers.bootstrap, out)]
    expected = {f"tag-{c}-{i}" for c in range(400) for i in range(3)}
    assert len(tags) == len(expected) and set(tags) == expected


def test_malformed_records_are_dead_lettered_and_counted_while_good_ones_flow(servers, spark, mdr, tmp_path):
    node, raw, out = "dl", "hifi.raw.dl", "hifi.rqs.copy.dl"
    admin.ensure_topics(servers.bootstrap, [raw, out, dead_topic(node)])
    manager = DSPManager(spark, node, servers.bootstrap, str(tmp_path), trigger_ms=500,
                         ingest=Ingest(node, raw, servers.redis_url))
    manager.deploy(PartSpec("copy", _copy_plan(raw), out))

    now = int(time.time() * 1000)
    bad = {
        b"garbage \xff\xfe": "undecodable",
        hifi_pb2.RfidReadCycle(receptor_id="r1", cycle=1001, timestamp_ms=now,
                               reads=[hifi_pb2.TagRead(tag_id="x", read_strength=math.nan)]).SerializeToString():
            "read_strength is nan",
        hifi_pb2.RfidReadCycle(receptor_id="r1", cycle=1002, timestamp_ms=now,
                               reads=[hifi_pb2.TagRead(tag_id="x", read_strength=-1.0)]).SerializeToString():
            "negative read_strength",
        hifi_pb2.RfidReadCycle(receptor_id="r1", cycle=1003, timestamp_ms=now + 86_400_000,
                               reads=[hifi_pb2.TagRead(tag_id="x", read_strength=0.4)]).SerializeToString():
            "ahead of the record's arrival",
        hifi_pb2.RfidReadCycle(receptor_id="r1", cycle=1004, timestamp_ms=now,
                               reads=[hifi_pb2.TagRead(tag_id="", read_strength=0.4)]).SerializeToString():
            "missing tag_id",
    }
    _publish_cycles(servers.bootstrap, raw, 0, 50, now=now)
    producer = producers.make_producer(servers.bootstrap)
    for payload in bad:
        producer.send(raw, key=b"bad", value=payload)
    producer.send(raw, key=b"tombstone", value=None)
    producer.flush()
    _publish_cycles(servers.bootstrap, raw, 50, 50)   # good records after the bad ones still flow
    _publish_cycles(servers.bootstrap, raw, 10, 2, now=now)   # cycles 10 and 11 again: duplicates, dropped, counted

    wait_for(lambda: len(topic_rows(servers.bootstrap, out)) >= 300, 90, "good readings past the bad ones")
    stats = wait_for(lambda: (s := mdr.stats(node)).get("dead") == len(bad) + 1 and s.get("duplicates") == 2 and s,
                     30, "dead-letter and duplicate counts")
    assert stats["rows_in"] == 300 and stats["cycles_in"] == 100
    letters = [decode_dead_letter(r.value) for r in topic_records(servers.bootstrap, dead_topic(node))]
    assert len(letters) == len(bad) + 1
    for letter in letters:
        assert letter.node == node and letter.topic == raw
        assert bad.get(letter.payload, "tombstone") in letter.reason
    assert [q.status for q in manager.queries()] == ["running"]
    assert len(topic_rows(servers.bootstrap, out)) == 300
    manager.stop_all()


def test_a_query_that_dies_is_restarted_from_its_checkpoint_without_duplicates(servers, spark, tmp_path):
    """What a Python worker too slow to connect back does to a query on a saturated machine: it
    dies with an error. The manager restarts it; the replayed micro-batch is not written twice."""
    raw, out = "hifi.raw.rs", "hifi.rqs.copy.rs"
    admin.ensure_topics(servers.bootstrap, [raw, out])
    _publish_cycles(servers.bootstrap, raw, 0, 50)
    failed: list[int] = []

    def fail_once(report) -> None:
        if not failed:
            failed.append(report.batch_id)
            raise RuntimeError("a transient failure after the batch was written")

    manager = DSPManager(spark, "rs", servers.bootstrap, str(tmp_path), trigger_ms=500)
    manager.deploy(PartSpec("copy", _copy_plan(raw), out), on_batch=fail_once)
    try:
        wait_for(lambda: (q := manager.queries()[0]).restarts == 1 and q.status == "running", 90,
                 "the query restarted after dying")
        _publish_cycles(servers.bootstrap, raw, 50, 50)
        wait_for(lambda: len(topic_rows(servers.bootstrap, out)) >= 300, 90, "the readings after the restart")
        time.sleep(3)   # a duplicate would arrive by now
        rows = topic_rows(servers.bootstrap, out)
        assert len(rows) == 300 and len({r["tag_id"] for r in rows}) == 300
        assert failed == [0]
    finally:
        manager.stop_all()


def test_the_cause_of_a_failed_query_is_the_python_exception_not_its_wrapper():
    from dsp.spark.manager import failure_cause

    wrapped = ("An exception was raised by the Python Proxy. Return Message: Traceback (most recent call last):\n"
               "  File \"x.py\", line 3, in call\n    raise RuntimeError('disk full')\n"
               "RuntimeError: disk full\n\n\nJVM stacktrace:\norg.apache.spark.SparkException: boom")
    assert failure_cause(wrapped) == "RuntimeError: disk full"
    assert failure_cause("[STREAM_FAILED] Query [id = 1, runId = 2] terminated with exception: no broker\nat x") \
        == "no broker"
    assert failure_cause("") == ""


def test_an_edge_over_its_latency_target_samples_and_every_reading_stays_accounted_for(servers, spark, mdr,
                                                                                       tmp_path):
    """Data Triage on real Spark and a real broker: a backlog far over a 1 ms budget is sampled;
    the approximate windows say so and hold the estimate near the truth; the archive's exact rows
    and the ranges its triage rows name hold every reading published."""
    from kafka import TopicPartition

    from base.plan import Aggregate, AggSpec, Window
    from dsp.operators.aggregate import BOUND_Z
    from dsp.runtime.archive import exact_rows, sampled_ranges
    from dsp.runtime.inputs import READER_PREFIX
    from dsp.runtime.shared import SharedRuntime

    node, raw, out = "tri", "hifi.raw.tri", "hifi.rqs.count.tri"
    admin.ensure_topics(servers.bootstrap, [raw, out, dead_topic(node)])
    now = int(time.time() * 1000)
    _publish_cycles(servers.bootstrap, raw, 0, 6000, reads_per_cycle=5, now=now)   # 30 000 readings, 6 s
    runtime = SharedRuntime(spark, node, servers.bootstrap, str(tmp_path), trigger_ms=500,
                            ingest=Ingest(node, raw, servers.redis_url, triage_ms=1))
    plan = Aggregate(Source((raw,), "rfid", RAW_RFID_SOURCE_COLUMNS, "ts", 0), ("receptor_id",),
                     (AggSpec("n", "count"),), None, Window(2000, 2000), annotate=True)
    runtime.deploy(PartSpec("count", plan, out, start_offsets={f"{raw}:0": 0}))
    stats = wait_for(lambda: (s := mdr.stats(node)).get("triaged") and s, 90, "the records left out counted")
    _publish_cycles(servers.bootstrap, raw, 6000, 1, now=now + 5_000)   # 3 readings 1 s after: closes the windows
    wait_for(lambda: len(topic_rows(servers.bootstrap, out)) >= 3, 60, "the backlog's windows")
    time.sleep(2)
    windows = topic_rows(servers.bootstrap, out)
    archive = list(runtime.archive.batches(0, [f"{READER_PREFIX}rfid:{raw}"]))
    runtime.stop_all()

    assert all(w["triaged"] for w in windows) and stats["triaged"] > 0
    exact = sum(exact_rows(t).num_rows for _, t in archive)
    named = [found for _, t in archive for found in sampled_ranges(t)]
    consumer = consumers.make_consumer(servers.bootstrap)
    cycle = hifi_pb2.RfidReadCycle()
    for partition, start, end in named:
        for record in consumers.poll_range(consumer, TopicPartition(raw, partition), start, end):
            cycle.ParseFromString(record.value)
            exact += len(cycle.reads)
    consumer.close()
    assert named and exact == 6000 * 5 + 3   # every reading: decoded, or in a range named as sampled
    estimate = sum(w["n"] for w in windows)
    spread = math.sqrt(sum((w["error_bound"] / BOUND_Z) ** 2 for w in windows))
    assert abs(estimate - 30_000) <= 5 * spread + 5, (estimate, spread)


def test_a_reader_hands_its_rows_over_in_a_file_exactly_as_it_would_send_them(servers, tmp_path):
    """`handoff_dir` (a local Spark): the range's rows go to the driver in an Arrow file, the same
    rows, and the reader checks a child's rows against its own columns, not the handoff's."""
    import pyarrow as pa
    from pyspark.sql.types import BooleanType, LongType, StringType, StructField, StructType

    from dsp.spark.handoff import HANDOFF_COLUMN, take_handoff
    from dsp.spark.kafka_source import KafkaStreamReader
    from dsp.spark.lane_offsets import OffsetRange
    from wire.codec import encode_row_batch

    topic = "hifi.view.handoff-test.counts"
    admin.ensure_topics(servers.bootstrap, [topic])
    producer = producers.make_producer(servers.bootstrap)
    for batch_id in range(3):
        producer.send(topic, value=encode_row_batch("child", "counts", ["tag_id", "reads"],
                                                    [(f"t{batch_id}", batch_id), ("u", 7)], batch_id, 0))
    producer.send(topic, value=b"not a RowBatch")
    producer.flush()
    rows = StructType([StructField("tag_id", StringType()), StructField("reads", LongType()),
                       StructField("__progress", BooleanType())])
    options = {"bootstrap": servers.bootstrap, "topics": topic, "format": "rows", "markers": "true"}
    plain = KafkaStreamReader(rows, options)
    handing = KafkaStreamReader(StructType([StructField(HANDOFF_COLUMN, StringType()), *rows.fields]),
                                {**options, "handoff_dir": str(tmp_path / "handoff")})
    assert handing.decoder.columns == plain.decoder.columns
    sent = pa.Table.from_batches(list(plain.read(OffsetRange(topic, 0, 0, 4))))
    (named,) = list(handing.read(OffsetRange(topic, 0, 0, 4)))
    taken = take_handoff(pa.Table.from_batches([named]))
    assert taken.to_pylist() == sent.to_pylist() and sent.num_rows == 6
    assert gc.isenabled()   # off only while a range is read (KafkaStreamReader.read)
    assert not list((tmp_path / "handoff").iterdir())   # the file is taken away


def test_a_long_range_read_with_librdkafka_is_the_range_kafka_python_reads(servers):
    from kafka import TopicPartition


    topic = "hifi.raw.range-fetch-test"
    admin.ensure_topics(servers.bootstrap, [topic])
    producer = producers.make_producer(servers.bootstrap)
    for cycle in range(LIBRDKAFKA_FROM + 500):
        producer.send(topic, key=b"r1", value=encode_read_cycle("r1", cycle, 1_800_000_000_000,
                                                                [TagObservation("t", 1, 0.5)])[1],
                      headers=[("hifi-type", b"x")] if cycle % 7 == 0 else None)
    producer.flush()
    start, end = 100, LIBRDKAFKA_FROM + 400   # inside the log: both ends cut a fetch
    ours = [(r.offset, r.value, r.headers or None, r.timestamp)
            for r in read_range(servers.bootstrap, topic, 0, start, end)]
    consumer = consumers.make_consumer(servers.bootstrap)
    theirs = [(r.offset, r.value, r.headers or None, r.timestamp)
              for r in consumers.poll_range(consumer, TopicPartition(topic, 0), start, end)]
    assert ours == theirs and [o for o, *_ in ours] == list(range(start, end))


def test_an_owners_consumer_reads_its_topics_in_turn_keeping_them_assigned_and_is_released(servers):
    """A lane's reads go through a consumer of its own that keeps every partition it read assigned
    (the others paused, wire.kafka.consumers.fetch_only): each range is exactly its records, whatever was read
    before, alone or several at once; releasing the lane closes its consumer."""

    topics = [f"hifi.view.owner{n}-{int(time.time() * 1000)}.v" for n in range(3)]
    admin.ensure_topics(servers.bootstrap, topics)
    producer = producers.make_producer(servers.bootstrap)
    for n, topic in enumerate(topics):
        for offset in range(20):
            producer.send(topic, value=f"{n}:{offset}".encode())
    producer.flush()
    owner = "test-node/stream"
    for start in (0, 5, 10):   # one topic after another, then all three in one fetch
        for topic in topics:
            got = [r.value for r in read_range(servers.bootstrap, topic, 0, start, start + 3, owner=owner)]
            assert got == [f"{topics.index(topic)}:{o}".encode() for o in range(start, start + 3)]
        ranges = [(t, 0, start + 3, start + 5) for t in topics]
        together = read_short_ranges(servers.bootstrap, ranges, owner)
        assert {t: [r.value for r in together[(t, 0, start + 3)]] for t in topics} == {
            t: [f"{n}:{o}".encode() for o in (start + 3, start + 4)] for n, t in enumerate(topics)}
    (key,) = [k for k in clients._owned if k[3] == owner]
    consumer = clients._owned[key]
    assert {tp.topic for tp in consumer.assignment()} == set(topics)
    clients.release(owner)
    assert key not in clients._owned


def _publish_views(bootstrap, topics, first, count):
    """`count` batches of a view's rows on each topic, each followed by its marker; and one record
    that is no row batch (refused by both paths)."""
    import datetime as dt

    from dsp.spark.kafka_sink import new_run, send_marker, send_rows

    producer, run, now = producers.make_producer(bootstrap), new_run(), int(time.time() * 1000)
    futures = []
    for n in range(first, first + count):
        for i, topic in enumerate(topics):
            at = dt.datetime.fromtimestamp((now - 20_000 + n * 100) / 1000, dt.UTC)
            rows = [(at, n), (at, n + 1)]
            futures += send_rows(producer, topic, f"child{i}", "v", ["ts", "reads"], rows, 2 * n + 1, run)
            futures.append(send_marker(producer, topic, f"child{i}", "v", 2 * n + 2, now - 20_000 + n * 100, run))
    futures.append(producer.send(topics[-1], value=b"not a row batch"))
    producers.deliver(producer, futures)
    producer.close()


def _raw_reader(spark, servers, tmp_path):
    from dsp.spark.compiler import CompileContext, reader_options
    from wire.intake import IntakeRules

    raw = "hifi.raw.driver-read"
    admin.ensure_topics(servers.bootstrap, [raw])
    options = reader_options(CompileContext(spark, servers.bootstrap, intake=IntakeRules(),
                                            handoff_dir=str(tmp_path / "handoff")), (raw,), "rfid")
    return options, lambda first: _publish_cycles(servers.bootstrap, raw, first, 20), 3 * 20


def _views_reader(spark, servers, tmp_path):
    from dsp.spark.compiler import CompileContext, reader_options
    from wire.intake import IntakeRules

    topics = tuple(f"hifi.view.child{i}.v" for i in range(3))
    admin.ensure_topics(servers.bootstrap, list(topics))
    options = reader_options(CompileContext(spark, servers.bootstrap, intake=IntakeRules(),
                                            handoff_dir=str(tmp_path / "handoff")), topics, "rows",
                             [("ts", "timestamp"), ("reads", "long")], markers=True, event_time="ts")
    options["topic_column"] = "true"
    return options, lambda first: _publish_views(servers.bootstrap, topics, first // 20, 4), 3 * 4 * 3


@pytest.mark.parametrize("reader", [_raw_reader, _views_reader], ids=["raw", "children's views"])
def test_a_small_batch_read_in_the_driver_is_the_batch_spark_reads(servers, spark, tmp_path, reader):
    """dsp.runtime.shared reads a small micro-batch itself (KafkaStreamReader.read_here), from the bounds
    Spark logged for it (dsp.spark.offset_log): the same rows, of the same types, as Spark's tasks read —
    a raw topic's, and several children's views at once, each row with its topic."""
    from dsp.spark.compiler import kafka_stream
    from dsp.spark.handoff import take_handoff
    from dsp.spark.kafka_source import local_reader
    from dsp.spark.offset_log import batch_bounds

    options, publish, rows_each = reader(spark, servers, tmp_path)
    publish(0)
    here, checkpoint, compared = local_reader(options), str(tmp_path / "spark"), []

    def both(batch, batch_id):
        bounds = batch_bounds(checkpoint, batch_id)
        compared.append((take_handoff(batch.toArrow()), here.read_here(*bounds) if bounds else None))

    query = (kafka_stream(spark, options).writeStream.option("checkpointLocation", checkpoint)
             .trigger(processingTime="300 milliseconds").foreachBatch(both).start())
    try:
        wait_for(lambda: compared, 60, "the first batch")
        for first in (20, 40):   # later batches: bounds in the log
            publish(first)
            expected = rows_each * (first // 20 + 1)
            wait_for(lambda n=expected: sum(t.num_rows for t, _ in compared) >= n, 60, "the batch")
    finally:
        query.stop()
    assert compared[0][1] is None   # batch 0: its start is not logged, Spark reads it
    later = compared[1:]
    assert sum(t.num_rows for t, _ in later) == 2 * rows_each
    for by_spark, by_driver in later:
        assert by_driver is not None
        assert by_driver.to_pylist() == by_spark.to_pylist()
        assert [f.type for f in by_driver.schema] == [f.type for f in by_spark.schema]


def test_large_batches_computed_by_spark_count_and_archive_every_reading(servers, spark, tmp_path, monkeypatch):
    """HIFI_SPARK_BATCH_RECORDS: a backlog's batches go to Spark (dsp.spark.partials). A windowed
    count is computed there and a selection beside it needs the rows (the driver's path for that
    part, in the same batch): both count every reading once, and Spark's tasks archive the batches."""
    from base.plan import Aggregate, AggSpec, Filter, Window
    from dsp.runtime.inputs import READER_PREFIX
    from dsp.runtime.shared import SharedRuntime

    monkeypatch.setenv("HIFI_SPARK_BATCH_RECORDS", "500")
    node, raw, counts, picked = "sp", "hifi.raw.sp", "hifi.rqs.count.sp", "hifi.rqs.pick.sp"
    admin.ensure_topics(servers.bootstrap, [raw, counts, picked, dead_topic(node)])
    now = int(time.time() * 1000)
    _publish_cycles(servers.bootstrap, raw, 0, 2000, reads_per_cycle=4, now=now)   # 8 000 readings over 2 s
    runtime = SharedRuntime(spark, node, servers.bootstrap, str(tmp_path), trigger_ms=500)
    assert runtime.spark_batches.enabled and not runtime.handoff_dir
    source = Source((raw,), "rfid", RAW_RFID_SOURCE_COLUMNS, "ts", 0)
    runtime.deploy(PartSpec("count", Aggregate(source, ("receptor_id",), (AggSpec("n", "count"),), None,
                                               Window(500, 500)), counts, start_offsets={f"{raw}:0": 0}))
    runtime.deploy(PartSpec("pick", Filter(_copy_plan(raw), BinOp("=", Col("tag_id"), Lit("tag-7-1"))), picked,
                            start_offsets={f"{raw}:0": 0}))
    wait_for(lambda: runtime.spark_batches_taken > 0, 90, "a batch computed by Spark")
    _publish_cycles(servers.bootstrap, raw, 4000, 1, now=now + 2_000)   # a reading 2 s on: closes the windows
    wait_for(lambda: sum(r["n"] for r in topic_rows(servers.bootstrap, counts)) >= 8000, 90, "every window")
    time.sleep(1)
    windows = topic_rows(servers.bootstrap, counts)
    rows = topic_rows(servers.bootstrap, picked)
    archived = list(runtime.archive.batches(0, [f"{READER_PREFIX}rfid:{raw}"]))
    runtime.stop_all()

    buckets = {(now - 10_000 + cycle) // 500 for cycle in range(2000)}
    assert sum(w["n"] for w in windows) == 8000 and len({w["window_start"] for w in windows}) == len(buckets)
    assert [r["tag_id"] for r in rows] == ["tag-7-1"]
    assert sum(t.num_rows for _, t in archived) == 8003
    folders = glob.glob(os.path.join(str(tmp_path), "**", "archive", "*", "*", "*.parquet"), recursive=True)
    assert any(os.path.isdir(path) for path in folders), "no batch was archived by Spark's tasks"


def test_a_query_over_the_past_computed_by_spark_equals_the_drivers(servers, spark, tmp_path):
    """dsp.spark.past: an archive of the end of a closed (compacted) hour and the start of this
    one (a file a batch). A windowed count over the past from inside the closed hour (its row
    groups, then the files) and from the closed hour's start (its compacted file whole), deployed
    by the driver's path and by Spark's: the same windows, each reading counted once."""
    from base.plan import Aggregate, AggSpec, Window
    from dsp.runtime.archive import HOUR_MS, hour_of
    from dsp.runtime.inputs import READER_PREFIX
    from dsp.runtime.shared import SharedRuntime
    from dsp.spark.partials import SparkBatches
    from services.bench.past import BATCH_MS, hour_batch

    node, raw = "pa", "hifi.raw.pa"
    outs = {name: f"hifi.rqs.{name}.pa" for name in ("live", "driver-in", "spark-in", "driver-whole", "spark-whole")}
    admin.ensure_topics(servers.bootstrap, [raw, *outs.values(), dead_topic(node)])
    runtime = SharedRuntime(spark, node, servers.bootstrap, str(tmp_path), trigger_ms=500)
    plan = Aggregate(Source((raw,), "rfid", RAW_RFID_SOURCE_COLUMNS, "ts", 0), ("receptor_id",),
                     (AggSpec("n", "count"),), None, Window(10_000, 10_000))
    runtime.deploy(PartSpec("live", plan, outs["live"]))
    # the last hour's turn at least two minutes ago: every archived batch is past and the span from
    # `inside` is a minute or more (Spark's path below takes pasts of a minute on), whenever this runs
    this_hour = (int(time.time() * 1000) - 120_000) // HOUR_MS * HOUR_MS
    key, batches = f"{READER_PREFIX}rfid:{raw}", 120   # a minute each side of the hour's turn
    first = HOUR_MS // BATCH_MS - batches
    for batch in range(first, first + 2 * batches):
        taken = this_hour - HOUR_MS + batch * BATCH_MS
        runtime.archive.append(key, batch, hour_batch(40, batch, this_hour - HOUR_MS), now_ms=taken)
    runtime.archive.compact_closed(hour_of(this_hour))   # as the node does (it may have begun already)
    inside = this_hour - 30_000
    assert any(not isinstance(where, str) for _, where in runtime.archive.stored(inside, [key]))
    answers = {}
    try:
        for name, since in (("in", inside), ("whole", this_hour - HOUR_MS)):
            for path in ("driver", "spark"):
                runtime.spark_batches = SparkBatches(False, 0, 1 if path == "spark" else 0)
                runtime.deploy(PartSpec(f"{path}-{name}", plan, outs[f"{path}-{name}"], history_from_ms=since))
                answers[path, name] = sorted((r["window_start"], r["receptor_id"], r["n"])
                                             for r in topic_rows(servers.bootstrap, outs[f"{path}-{name}"]))
        taken = runtime.spark_batches_taken
    finally:
        runtime.stop_all()
    assert taken == 2   # each past by Spark's path once, as one batch
    per_batch = 40 * BATCH_MS // 1000
    for name, readings in (("in", (2 * batches - 60) * per_batch), ("whole", 2 * batches * per_batch)):
        assert answers["driver", name] == answers["spark", name]
        # every reading once, but those of the newest window (still open: the live stream closes it)
        assert readings - 10 * 40 <= sum(n for *_, n in answers["spark", name]) < readings


def test_spark_reads_the_past_of_whole_batch_files_and_of_a_topics_own_files(spark, tmp_path):
    """dsp.spark.past: a whole batch's file tags each row with its topic (the part's topics of it
    kept), a topic's own file (an older layout, Spark's tasks') is its one topic's."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from dsp.operators.topic_batch import TOPIC_COLUMN
    from dsp.spark.past import archived_frame

    whole = str(tmp_path / "whole.parquet")
    pq.write_table(pa.table({"n": [1, 2, 3], TOPIC_COLUMN: ["a", "b", "c"]}), whole)
    frame = archived_frame(spark, [("form", whole), ("form~d", pa.table({"n": [4]}))],
                           {"form": ["a", "c"], "form~d": ["d"]})
    assert sorted((r["n"], r[TOPIC_COLUMN]) for r in frame.collect()) == [(1, "a"), (3, "c"), (4, "d")]
