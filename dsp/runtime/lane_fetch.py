"""A process's batch: every lane's short ranges fetched at once, before the lanes run.

Each lane read its ranges with a fetch of its own (wire.kafka.ranges, its consumer): with 32 doors
under one warehouse in one `hifi up`, 33 fetches a batch, each waiting for the broker's answer
(~3 ms), a third of the batch thread's time in reading (py-spy, 2026-11-28). One fetch of all the
lanes' partitions answers them together; a lane finds its records in what it is handed (its
`fetched`, dsp.runtime.stream_batches) and fetches only what is not there.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from dsp.spark.lane_offsets import OffsetRange
from wire.kafka.ranges import LIBRDKAFKA_FROM, read_short_ranges

log = logging.getLogger("hifi.dsp")

# A lane's records by range (OffsetRange.key), as KafkaStreamReader.read_here takes them
Fetched = dict[tuple[str, int, int], list]


def claimed(wanted: Mapping[str, list[OffsetRange]]) -> dict[str, list[OffsetRange]]:
    """The ranges fetched together, by lane: short ones (longer ones librdkafka reads faster: wire.
    ranges), and a partition once (two lanes reading one topic each read their own range).

    >>> a, b = OffsetRange("raw.d1", 0, 5, 9), OffsetRange("raw.d1", 0, 7, 9)
    >>> long = OffsetRange("raw.d2", 0, 0, LIBRDKAFKA_FROM)
    >>> {lane: [r.key for r in ranges] for lane, ranges in claimed({"d1": [a], "adopted": [b, long]}).items()}
    {'d1': [('raw.d1', 0, 5)], 'adopted': []}
    """
    found: dict[str, list[OffsetRange]] = {}
    seen: set[tuple[str, int]] = set()
    for lane, ranges in wanted.items():
        found[lane] = [r for r in ranges if r.end - r.start < LIBRDKAFKA_FROM
                       and (r.topic, r.partition) not in seen]
        seen.update((r.topic, r.partition) for r in found[lane])
    return found


def fetch_for_lanes(bootstrap: str, owner: str, wanted: Mapping[str, list[OffsetRange]]) -> dict[str, Fetched]:
    """Each lane's records of the ranges it wants (those `claimed`), fetched in one go by `owner`'s
    consumer. Nothing when fewer than two lanes want ranges (one lane's own fetch is the same
    fetch: a parent alone over 64 children) or when the fetch fails: the lanes fetch their own then,
    and a broker that is down fails their batch as before."""
    lanes = {lane: mine for lane, mine in claimed(wanted).items() if mine}
    if len(lanes) < 2:
        return {}
    ranges = [r for mine in lanes.values() for r in mine]
    try:
        records = read_short_ranges(bootstrap, [(r.topic, r.partition, r.start, r.end) for r in ranges],
                                                owner)
    except Exception:  # noqa: BLE001 - see the docstring
        log.warning("fetching %d ranges of a batch at once failed; each lane fetches its own", len(ranges),
                    exc_info=True)
        return {}
    return {lane: {r.key: records[r.key] for r in mine} for lane, mine in lanes.items()}


def oldest_record_ms(fetched: Fetched) -> int | None:
    """The Kafka time of the oldest record of ranges fetched here (the first of each; None: none).

    >>> from wire.kafka.ranges import Record
    >>> oldest_record_ms({("a", 0, 5): [Record(5, 900, b"", []), Record(6, 950, b"", [])],
    ...                   ("b", 0, 1): [Record(1, 800, b"", [])], ("c", 0, 2): []})
    800
    """
    return min((records[0].timestamp for records in fetched.values()
                if records and records[0].timestamp is not None), default=None)
