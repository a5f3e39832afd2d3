"""The π-estimate of the tags in range (base.tag_count, SQL tag_estimate) and its score against
known truths (services.bench.tag_estimates). Pure."""

from __future__ import annotations

import pytest

from base.tag_count import read_key, tag_count
from services.bench.tag_estimates import score_read_rates


def test_tags_read_in_every_cycle_are_counted_once_each_with_no_doubt():
    reads = [read_key(r, cycle, tag) for r in ("r1", "r2") for cycle in range(5) for tag in ("a", "b", "c")]
    assert tag_count(reads) == (3.0, 3.0, 3.0, 3)


def test_a_tag_read_rarely_counts_for_more_than_itself_and_widens_the_interval():
    often = [read_key("r1", cycle, "a") for cycle in range(10)]
    rare = [*often, read_key("r1", 3, "b")]
    count = tag_count(rare)
    assert count.read == 2 and count.estimate > 2 and count.low == 2 and count.high > count.estimate
    # the chance of missing b in 10 cycles read at 1 in 10: 0.9^10
    assert count.estimate == pytest.approx(1 + 1 / (1 - 0.9 ** 10))


def test_a_tag_read_by_two_readers_is_missed_only_if_both_miss_it():
    frame = [read_key(r, cycle, "x") for r in ("r1", "r2") for cycle in range(10)]
    both = tag_count([*frame, read_key("r1", 0, "t"), read_key("r2", 4, "t")])
    one = tag_count([*frame, read_key("r1", 0, "t")])
    assert both.estimate - 1 == pytest.approx(1 / (1 - 0.9 ** 20))
    assert 1 < both.estimate - 1 < one.estimate - 1


def test_childrens_sets_unioned_give_the_estimate_over_every_read():
    reads = [read_key(r, c, t) for r in ("r1", "r2") for c in range(8) for t in ("a", "b") if (c + len(t)) % 3]
    door1, door2 = reads[: len(reads) // 2], reads[len(reads) // 3:]   # overlapping, as replays may be
    assert tag_count(set(door1) | set(door2)) == tag_count(reads)


def test_where_tags_go_unread_the_estimate_is_closer_than_the_count_and_its_interval_mostly_holds():
    missed = score_read_rates(0.02, 0.3, 10, seed=3, windows=400)
    assert missed.plain_error > 3 and missed.estimate_error < 0.6 * missed.plain_error
    assert missed.coverage > 0.86   # without the rates' own uncertainty in the interval: 0.82
    # every tag read: the count is right, the estimate near it
    read = score_read_rates(0.5, 0.95, 10, seed=3, windows=400)
    assert read.plain_error < 0.05 and read.estimate_error < 0.2 and read.coverage > 0.95
