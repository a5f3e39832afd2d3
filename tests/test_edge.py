import random

import pytest

from edge.reader import ReaderModel
from edge.world import AWAY, World, sgtin_like_ids


def test_world_is_deterministic_and_constant_within_a_dwell_period():
    world = World(7, sgtin_like_ids(20), ("door1", "door2"), 4000)
    again = World(7, sgtin_like_ids(20), ("door1", "door2"), 4000)
    for t in range(0, 40_000, 500):
        assert [world.location_of(tag, t) for tag in world.tag_ids] == [again.location_of(tag, t)
                                                                          for tag in world.tag_ids]
    for tag in world.tag_ids:
        assert world.location_of(tag, 8000) == world.location_of(tag, 11_999)
    places = {world.location_of(tag, t) for tag in world.tag_ids for t in range(0, 400_000, 4000)}
    assert places == {"door1", "door2", AWAY}


def test_reader_reports_present_tags_at_its_read_rate():
    reader = ReaderModel("r1", "door1", "d1", read_rate=0.65)
    rng = random.Random(3)
    tags = [f"t{i}" for i in range(10)]
    reads = sum(len(reader.read_cycle(tags, rng)) for _ in range(2000))
    assert reads / 20_000 == pytest.approx(0.65, abs=0.015)
    assert all(r.read_strength >= 0 for r in reader.read_cycle(tags, rng))


def test_reader_refuses_an_impossible_read_rate():
    with pytest.raises(ValueError, match="outside"):
        ReaderModel("r1", "door1", "d1", read_rate=1.5)
