"""The pace of a process's stream of lanes (dsp.process_stream): what each poll lets into a batch.

The stream polls at a quarter of the node's trigger (250 ms by default). Readers write raw topics
all the time, so their records are let in every other poll (`raw_every_ms`): a batch's fixed work in
every lane at every poll nearly doubled the default hierarchy's CPU (0.36 -> 0.60-0.70 cores,
`hifi bench pipeline`, 2026-11-28). Children's views, partials and markers come once a window and
go into the next batch: Spark's triggers fall on multiples of their interval, so a child's emit
(itself made on a tick) lands just after its parent's tick and waited a whole 500 ms poll; at
250 ms the fan-in bench's parent adds ~0.3 s instead of ~0.6. A stream with nothing new in any
topic for QUIET_POLLS polls waits for the raw topics' next turn before it asks again (an idle
process polls every `raw_every_ms`, as before: `hifi bench idle` 0.005 cores at 500 ms, 0.011 at
250 without this). Pure: the clock is passed in.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from wire.topics import raw_topic

RAW_TOPICS = raw_topic("")   # the prefix of the topics readers write
LANE_SEPARATOR = "|"         # a lane's offsets are keyed "<lane>|<topic>:<partition>" (in no topic's name, no node's)
QUIET_POLLS = 4


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
    >>> pace.ends({"a|hifi.raw.d1:0": 9}, {"a|hifi.raw.d1:0": 5}, now_ms=1_000), pace.wait_ms(now_ms=1_250)
    ({'a|hifi.raw.d1:0': 9}, 0)
    >>> pace.ends({"a|hifi.raw.d1:0": 12}, {"a|hifi.raw.d1:0": 9}, now_ms=1_250)   # not its turn
    {'a|hifi.raw.d1:0': 9}
    >>> for now in (1_500, 1_750, 2_000, 2_250):   # nothing new, four polls
    ...     _ = pace.ends({"a|hifi.raw.d1:0": 12}, {"a|hifi.raw.d1:0": 12}, now_ms=now)
    >>> pace.wait_ms(now_ms=2_250)   # quiet: the next poll waits for the raw topics' turn
    250
    """

    raw_every_ms: int
    raw_slot: int = -1
    quiet: int = 0   # polls in a row that found nothing new in any topic

    def wait_ms(self, now_ms: int) -> int:
        """How long the next poll should wait first: till the raw topics' next turn when quiet."""
        if not self.raw_every_ms or self.quiet < QUIET_POLLS:
            return 0
        return -now_ms % self.raw_every_ms

    def ends(self, ends: Mapping[str, int], start: Mapping[str, int], now_ms: int) -> dict[str, int]:
        """The ends of this poll's batch (`paced_ends`), given every topic's `ends` now."""
        self.quiet = 0 if any(start.get(key) != end for key, end in ends.items()) else self.quiet + 1
        slot = now_ms // self.raw_every_ms if self.raw_every_ms else self.raw_slot + 1
        due, self.raw_slot = slot != self.raw_slot, slot
        return paced_ends(ends, start, due)
