"""The pipeline bench's per-level latency (edge.level_latency): readings to the first emit of their
window at each level, missing windows counted apart."""

import doctest

import edge.level_latency
from edge.level_latency import level_latency, window_length_ms

CHAINS = {"door1": ["warehouse", "hq"], "door2": ["warehouse", "hq"]}


def cycle(t: int, node: str, *strengths: float) -> dict:
    return {"t": t, "node": node, "reads": [["tag", 1, s] for s in strengths]}


def test_the_module_examples_hold():
    assert doctest.testmod(edge.level_latency).failed == 0


def test_each_door_waits_for_its_own_window_and_a_missing_one_is_counted():
    cycles = [cycle(100, "door1", 0.5), cycle(900, "door2", 0.5, 0.6), cycle(2_100, "door2", 0.5)]
    emits = {("door1", 0): (2_400, 2_000)}   # door2's window 0 never came out
    found = level_latency("doors", {"door1", "door2"}, emits, cycles, CHAINS, 2_000, horizon_ms=4_000)
    assert (found.reading_ms, found.close_ms, found.expected, found.missing) == ([2_300], [400], 3, 2)


def test_a_level_above_takes_every_door_and_skips_weak_reads_and_open_windows():
    cycles = [cycle(100, "door1", 0.5), cycle(900, "door2", 0.1), cycle(1_500, "door2", 0.7),
              cycle(5_000, "door1", 0.9)]
    emits = {("warehouse", 0): (3_000, 2_000)}
    found = level_latency("warehouse", {"warehouse"}, emits, cycles, CHAINS, 2_000, horizon_ms=4_000, min_strength=0.2)
    # the 0.1 read is weaker than cleaning keeps; the window from 4 000 ends after the horizon
    assert (sorted(found.reading_ms), found.expected, found.missing) == ([1_500, 2_900], 1, 0)


def test_the_window_length_comes_from_what_was_emitted():
    assert window_length_ms({("hq", 0): (1, 20_000), ("hq", 20_000): (2, 40_000)}, 2_000) == 20_000
    assert window_length_ms({}, 2_000) == 2_000
