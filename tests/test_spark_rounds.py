"""The lanes of a micro-batch share its Spark jobs (dsp.spark.rounds): a round's job runs once
every lane not done asks, with every lane's frames, and each lane gets its own rows back."""

from __future__ import annotations

import threading

import pytest

from dsp.spark.rounds import Rounds, collect


class Jobs:
    """A stand-in for Spark: each job returns, for every frame (a string here), its name upper-cased."""

    def __init__(self, fail_on: str = "") -> None:
        self.asked: list[list[str]] = []
        self.fail_on = fail_on

    def __call__(self, frames):
        self.asked.append(list(frames))
        if self.fail_on in frames:
            raise RuntimeError("the job failed")
        return [frame.upper() for frame in frames]


def run_lanes(rounds: Rounds, lanes: dict[str, list[list[str]]]) -> dict[str, list]:
    """Each lane on a thread of its own, asking for its frames round after round."""
    got: dict[str, list] = {name: [] for name in lanes}

    def lane(name: str) -> None:
        with rounds.lane():
            for frames in lanes[name]:
                try:
                    got[name].append(collect(frames))
                except RuntimeError as exc:
                    got[name].append(str(exc))

    threads = [threading.Thread(target=lane, args=(name,)) for name in lanes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
        assert not thread.is_alive(), "a lane never got its rows"
    return got


def test_one_job_a_round_for_every_lane_each_getting_its_own_rows() -> None:
    jobs = Jobs()
    rounds = Rounds(3, run=jobs)
    got = run_lanes(rounds, {"a": [["a1", "a2"], ["a3"]], "b": [["b1"], ["b2"]], "c": [["c1"]]})
    assert got == {"a": [["A1", "A2"], ["A3"]], "b": [["B1"], ["B2"]], "c": [["C1"]]}
    # two rounds: the first with every lane's first ask, the second with those that asked again
    assert [sorted(asked) for asked in jobs.asked] == [["a1", "a2", "b1", "c1"], ["a3", "b2"]]
    assert rounds.jobs == 2


def test_a_lane_done_early_does_not_hold_the_round() -> None:
    jobs = Jobs()
    got = run_lanes(Rounds(3, run=jobs), {"a": [["a1"]], "b": [], "c": [["c1"], ["c2"]]})
    assert got == {"a": [["A1"]], "b": [], "c": [["C1"], ["C2"]]}
    assert len(jobs.asked) == 2


def test_a_failed_job_fails_every_lane_of_its_round_and_no_other() -> None:
    jobs = Jobs(fail_on="b1")
    got = run_lanes(Rounds(2, run=jobs), {"a": [["a1"], ["a2"]], "b": [["b1"]]})
    assert got == {"a": ["the job failed", ["A2"]], "b": ["the job failed"]}


def test_outside_a_micro_batch_a_frame_is_its_own_job() -> None:
    with pytest.raises(AttributeError):   # no Spark here: collect went to the real job, not a round
        collect(["not a frame"])
