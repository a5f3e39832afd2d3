"""Per-tag smoothing (pure): SMURF-style windows sized for completeness and shrunk on transitions,
against the fixed window, on hand-built and emulated tags whose presence is known."""

import random

import pytest

from base.smurf import (
    ReaderRates,
    TagWindow,
    completeness_window,
    smooth_adaptive,
    smooth_fixed,
    smurf_step,
    transition_detected,
)
from edge.presence import TagTrace, answered_cycles, cycle_rate, mixed_traces, moving_traces, static_traces
from edge.truth import presence_errors


def test_the_completeness_window_follows_the_read_rate():
    assert completeness_window(0.5, 0.05) == 5          # 0.5^5 = 0.031 <= 0.05 < 0.5^4
    assert completeness_window(0.1, 0.05) == 29
    assert completeness_window(0.1, 0.001, limit=50) == 50
    assert completeness_window(1.0, 0.05) == 1
    with pytest.raises(ValueError):
        completeness_window(0.0, 0.05)


def test_a_transition_is_a_binomial_tail_below_delta():
    assert transition_detected(1, 10, 0.6, 0.05) and not transition_detected(4, 10, 0.6, 0.05)
    # two misses in a row of a 90 % tag are no transition (the paper's normal test says they are)
    assert not transition_detected(1, 3, 0.9, 0.01)


def test_the_read_rate_is_learnt_from_the_gaps_between_reads_not_from_departures():
    rng = random.Random(4)
    state = TagWindow()
    for _ in range(10):   # stays of 40 epochs at 60 %, absences of 30
        for here in [True] * 40 + [False] * 30:
            smurf_step(state, here and rng.random() < 0.6)
    assert abs(state.epoch_rate() - 0.6) < 0.12
    assert 6 <= state.departures <= 10


def test_a_rarely_read_tag_that_stays_is_reported_nearly_always():
    rng = random.Random(1)
    read = [rng.random() < 0.4 for _ in range(400)]
    state = TagWindow()
    reported = [smurf_step(state, r) for r in read][20:]
    assert sum(reported) / len(reported) >= 0.98 > sum(read[20:]) / len(reported)
    assert state.size > 1


def test_a_tag_that_leaves_is_dropped_sooner_the_more_reliable_it_is():
    rng = random.Random(2)
    medians = []
    for read_rate in (0.95, 0.7, 0.4):
        lags, misses = [], 0
        for _ in range(40):
            state = TagWindow()
            reported = [smurf_step(state, here and rng.random() < read_rate) for here in [True] * 80 + [False] * 40]
            misses += reported[20:80].count(False)
            lags.append(next(i for i in range(80, 120) if not reported[i]) - 80)
            assert state.size == 1, "an emptied window starts over at one epoch"
        assert misses <= 240 and max(lags) <= 15, (read_rate, misses, lags)   # misses: <= 10 % of epochs
        medians.append(sorted(lags)[20])
    assert medians[0] < medians[1] < medians[2], f"reliable tags leave sooner: {medians}"


def test_a_new_tag_borrows_its_readers_rate():
    reader = ReaderRates()
    for _ in range(200):
        reader.add(1)                    # the reader reads its tags every epoch
    alone, shared = TagWindow(), TagWindow()
    for state, rates in ((alone, None), (shared, reader)):
        for _ in range(3):
            smurf_step(state, True, reader=rates)
    assert not smurf_step(shared, False, reader=reader) and smurf_step(alone, False)


def test_the_fixed_window_counts_reads_over_the_last_epochs():
    assert smooth_fixed([0, 2, 0, 0, 0, 1], 3) == [False, True, True, True, False, True]
    assert smooth_fixed([1, 1, 0, 1], 2, count_t=2) == [False, True, False, False]
    with pytest.raises(ValueError):
        smooth_fixed([1], 0)


def test_emulated_tags_have_the_read_rate_and_stays_asked_for():
    rng = random.Random(5)
    assert abs(cycle_rate(0.5, 5) - (1 - 0.5 ** 0.2)) < 1e-12
    trace = TagTrace("t", 0.7, (True,) * 3000)
    seen = [a > 0 for a in answered_cycles(trace, 5, rng)]
    assert abs(sum(seen) / len(seen) - 0.7) < 0.03
    moving = moving_traces(20, 600, 0.7, dwell=20, seed=1)
    arrivals = sum(not a and b for t in moving for a, b in zip(t.present, t.present[1:], strict=False))
    assert 20 * 600 / 40 * 0.7 < arrivals < 20 * 600 / 40 * 1.3
    assert all(all(t.present) for t in static_traces(3, 10, 0.5))
    rates = [t.epoch_rate for t in mixed_traces(100, 10, seed=2)]
    assert 0.4 <= min(rates) < 0.5 and 0.9 < max(rates) <= 0.95


def test_adaptive_smoothing_errs_less_than_raw_reads_and_than_a_long_window():
    """On the mixed tags (read rates 40-95 %, stays of seconds to minutes) no one fixed window
    suits every tag: adaptive smoothing beats the raw reads by far and a long
    window; how it compares with the best window is the benchmark's figure."""
    rng = random.Random(3)
    traces = mixed_traces(80, 400, seed=1)
    answered = [answered_cycles(t, 5, rng) for t in traces]

    def error(reported: list[list[bool]]) -> float:
        fn, fp, epochs = presence_errors([t.present for t in traces], reported)
        return (fn + fp) / epochs

    adaptive = error(smooth_adaptive(answered))
    assert adaptive < 0.7 * error([smooth_fixed(a, 1) for a in answered])
    assert adaptive < error([smooth_fixed(a, 12) for a in answered])
