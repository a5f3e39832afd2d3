"""The pace of a process's stream of lanes (dsp.runtime.process_stream): what each poll lets into a batch.

The stream polls at a quarter of the node's trigger (250 ms by default). Readers write raw topics
all the time, so their records are let in every other poll (`raw_every_ms`): a batch's fixed work in
every lane at every poll nearly doubled the default hierarchy's CPU (0.36 -> 0.60-0.70 cores,
`hifi bench pipeline`, 2026-11-28). Children's views, partials and markers come once a window and
go into the next batch: Spark's triggers fall on multiples of their interval, so a child's emit
(itself made on a tick) lands just after its parent's tick and waited a whole 500 ms poll; at
250 ms the fan-in bench's parent adds ~0.3 s instead of ~0.6. A stream with nothing new in any
topic for QUIET_MS waits for the raw topics' next turn before it asks again: an idle process polls
every `raw_every_ms`, as before (`hifi bench idle` 0.005 cores at a 500 ms poll, 0.011 at 250
without this). Pure: the clock is passed in.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from wire.topics import raw_topic

RAW_TOPICS = raw_topic("")   # the prefix of the topics readers write
LANE_SEPARATOR = "|"         # a lane's offsets are keyed "<lane>|<topic>:<partition>" (in no topic's name, no node's)
# A stream that found nothing new for this long polls at the raw topics' pace: long enough that a
# parent whose children emit every few seconds never slows (between emits its inputs are quiet)
QUIET_MS = 10_000


def paced_ends(ends: Mapping[str, int], start: Mapping[str, int], raw_due: bool) -> dict[str, int]:
    """A stream of lanes' ends for its next batch: a raw topic's held where the last batch ended
    until its turn (`raw_due`), every other topic's as they are now.

    >>> paced_ends({"a|hifi.raw.d1:0": 9, "a|hifi.view.d1.v:0": 4}, {"a|hifi.raw.d1:0": 5}, raw_due=False)
    {'a|hifi.raw.d1:0': 5, 'a|hifi.view.d1.v:0': 4}
    >>> paced_ends({"a|hifi.raw.d1:0": 9}, {"a|hifi.raw.d1:0": 5}, raw_due=True)
    {'a|hifi.raw.d1:0': 9}
    """
    if raw_due:
        return dict(ends)
    return {key: start.get(key, end) if key.partition(LANE_SEPARATOR)[2].startswith(RAW_TOPICS) else end
            for key, end in ends.items()}


@dataclass
class PollPace:
    """One stream's pace across its polls (`raw_every_ms` 0: every poll takes everything).

    >>> pace = PollPace(500)
    >>> due = pace.raw_due(now_ms=1_000)
    >>> due, pace.ends({"a|hifi.raw.d1:0": 9}, {"a|hifi.raw.d1:0": 5}, 1_000, due), pace.wait_ms(now_ms=1_250)
    (True, {'a|hifi.raw.d1:0': 9}, 0)
    >>> due = pace.raw_due(now_ms=1_250)   # not its turn
    >>> due, pace.ends({"a|hifi.raw.d1:0": 12}, {"a|hifi.raw.d1:0": 9}, 1_250, due)
    (False, {'a|hifi.raw.d1:0': 9})
    >>> _ = pace.ends({"a|hifi.raw.d1:0": 12}, {"a|hifi.raw.d1:0": 12}, 1_500, pace.raw_due(now_ms=1_500))
    >>> pace.wait_ms(now_ms=9_250), pace.wait_ms(now_ms=11_250)   # nothing new since 1.25 s: quiet from 11.25 s
    (0, 250)
    """

    raw_every_ms: int
    raw_slot: int = -1
    news_ms: int = 0   # when a poll last found something new in some topic

    def wait_ms(self, now_ms: int) -> int:
        """How long the next poll should wait first: till the raw topics' next turn when quiet."""
        if not self.raw_every_ms or now_ms - self.news_ms < QUIET_MS:
            return 0
        return -now_ms % self.raw_every_ms

    def raw_due(self, now_ms: int) -> bool:
        """Whether this poll is the raw topics' turn (asked once a poll: it takes the turn): their
        ends need not be asked of the broker on the others."""
        slot = now_ms // self.raw_every_ms if self.raw_every_ms else self.raw_slot + 1
        due, self.raw_slot = slot != self.raw_slot, slot
        return due

    def ends(self, ends: Mapping[str, int], start: Mapping[str, int], now_ms: int, raw_due: bool) -> dict[str, int]:
        """The ends of this poll's batch (`paced_ends`), given every topic's `ends` now."""
        if any(start.get(key) != end for key, end in ends.items()):
            self.news_ms = now_ms
        return paced_ends(ends, start, raw_due)
