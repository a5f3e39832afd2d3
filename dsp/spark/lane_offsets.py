"""Where a reader's ranges are: a topic partition's key, a lane's offsets keyed "<lane>|<topic>:<partition>"
in the node's one stream, and one offset range of a partition (a Spark input partition)."""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql.datasource import InputPartition

from dsp.poll_pace import LANE_SEPARATOR
from wire.kafka.offsets import offset_key


def partition_key(topic: str, partition: int) -> str:
    return offset_key(topic, partition)


def lane_offset_key(lane: str, key: str) -> str:
    """A lane's partition in the offsets of a stream of lanes (OFFSETS_ONLY).

    >>> lane_offset_key("wh/read:node", "hifi.view.d1.v:0")
    'wh/read:node|hifi.view.d1.v:0'
    """
    return f"{lane}{LANE_SEPARATOR}{key}"


def lanes_of(offsets: Mapping[str, int]) -> dict[str, dict[str, int]]:
    """A stream of lanes' offsets, lane by lane, keyed "topic:partition".

    >>> lanes_of({"wh/read:node|a:0": 4, "wh/read:node|b:1": 2, "d1/read:node|a:0": 7})
    {'wh/read:node': {'a:0': 4, 'b:1': 2}, 'd1/read:node': {'a:0': 7}}
    """
    found: dict[str, dict[str, int]] = {}
    for key, offset in offsets.items():
        lane, separator, rest = key.partition(LANE_SEPARATOR)
        if separator:
            found.setdefault(lane, {})[rest] = offset
    return found


def split_partition_key(key: str) -> tuple[str, int]:
    topic, _, partition = key.rpartition(":")
    return topic, int(partition)


class OffsetRange(InputPartition):
    def __init__(self, topic: str, partition: int, start: int, end: int) -> None:
        super().__init__((topic, partition, start, end))
        self.topic, self.partition, self.start, self.end = topic, partition, start, end

    @property
    def key(self) -> tuple[str, int, int]:
        return self.topic, self.partition, self.start
