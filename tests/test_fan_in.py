"""A node's Spark queries do not grow with its children nor with its forms of input (dsp.runtime.shared):
every topic it reads is read by its one stream, a lane of its process's one streaming query
(dsp.runtime.process_stream), each part handed the rows of the topics it reads; a child added is a topic
added to that running query, one taken away shrinks it; nothing is lost or doubled across the
change, and a node restarted on its state resumes where it stopped."""

import contextlib
import datetime as dt
import os
import threading
import time

import pytest

from base.part_spec import PartSpec
from base.plan import BinOp, Col, Filter, Lit, Source
from dsp.runtime.inputs import READER_PREFIX, Reader, stream_key
from dsp.runtime.process_stream import QUERY_ID, ProcessStream
from dsp.runtime.shared import SharedRuntime
from tests.conftest import topic_rows, wait_for
from wire.codec import encode_row_batch
from wire.kafka import admin, clients, producers

COLUMNS = (("window_start", "timestamp"), ("tag_id", "string"), ("reads", "long"))
OTHER_SHAPE = (("window_start", "timestamp"), ("tag_id", "string"), ("seen", "long"))
NOW = dt.datetime.now(dt.UTC).replace(microsecond=0)


def _plan(topics: list[str], columns: tuple = COLUMNS) -> Filter:
    return Filter(Source(tuple(topics), "rows", columns, "window_start", 0), BinOp(">=", Col(columns[2][0]), Lit(0)))


def _send(bootstrap: str, topic: str, first: int, count: int, columns: tuple = COLUMNS) -> None:
    producer = clients.shared_producer(bootstrap)
    child = topic.rsplit(".", 2)[-2]
    names = [name for name, _ in columns]
    values = [encode_row_batch(child, "v", names, [(NOW, f"{child}-{n}", n)], n, 0, run="r")
              for n in range(first, first + count)]
    producers.deliver(producer, [producer.send(topic, value=value) for value in values])


def _readers(runtime: SharedRuntime) -> list[str]:
    """The Spark queries reading the node's inputs (the node's own queries read none of them)."""
    assert not [q for q in runtime.spark_queries.queries() if q.query_id.startswith(READER_PREFIX)]
    return [q.query_id for q in runtime.stream.manager.queries()]


def _tags(bootstrap: str, topic: str) -> list[str]:
    return sorted(row["tag_id"] for row in topic_rows(bootstrap, topic))


