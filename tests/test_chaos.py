"""The chaos bench's judgement of each fault's period (pure): readings published vs counted,
windows emitted twice, windows equal to the count over the agents' log."""

from collections import Counter

from services.bench.chaos import FaultFigures, Results, _judge


def test_each_fault_period_is_judged_window_by_window_against_the_log():
    published = Counter({(0, "a"): 5, (2000, "a"): 4, (10000, "a"): 3, (12000, "a"): 2, (12000, "b"): 1})
    results = Results()
    results.rows = [(0, "a", 5, 1), (2000, "a", 4, 1),                     # the first period: exact
                    (10000, "a", 3, 1), (10000, "a", 3, 2),                # the second: a window twice,
                    (12000, "a", 2, 1)]                                    # and (12000, b) missing
    figures = [FaultFigures("first", 0, 1.0), FaultFigures("second", 10_500, 2.0)]
    _judge(figures, results, published, start_ms=-1)
    first, second = figures
    assert (first.windows, first.published, first.counted, first.duplicates, first.equal) == (2, 9, 9, 0, 2)
    assert (second.windows, second.published, second.counted, second.duplicates, second.equal) == (3, 6, 8, 1, 1)
