"""dsp.node_inputs.InputRate: the node's input rate, rows its readers took per second lately."""

from dsp.node_inputs import InputRate


def test_the_rate_counts_the_rows_of_the_last_span_only():
    rate = InputRate(span_s=10.0)
    assert rate.per_second(now=0.0) == 0.0
    rate.add(100, at=1.0)
    rate.add(50, at=6.0)
    assert rate.per_second(now=6.0) == 15.0
    assert rate.per_second(now=12.0) == 5.0       # the first batch is older than the span
    assert rate.per_second(now=17.0) == 0.0       # an idle node reads nothing
    rate.add(10, at=30.0)                          # older batches are let go as new ones come
    assert len(rate._batches) == 1 and rate.per_second(now=30.0) == 1.0