def test_many_children_are_one_query_and_a_child_added_or_taken_away_loses_nothing(servers, spark, tmp_path):
    children = [f"hifi.view.fan{n}.v" for n in range(6)]
    other, other_out = "hifi.view.fan-other.v", "hifi.rqs.fan-other.parent"
    first_out, second_out = "hifi.rqs.fan-first.parent", "hifi.rqs.fan-second.parent"
    admin.ensure_topics(servers.bootstrap, [*children, other, first_out, second_out, other_out])
    for topic in children:
        _send(servers.bootstrap, topic, 0, 3)
    _send(servers.bootstrap, other, 0, 3, OTHER_SHAPE)
    runtime = SharedRuntime(spark, "fan-parent", servers.bootstrap, str(tmp_path), trigger_ms=500)
    try:
        runtime.deploy(PartSpec("first", _plan(children[:4]), first_out))
        assert len(_readers(runtime)) == 1
        wait_for(lambda: len(topic_rows(servers.bootstrap, first_out)) >= 12, 90, "the first four children's rows")
        # a view of another shape: another form of input, the same query
        runtime.deploy(PartSpec("other", _plan([other], OTHER_SHAPE), other_out))
        assert _readers(runtime) == [QUERY_ID] and runtime.inputs.streams == {stream_key()}
        assert len(runtime.inputs.readers) == 2
        wait_for(lambda: len(topic_rows(servers.bootstrap, other_out)) >= 3, 60, "the other shape's rows")

        # two children more, read by a second part: the same reader, its topics added
        runtime.deploy(PartSpec("second", _plan(children[2:]), second_out, start_offsets={f"{children[4]}:0": 1}))
        assert len(_readers(runtime)) == 1
        for topic in children:
            _send(servers.bootstrap, topic, 3, 2)
        wait_for(lambda: len(topic_rows(servers.bootstrap, second_out)) >= 2 * 2 + 4 + 5, 90,
                 lambda: f"the second part's rows: {_tags(servers.bootstrap, second_out)}, "
                         f"{[(q.query_id, q.status, q.error) for q in runtime.queries()]} "
                         f"{[(q.query_id, q.status, q.error) for q in runtime.spark_queries.queries()]} "
                         f"{runtime.inputs.readers}")
        wait_for(lambda: len(topic_rows(servers.bootstrap, first_out)) >= 4 * 5, 60, "the first part's new rows")
        time.sleep(2)
        first = _tags(servers.bootstrap, first_out)
        second = _tags(servers.bootstrap, second_out)
        assert first == sorted(f"fan{c}-{n}" for c in range(4) for n in range(5))
        # fan2, fan3 from the reader's position; fan4 where its start offset says; fan5 from its start
        assert second == sorted([f"fan{c}-{n}" for c in (2, 3) for n in (3, 4)]
                                + [f"fan4-{n}" for n in range(1, 5)] + [f"fan5-{n}" for n in range(5)])

        # the first part goes: the reader keeps only the second's topics
        runtime.cancel("first")
        runtime.cancel("other")
        assert _readers(runtime) == [QUERY_ID]
        (form,) = runtime.inputs.readers.values()
        assert form.topics == tuple(children[2:])
        for topic in children:
            _send(servers.bootstrap, topic, 5, 1)
        wait_for(lambda: len(topic_rows(servers.bootstrap, second_out)) >= len(second) + 4, 60, "rows after the cancel")
    finally:
        runtime.stop_all()

    # the node again, on its state: the second part resumes, nothing doubled
    for topic in children:
        _send(servers.bootstrap, topic, 6, 1)
    again = SharedRuntime(spark, "fan-parent", servers.bootstrap, str(tmp_path), trigger_ms=500)
    try:
        again.deploy(PartSpec("second", _plan(children[2:]), second_out, start_offsets={f"{children[4]}:0": 1}))
        wait_for(lambda: len(topic_rows(servers.bootstrap, second_out)) >= len(second) + 8, 90, "rows after restart")
        time.sleep(2)
        tags = [row["tag_id"] for row in topic_rows(servers.bootstrap, second_out)]
        assert len(tags) == len(set(tags)) == len(second) + 8
    finally:
        again.stop_all()


def test_a_lane_detached_while_its_part_of_a_batch_runs_lets_go_once_that_part_is_done(servers, spark, tmp_path):
    """A node stopped and started again in one process (a supervisor's restart, `hifi up`): the new
    node loads what the old one saved, so the old one's batch must be over before the stop returns."""
    topic = f"hifi.view.detach{int(time.time() * 1000)}.v"
    admin.ensure_topics(servers.bootstrap, [topic])
    stream = ProcessStream(spark, str(tmp_path / "home"), servers.bootstrap, trigger_ms=500)
    entered, release, done = threading.Event(), threading.Event(), threading.Event()

    def slow(batch_id: int, ends: dict, identity: str, fetched: dict) -> None:
        entered.set()
        release.wait(30)
        done.set()

    stream.attach("stopping", [topic], slow)
    stream.attach("staying", [topic], lambda batch_id, ends, identity, fetched: None)
    try:
        _send(servers.bootstrap, topic, 0, 1)
        wait_for(entered.is_set, 90, "the lane's part of a batch")
        stopping = threading.Thread(target=stream.detach, args=("stopping",))
        stopping.start()
        stopping.join(1.0)
        assert stopping.is_alive() and not done.is_set(), "the detach waits for the lane's part of the batch"
        release.set()
        stopping.join(10)
        assert not stopping.is_alive() and done.is_set()
    finally:
        release.set()
        stream.detach("stopping")
        stream.detach("staying")


