"""Progress markers (pure parts): when a query publishes one, what a watermark promises."""

from base.plan import Window
from dsp.spark.progress import marker_due, next_window_start, parse_watermark


def test_a_marker_goes_out_on_each_move_and_once_more_after_it():
    sent, last, repeated = [], 0, True
    for promise in (10, 10, 10, 20, 30, 30, 30):
        if marker_due(promise, last, repeated):
            sent.append(promise)
            repeated, last = promise == last, promise
    assert sent == [10, 10, 20, 30, 30]


def test_the_promise_is_the_next_window_a_query_can_still_emit():
    assert next_window_start(25_000, Window(10_000, 10_000)) == 20_000
    assert parse_watermark("1970-01-01T00:00:00.000Z") is None
    assert parse_watermark("2026-11-22T19:00:00.000Z") == 1_795_374_000_000
