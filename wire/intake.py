"""What a node accepts from its input topics: the checks every record passes or fails. Pure.

Every reader of an input topic (dsp.spark.kafka_source) applies these same rules, and each rule depends
only on the record and the log before it, so every query reading a topic, and every replay of a
micro-batch, decides alike:
- a reading's receptor must be registered, and owned by the edge node that reads it;
- its event time must lie within a window around the time its record *arrived*: the record's
  Kafka timestamp (the producer's send time), or the node's clock if that is earlier. Honest
  receptors send a reading after they stamp it, so a reading can move the edge's watermark at
  most `max_ahead_ms` past the newest arrival: one outlier cannot make the readings behind it
  late (with the edge's `lateness` at least `max_ahead_ms`, none of them is);
- a read cycle seen again (same receptor, cycle number and time: a restarted agent numbers its
  cycles from 0 again) within the partition's previous
  `DUPLICATE_LOOKBACK` records is a duplicate: dropped and counted, not dead-lettered;
- a view's rows must carry the columns the reader expects, with values of their types.
"""

from __future__ import annotations

import bisect
import datetime as dt
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# An error reason starting with this marks a duplicate read cycle: dropped and counted, not dead-lettered.
DUPLICATE = "duplicate read cycle"
DUPLICATE_BATCH = "duplicate batch"   # a RowBatch whose identity a reader has seen (wire.codec)
DUPLICATE_LOOKBACK = 10_000      # records of a partition a duplicate is looked for in
DEFAULT_MAX_AHEAD_MS = 500       # clock skew allowed between a receptor and its record's arrival
DEFAULT_MAX_BEHIND_MS = 600_000  # older readings are dead-lettered, not silently dropped as late


@dataclass(frozen=True)
class IntakeRules:
    """The checks of one node's readers. `owners`: receptor id -> the edge node that owns it
    (None: no registry to check against, e.g. a node under test)."""

    node: str = ""
    owners: Mapping[str, str] | None = None
    max_ahead_ms: int = DEFAULT_MAX_AHEAD_MS
    max_behind_ms: int = DEFAULT_MAX_BEHIND_MS

    def to_option(self) -> str:
        """As a reader option (readers are pickled to Spark's Python workers as plain strings)."""
        return json.dumps({"node": self.node, "owners": dict(self.owners) if self.owners is not None else None,
                           "ahead": self.max_ahead_ms, "behind": self.max_behind_ms})

    @classmethod
    def from_option(cls, text: str) -> IntakeRules:
        if not text:
            return cls()
        found = json.loads(text)
        return cls(found["node"], found["owners"], int(found["ahead"]), int(found["behind"]))

    def receptor_problem(self, receptor_id: str) -> str | None:
        if self.owners is None:
            return None
        owner = self.owners.get(receptor_id)
        if owner is None:
            return f"receptor {receptor_id!r} is not registered"
        if self.node and owner != self.node:
            return f"receptor {receptor_id!r} belongs to edge node {owner!r}, not {self.node!r}"
        return None

    def time_problem(self, event_ms: int, arrival_ms: int, what: str = "timestamp_ms") -> str | None:
        """Why an event time cannot be trusted for a record that arrived at `arrival_ms`."""
        if event_ms <= 0:
            return f"missing or non-positive {what}"
        if event_ms > arrival_ms + self.max_ahead_ms:
            return (f"{what} {event_ms} is {event_ms - arrival_ms} ms ahead of the record's arrival "
                    f"(at most {self.max_ahead_ms} ms)")
        if event_ms < arrival_ms - self.max_behind_ms:
            return (f"{what} {event_ms} is {(arrival_ms - event_ms) // 1000} s older than the record's arrival "
                    f"(at most {self.max_behind_ms // 1000} s)")
        return None


NO_RULES = IntakeRules()   # no registry, the default clock bounds


def arrival_ms(record_timestamp_ms: int | None, now_ms: int) -> int:
    """When a record arrived: its Kafka timestamp, or the node's clock when it has none or claims
    a later time (a producer's own clock is not trusted to run ahead of the node's)."""
    if record_timestamp_ms is None or record_timestamp_ms <= 0:
        return now_ms
    return min(record_timestamp_ms, now_ms)