def test_a_batchs_lanes_start_in_their_order_the_parents_first_with_their_ranges_fetched_at_once(servers, spark,
                                                                                                  tmp_path):
    """A parent reads what its children sent in the batch before: its lane goes first in each
    batch (a node's order is its depth, services.node), whatever order the lanes were attached in.
    The ranges the lanes say they read are fetched for them in one go before they run
    (dsp.runtime.lane_fetch): each lane is handed its records, a partition two lanes read to the first."""
    from concurrent.futures import ThreadPoolExecutor

    from dsp.spark.lane_offsets import OffsetRange, split_partition_key

    topic, other = (f"hifi.view.order{name}{int(time.time() * 1000)}.v" for name in ("a", "b"))
    admin.ensure_topics(servers.bootstrap, [topic, other])
    stream = ProcessStream(spark, str(tmp_path / "home"), servers.bootstrap, trigger_ms=500)
    stream._pool = ThreadPoolExecutor(1)   # one lane at a time: the order they start in is the order they run in
    started: list[tuple[int, str]] = []   # (batch id, lane) as the lanes start
    handed: dict[tuple[int, str], dict] = {}   # what each lane was handed, by batch

    def lane(name: str):
        def on_batch(batch_id: int, ends: dict, identity: str, fetched: dict) -> None:
            started.append((batch_id, name))
            handed[batch_id, name] = fetched
        return on_batch

    def last_record(batch_id: int, ends: dict, identity: str) -> list[OffsetRange]:
        return [OffsetRange(*split_partition_key(key), end - 1, end) for key, end in ends.items() if end > 0]

    for name, order, topics in (("door", 0, [topic]), ("warehouse", 1, [topic, other]), ("region", 2, [topic])):
        stream.attach(name, topics, lane(name), order=2 - order, ranges=last_record)   # attached children first
    try:
        _send(servers.bootstrap, other, 0, 1)
        _send(servers.bootstrap, topic, 0, 1)
        wait_for(lambda: len(started) >= 3, 90, "a batch")
        _send(servers.bootstrap, other, 1, 1)
        _send(servers.bootstrap, topic, 1, 1)   # a batch runs when its topics moved
        wait_for(lambda: len(started) >= 6, 60, "a second batch")
        for batch_id in {b for b, _ in started[:6]}:
            assert [name for b, name in started if b == batch_id] == ["region", "warehouse", "door"]
        both = [b for b, name in started if name == "warehouse" and any(k[0] == other for k in handed[b, name])]
        assert both, f"no batch fetched for its lanes: {handed}"
        region, warehouse, door = (handed[both[0], name] for name in ("region", "warehouse", "door"))
        assert [k[0] for k in region] == [topic] and [k[0] for k in warehouse] == [other] and door == {}
        assert all(len(records) == 1 and records[0].offset == k[2] for k, records in [*region.items(),
                                                                                         *warehouse.items()])
    finally:
        for name in ("door", "warehouse", "region"):
            stream.detach(name)


def test_lanes_take_turns_and_one_waiting_for_its_node_steps_aside_for_the_others(servers, spark, tmp_path):
    """A batch's lanes run one at a time (dsp.turns); a lane whose node runs a control operation
    (a deploy goes first: dsp.runtime.control_first) waits without holding the lanes after it."""
    from dsp.runtime.control_first import ControlFirstLock

    topic = f"hifi.view.turns{int(time.time() * 1000)}.v"
    admin.ensure_topics(servers.bootstrap, [topic])
    stream = ProcessStream(spark, str(tmp_path / "home"), servers.bootstrap, trigger_ms=500)
    node_lock = ControlFirstLock()
    at_once, most, ran = [0], [0], []
    guard = threading.Lock()

    def lane(name: str):
        def on_batch(batch_id: int, ends: dict, identity: str, fetched: dict) -> None:
            with node_lock.batch() if name == "deploying" else contextlib.nullcontext():
                with guard:
                    at_once[0] += 1
                    most[0] = max(most[0], at_once[0])
                time.sleep(0.05)
                with guard:
                    at_once[0] -= 1
                    ran.append(name)
        return on_batch

    names = ["deploying", "a", "b", "c"]
    for name in names:
        stream.attach(name, [topic], lane(name))
    try:
        with node_lock.control():   # a deploy holds the "deploying" lane's node
            _send(servers.bootstrap, topic, 0, 1)
            wait_for(lambda: ran == ["a", "b", "c"], 90, lambda: f"the other lanes, while one waits (ran {ran})")
        wait_for(lambda: len(ran) == 4, 30, "the waiting lane, once the deploy is done")
        assert ran[-1] == "deploying" and most[0] == 1   # never two lanes at once
    finally:
        for name in names:
            stream.detach(name)


