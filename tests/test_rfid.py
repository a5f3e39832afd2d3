"""RFID readers (pure), statistically with fixed seeds: read rate, ghosts, overlap and faults
match the configuration within stated tolerances."""

import random
import statistics

import pytest

from edge.rfid import Antenna, ReaderFault, RfidReader, tag_pose

TAGS = [f"urn:epc:id:sgtin:0614141.812345.{i}" for i in range(200)]


def _rate(reader, present, cycles=200, nearby=(), seed=1):
    rng = random.Random(seed)
    reads = [reader.read_cycle(present, list(nearby), t * 200, rng) for t in range(cycles)]
    return reads, sum(len(r) for r in reads) / (cycles * max(len(present) + len(nearby), 1))


def test_the_default_reader_reads_sixty_to_seventy_percent_of_present_tags_per_cycle():
    _, rate = _rate(RfidReader("r1", "door-1", "door1"), TAGS)
    assert 0.60 <= rate <= 0.70


def test_detection_falls_with_distance_and_differs_per_tag():
    reader = RfidReader("r1", "door-1", "door1")
    rates = [reader.detection(reader.antennas[0], tag, "door-1") for tag in TAGS]
    assert max(rates) <= 0.9 and statistics.pstdev(rates) > 0.05
    near = min(TAGS, key=lambda t: sum(v * v for v in tag_pose(t, "door-1")[:2]))
    far = max(TAGS, key=lambda t: sum(v * v for v in tag_pose(t, "door-1")[:2]))
    assert reader.detection(reader.antennas[0], near, "door-1") > reader.detection(reader.antennas[0], far, "door-1")


def test_a_second_antenna_reads_more_and_each_tag_is_reported_once_per_cycle():
    one = RfidReader("r1", "door-1", "door1")
    two = RfidReader("r1", "door-1", "door1", antennas=(Antenna(), Antenna(x=3.0)))
    reads, rate_two = _rate(two, TAGS)
    assert rate_two > _rate(one, TAGS)[1] + 0.05
    assert all(len({r.observation.tag_id for r in cycle}) == len(cycle) for cycle in reads)
    assert {r.observation.antenna for cycle in reads for r in cycle} == {1, 2}


def test_ghost_reads_arrive_at_the_configured_rate_and_are_marked():
    reader = RfidReader("r1", "door-1", "door1", ghost_rate=0.5)
    rng = random.Random(3)
    cycles = [reader.read_cycle([], [], t * 200, rng, ghost_pool=("ghost-a", "ghost-b")) for t in range(4000)]
    ghosts = [r for cycle in cycles for r in cycle]
    assert all(r.ghost for r in ghosts)
    assert len(ghosts) / 4000 == pytest.approx(0.5, rel=0.08)


def test_overlapping_readers_see_the_neighbours_tags_less_often():
    reader = RfidReader("r1", "door-1", "door1", overlap=0.2, neighbours=("door-2",))
    _, own = _rate(reader, TAGS)
    reads, _ = _rate(reader, [], nearby=[(t, "door-2") for t in TAGS])
    seen = [r for cycle in reads for r in cycle]
    assert all(r.overlap for r in seen)
    assert len(seen) / (200 * len(TAGS)) == pytest.approx(0.2 * own, rel=0.15)


def test_reader_faults_stop_flap_and_degrade():
    stopped = RfidReader("r1", "d", "n", faults=(ReaderFault("stop", 1000, 2000),))
    assert [stopped.cycles_at(t) for t in (800, 1000, 1999, 2000)] == [True, False, False, True]
    flapping = RfidReader("r1", "d", "n", faults=(ReaderFault("flap", 0, period_ms=1000),))
    assert [flapping.cycles_at(t) for t in (0, 999, 1000, 1999, 2000)] == [True, True, False, False, True]
    degraded = RfidReader("r1", "d", "n", faults=(ReaderFault("degrade", 0, factor=0.5),))
    assert _rate(degraded, TAGS)[1] == pytest.approx(0.5 * _rate(RfidReader("r1", "d", "n"), TAGS)[1], rel=0.1)
    with pytest.raises(ValueError, match="read_rate 1.5 is outside"):
        RfidReader("r1", "d", "n", read_rate=1.5)
