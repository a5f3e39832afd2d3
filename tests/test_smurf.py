"""SMURF-style adaptive smoothing (pure): windows sized for completeness, shrunk on transitions."""

import random

import pytest

from dsp.smurf import TagWindow, completeness_window, smurf_step, transition_detected


def _epochs(rng: random.Random, present: list[bool], read_rate: float, cycles: int = 5) -> list[int]:
    return [sum(rng.random() < read_rate for _ in range(cycles)) if here else 0 for here in present]


def test_the_completeness_window_follows_the_read_rate():
    assert completeness_window(0.5, 0.05) == 6          # ln(20) / 0.5 = 5.99
    assert completeness_window(0.1, 0.05) == 30
    assert completeness_window(1.0, 0.05) == 1
    with pytest.raises(ValueError):
        completeness_window(0.0, 0.05)


def test_a_transition_is_reads_two_deviations_below_the_rate():
    assert transition_detected(1, 10, 0.6) and not transition_detected(4, 10, 0.6)


def test_a_rarely_read_tag_that_stays_is_reported_nearly_always():
    rng = random.Random(1)
    answered = _epochs(rng, [True] * 400, read_rate=0.15)
    state = TagWindow()
    reported = [smurf_step(state, a, 5) for a in answered][20:]
    raw = [a > 0 for a in answered][20:]
    assert sum(reported) / len(reported) >= 0.95 > sum(raw) / len(raw)
    assert state.size > 1


def test_each_tag_gets_the_window_its_read_rate_needs():
    rng = random.Random(2)
    medians = []
    for read_rate in (0.9, 0.5, 0.15):
        lags, misses = [], 0
        for _ in range(40):
            state = TagWindow()
            answered = _epochs(rng, [True] * 80 + [False] * 40, read_rate)
            reported = [smurf_step(state, a, 5) for a in answered]
            misses += reported[20:80].count(False)
            lags.append(next(i for i in range(80, 120) if not reported[i]) - 80)
            assert state.size == 1, "an emptied window starts over at one epoch"
        assert misses <= 2 and max(lags) <= 15, (read_rate, misses, lags)
        medians.append(sorted(lags)[20])
    assert medians[0] < medians[1] < medians[2], f"reliable tags leave sooner: {medians}"


def test_impossible_epochs_are_refused():
    with pytest.raises(ValueError, match="answered 6 of 5"):
        smurf_step(TagWindow(), 6, 5)
