"""The chaos bench's judgement of each fault's period (pure): readings published vs counted,
windows emitted twice, windows equal to the count over the agents' log."""

from collections import Counter

from services.bench.chaos import FaultFigures, _judge


def test_each_fault_period_is_judged_window_by_window_against_the_log():
    published = Counter({(0, "a"): 5, (2000, "a"): 4, (10000, "a"): 3, (12000, "a"): 2, (12000, "b"): 1})
    rows = [(0, "a", 5, 1), (2000, "a", 4, 1),                     # the first period: exact
            (10000, "a", 3, 1), (10000, "a", 3, 2),                # the second: a window twice,
            (12000, "a", 2, 1)]                                    # and (12000, b) missing
    committed = [*rows[:2], (2000, "a", 4, 2), rows[2], rows[4], (12000, "b", 1, 1)]   # its own repeats
    figures = [FaultFigures("first", 0, 1.0), FaultFigures("second", 10_500, 2.0)]
    _judge(figures, rows, committed, published, start_ms=-1)
    first, second = figures
    assert (first.windows, first.published, first.counted, first.duplicates, first.equal) == (2, 9, 9, 0, 2)
    assert (second.windows, second.published, second.counted, second.duplicates, second.equal) == (3, 6, 8, 1, 1)
    # as a read_committed consumer read them: the first period's window twice, the second's all once
    assert (first.committed_duplicates, first.committed_equal) == (1, 1)
    assert (second.committed_duplicates, second.committed_equal) == (0, 3)


def test_a_read_committed_consumer_reads_every_record_as_it_stands(servers):
    """committed_rows drops nothing: a batch standing twice in the topic is two rows."""
    import datetime as dt
    import time

    from services.bench.chaos import committed_rows
    from wire.codec import encode_row_batch
    from wire.kafka import producers

    topic = f"hifi.results.chaos-judge.{time.time_ns()}"
    start = dt.datetime(2026, 12, 2, tzinfo=dt.UTC)
    batch = encode_row_batch("agg", "q", ["window_start", "receptor_id", "reads"], [(start, "r1", 7)], 1, 5)
    producer = producers.make_producer(servers.bootstrap)
    producers.deliver(producer, [producer.send(topic, key=b"agg:1:0", value=value)
                           for value in (batch, batch, encode_row_batch("agg", "q", [], [], 2, 6, watermark_ms=9))])
    producer.close()
    assert committed_rows(servers.bootstrap, topic) == [(int(start.timestamp() * 1000), "r1", 7, 5)] * 2