class RecentCycles:
    """The read cycles a partition carried over a span [lo, hi) of its offsets, shared by every
    query reading it in one process. A cycle at offset o is a duplicate exactly when the same
    (receptor, cycle, time) stands at an offset in [o - lookback, o): a decision that depends on the
    log alone, so each reader, and each replay, decides alike (dsp.spark.kafka_source keeps the span
    covering [start - lookback, start) of every range it reads: a range another worker read is a
    short gap to fill, not the whole look-back)."""

    def __init__(self, lo: int, lookback: int = DUPLICATE_LOOKBACK) -> None:
        self.lookback = lookback
        self.lo = self.hi = lo
        self._offsets: dict[tuple, list[int]] = {}   # key -> its offsets, ascending

    def serves(self, start: int) -> bool:
        """Whether this span can decide the offsets from `start` on once the gap [hi, start), if
        any, is fed: it holds everything from start - lookback and the gap is at most a look-back
        (a longer one is cheaper to start over from)."""
        return self.lo <= max(0, start - self.lookback) and start <= self.hi + self.lookback

    def seen(self, key: tuple, offset: int) -> int | None:
        """The latest offset of `key` in [offset - lookback, offset), or None; records `key` at
        `offset` if the span has not reached it yet (offsets are fed in order)."""
        offsets = self._offsets.setdefault(key, [])
        at = bisect.bisect_left(offsets, offset)
        earlier = offsets[at - 1] if at and offsets[at - 1] >= offset - self.lookback else None
        if offset >= self.hi:
            offsets.append(offset)
        return earlier

    def reached(self, end: int) -> None:
        """Every offset below `end` has been fed; forget what no later decision needs."""
        self.hi = max(self.hi, end)
        if self.hi - self.lo > 4 * self.lookback:   # keep the newest 2 look-backs: slower readers
            self.lo = self.hi - 2 * self.lookback
            self._offsets = {k: kept for k, offs in self._offsets.items()
                             if (kept := offs[bisect.bisect_left(offs, self.lo):])}


# ---------------------------------------------------------------- typed values of view rows

_PYTHON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,), "double": (float, int), "timestamp": (dt.datetime,), "boolean": (bool,), "binary": (bytes,),
}
_INT_BOUNDS = {"int": 2**31, "long": 2**63}


def value_problem(value: Any, kind: str) -> str | None:
    """Why `value` is not a value of column type `kind` (base.plan's types); None is NULL, always fine."""
    if value is None:
        return None
    if kind.startswith("array<"):
        if not isinstance(value, list):
            return f"{type(value).__name__} where an array is expected"
        return next((p for p in (value_problem(v, kind[6:-1]) for v in value) if p), None)
    if kind in _INT_BOUNDS:
        if isinstance(value, bool) or not isinstance(value, int):
            return f"{type(value).__name__} where an integer is expected"
        bound = _INT_BOUNDS[kind]
        return None if -bound <= value < bound else f"{value} out of range for {kind}"
    expected = _PYTHON_TYPES[kind]
    if kind == "double" and isinstance(value, bool) or not isinstance(value, expected):
        return f"{type(value).__name__} where {kind} is expected"
    return None


def rows_problem(columns: Sequence[str], rows: Sequence[Sequence[Any]],
                 wanted: Sequence[tuple[str, str]]) -> str | None:
    """Why a RowBatch's rows (with its `columns`) cannot feed a reader of `wanted` columns."""
    missing = [name for name, _ in wanted if name not in columns]
    if missing:
        return f"missing column(s) {', '.join(missing)}"
    index = {name: i for i, name in enumerate(columns)}
    for n, row in enumerate(rows):   # rows as wire.codec.parse_row_batch gives them: one value a column
        for name, kind in wanted:
            problem = value_problem(row[index[name]], kind)
            if problem is not None:
                return f"row {n}, column {name}: {problem}"
    return None
