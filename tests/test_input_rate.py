"""dsp.runtime.inputs.RecentInput: the node's input rate, rows its readers took per second lately,
and how long its input waited for it."""

from dsp.runtime.inputs import RecentInput


def test_the_rate_counts_the_rows_of_the_last_span_only():
    rate = RecentInput(span_s=10.0)
    assert rate.per_second(now=0.0) == 0.0
    rate.add(100, at=1.0)
    rate.add(50, at=6.0)
    assert rate.per_second(now=6.0) == 15.0
    assert rate.per_second(now=12.0) == 5.0       # the first batch is older than the span
    assert rate.per_second(now=17.0) == 0.0       # an idle node reads nothing
    rate.add(10, at=30.0)                          # older batches are let go as new ones come
    assert len(rate._batches) == 1 and rate.per_second(now=30.0) == 1.0


def test_the_input_lag_is_the_longest_wait_of_the_last_seconds_batches():
    recent = RecentInput(span_s=10.0)
    assert recent.longest_wait_ms(now=0.0) == 0.0
    recent.add(5, at=1.0, waited_ms=800.0)
    recent.add(5, at=1.5, waited_ms=1200.0)
    recent.add(5, at=2.5, waited_ms=None)          # read by Spark's tasks: no record time here
    assert recent.longest_wait_ms(now=2.6) == 1200.0
    assert recent.longest_wait_ms(now=3.2) == 1200.0   # 1.5 is within the last two seconds
    assert recent.longest_wait_ms(now=3.6) == 0.0      # none since: nothing came
    recent.add(5, at=4.0, waited_ms=300.0)
    assert recent.longest_wait_ms(now=4.0) == 300.0 and recent.per_second(now=4.0) == 2.0
