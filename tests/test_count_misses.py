"""The pipeline bench's account of wrong location counts (edge.truth.count_misses, pure): which
tags in the receptors' data could make each count wrong, on hand-built read cycles."""

from edge.truth import CountMiss, count_misses


def cycle(t: int, receptor: str, location: str, present: list[str], reads: list[tuple[str, float]]) -> dict:
    return {"t": t, "receptor": receptor, "location": location, "node": "n", "present": present,
            "reads": [(tag, 0, strength) for tag, strength in reads]}


CYCLES = [
    cycle(0, "rA", "A", ["x", "y", "w"], [("x", 0.9), ("w", 0.9), ("y", 0.1)]),   # y only below the threshold
    cycle(0, "rB", "B", [], []),
    cycle(1000, "rA", "A", ["y"], []),
    cycle(1000, "rB", "B", ["x", "z"], [("x", 0.9), ("z", 0.9)]),             # x went from A to B
    cycle(2000, "rA", "A", ["y"], [("z", 0.5), ("y", 0.8)]),                  # z read across, from B
    cycle(2000, "rB", "B", ["x", "z"], [("x", 0.9), ("z", 0.9)]),
]


def test_each_wrong_count_comes_with_the_tags_that_could_explain_it():
    said = {(0, "A"): 1, (0, "B"): 2, (2000, "A"): 3, (2000, "B"): 0}
    misses = count_misses(CYCLES, said, [0, 2000], 2000, strength_t=0.2)
    assert misses == [
        CountMiss(0, "A", true=3, said=1, in_transit=1, unread=1, read_across=0, just_left=0),
        CountMiss(2000, "A", true=1, said=3, in_transit=0, unread=0, read_across=1, just_left=2),
        CountMiss(2000, "B", true=2, said=0, in_transit=0, unread=0, read_across=0, just_left=0),
    ]
    assert [m.explained for m in misses] == [True, True, False]


def test_right_counts_are_no_misses_and_a_count_off_by_more_than_its_reasons_is_unexplained():
    right = {(0, "A"): 3, (0, "B"): 2, (2000, "A"): 1, (2000, "B"): 2}
    assert count_misses(CYCLES, right, [0, 2000], 2000, strength_t=0.2) == []
    (miss,) = count_misses(CYCLES, {**right, (0, "A"): 0}, [0, 2000], 2000, strength_t=0.2)
    assert (miss.true, miss.said, miss.in_transit + miss.unread) == (3, 0, 2) and not miss.explained