@pytest.mark.parametrize("layout", ["a reader per topic", "a reader per form", "one stream per node"])
def test_a_node_of_an_older_layout_resumes_each_topic_where_its_own_reader_saved_it(servers, spark, tmp_path, layout):
    """A node that ran a Spark query per topic (before readers were shared), per form (before the
    node's one stream) or per node (before the process's one stream) left a fence per query and
    their offset logs: the node's stream starts each topic where that query's fenced batch ended."""
    topic, out = f"hifi.view.old-layout{len(layout)}.v", f"hifi.rqs.old-layout{len(layout)}.parent"
    admin.ensure_topics(servers.bootstrap, [topic, out])
    _send(servers.bootstrap, topic, 0, 5)
    runtime = SharedRuntime(spark, "old-layout", servers.bootstrap, str(tmp_path), trigger_ms=500)
    old_key = (f"{READER_PREFIX}rows:{topic}" if layout.endswith("topic") else stream_key() if layout.endswith("node")
               else Reader((topic,), "rows", COLUMNS).key)
    log_dir = runtime.spark_queries.spark_checkpoint(old_key) + "/offsets"
    os.makedirs(log_dir)
    with open(f"{log_dir}/7", "w") as fh:
        fh.write('v1\n{"batchWatermarkMs":0}\n{"' + topic + ':0":3}')
    runtime.checkpoint.fences[old_key] = 7
    runtime._save()
    again = SharedRuntime(spark, "old-layout", servers.bootstrap, str(tmp_path), trigger_ms=500)
    try:
        again.deploy(PartSpec("q", _plan([topic]), out))
        wait_for(lambda: len(topic_rows(servers.bootstrap, out)) >= 2, 60, "the rows after the old reader's fence")
        time.sleep(2)
        assert _tags(servers.bootstrap, out) == [f"old-layout{len(layout)}-3", f"old-layout{len(layout)}-4"]
        assert again.checkpoint.positions[stream_key()] == {f"{topic}:0": 5}
    finally:
        again.stop_all()


def test_a_batch_of_several_topics_splits_by_topic_in_the_readers_order():
    import pyarrow as pa

    from dsp.operators.topic_batch import TOPIC_COLUMN, by_topic

    table = pa.table({"n": [1, 2, 3, 4], TOPIC_COLUMN: ["b", "a", "b", "c"]})
    split = by_topic(table, ["a", "b"])   # "c" is no longer read
    assert [(t, rows.column("n").to_pylist(), rows.column_names) for t, rows in split] == \
        [("a", [2], ["n"]), ("b", [1, 3], ["n"])]
    assert [t for t, _ in by_topic(pa.table({"n": [1]}), ["only"])] == ["only"]
    assert by_topic(pa.table({"n": [5], TOPIC_COLUMN: ["a"]}), ["a", "b"])[0][1].num_rows == 1


def test_a_parents_batch_is_archived_whole_and_a_part_over_the_past_reads_it_and_an_older_layouts(
        servers, spark, tmp_path):
    """A batch of many children's views is one archive file, each row with its topic (a file per
    child's topic per batch was a third of a 64-child parent's Python time); a part deployed over
    the past reads those files, and the per-topic files of a node of the older layout, as the live
    part saw the rows."""
    import pyarrow as pa

    from base.plan import PROGRESS_COLUMN
    from dsp.operators.topic_batch import TOPIC_COLUMN

    children = [f"hifi.view.arch{n}.v" for n in range(3)]
    live_out, past_out = "hifi.rqs.arch-live.parent", "hifi.rqs.arch-past.parent"
    admin.ensure_topics(servers.bootstrap, [*children, live_out, past_out])
    for topic in children:
        _send(servers.bootstrap, topic, 0, 3)
    runtime = SharedRuntime(spark, "arch-parent", servers.bootstrap, str(tmp_path), trigger_ms=500)
    try:
        runtime.deploy(PartSpec("live", _plan(children), live_out))
        wait_for(lambda: len(topic_rows(servers.bootstrap, live_out)) >= 9, 90, "the children's rows")
        (reader,) = runtime.inputs.readers.values()
        archived = list(runtime.archive.batches(0, [reader.key]))
        assert archived and all(TOPIC_COLUMN in table.column_names for _, table in archived)
        assert not list(runtime.archive.batches(0, [reader.topic_archive_key(t) for t in children]))
        older = pa.Table.from_pylist([{"window_start": NOW, "tag_id": "older-0", "reads": 0, PROGRESS_COLUMN: None}],
                                     schema=archived[0][1].drop_columns([TOPIC_COLUMN]).schema)
        runtime.archive.append(reader.topic_archive_key(children[1]), 10_000, older)   # a node before today's layout
        runtime.deploy(PartSpec("past", _plan(children), past_out, history_from_ms=0))
        wait_for(lambda: len(topic_rows(servers.bootstrap, past_out)) >= 10, 60, "the past part's rows")
        time.sleep(1)
        assert _tags(servers.bootstrap, past_out) == sorted([*_tags(servers.bootstrap, live_out), "older-0"])
    finally:
        runtime.stop_all()
