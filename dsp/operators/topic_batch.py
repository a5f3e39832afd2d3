"""A micro-batch of a reader of several topics (a parent's children's views), each row with its topic.

A parent of N children reads their N view topics through one Spark streaming query
(dsp.runtime.inputs); the batch holds every child's rows, tagged with their topic (TOPIC_COLUMN).
Parts evaluate it in one of two ways (dsp.operators): whole, the topic a column like any other
(an Aggregate over children's views: `AggregateOp.push_tagged`), or split into one table per topic
(`pieces`) for the rest (patterns and window joins, whose state takes rows in order; annotated
aggregates; raw sources). Both see the same rows in the same order and judge a row late against
the bound before its topic's rows.

Measured on a parent of 64 children (one row and one marker a child a batch, 2 batches/s): split
topic by topic a batch cost ~0.5 ms per topic in the driver, 64 filters, casts and maxima, which is
why a parent's CPU grew with its children; whole, the per-topic work is one group-by. Pure: no I/O.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from functools import cached_property

import pyarrow as pa
import pyarrow.compute as pc

from base.plan import PROGRESS_COLUMN
from dsp.operators.expressions import epoch_ms

TOPIC_COLUMN = "__topic"


def by_topic(table: pa.Table, topics: Sequence[str]) -> list[tuple[str, pa.Table]]:
    """A batch's rows split by the topic they came from (`TOPIC_COLUMN`), the column dropped, in
    the order of `topics` (a replayed batch splits alike); a batch without the column is all of
    its only topic's.

    >>> batch = pa.table({"n": [1, 2, 3], TOPIC_COLUMN: ["b", "a", "b"]})
    >>> [(topic, rows["n"].to_pylist()) for topic, rows in by_topic(batch, ["a", "b"])]
    [('a', [2]), ('b', [1, 3])]
    """
    if TOPIC_COLUMN not in table.column_names:
        return [(topics[0], table)] if len(topics) == 1 else []
    column, rows = table.column(TOPIC_COLUMN), table.drop_columns([TOPIC_COLUMN])
    present = set(pc.unique(column).to_pylist())
    if len(present) == 1:   # the usual small batch: no copy
        return [(topic, rows) for topic in topics if topic in present]
    return [(topic, rows.filter(pc.equal(column, topic))) for topic in topics if topic in present]


class TopicBatch:
    """One batch of rows of `topics` (the reader's, in its order), shared by every part reading
    it; what each part takes of it is `only` its own topics (the work on the whole batch shared)."""

    def __init__(self, table: pa.Table, topics: Sequence[str]) -> None:
        if TOPIC_COLUMN in table.column_names and table.column(0).num_chunks > 1:
            # a chunk per child's range as Spark hands it: filtering 64 chunks took 1.9 ms, one 0.05 ms
            # (combining them 0.3 ms, measured: a batch of 64 children's views, a row and a marker each)
            table = table.combine_chunks()
        self.table, self.reader_topics = table, list(topics)
        self.names = [n for n in self.table.column_names if n != TOPIC_COLUMN]
        self.whole = self
        self._times: dict[str, dict[str, tuple[int | None, int | None]]] = {}

    @cached_property
    def topics(self) -> list[str]:
        """The reader's topics this batch has rows of, in the reader's order."""
        if self.whole is not self:
            return [t for t in self.whole.topics if t in self.reader_topics]
        if TOPIC_COLUMN not in self.table.column_names:   # all of its only topic's
            return self.reader_topics[:1] if len(self.reader_topics) == 1 else []
        present = set(pc.unique(self.table[TOPIC_COLUMN]).to_pylist())
        return [t for t in self.reader_topics if t in present]

    @cached_property
    def pieces(self) -> list[tuple[str, pa.Table]]:
        """The batch split by topic (`by_topic`), split once for all the parts that take it so."""
        if self.whole is not self:
            return [(t, rows) for t, rows in self.whole.pieces if t in self.reader_topics]
        return by_topic(self.table, self.reader_topics)

    @cached_property
    def is_marker(self) -> pa.ChunkedArray:
        """Per row whether it is a progress marker."""
        if self.whole is not self:
            return self.whole.is_marker
        if PROGRESS_COLUMN not in self.table.column_names:
            return pa.chunked_array([pa.array([False] * self.table.num_rows, pa.bool_())])
        return pc.fill_null(self.table[PROGRESS_COLUMN], False)

    def times(self, event_time: str) -> dict[str, tuple[int | None, int | None]]:
        """Per topic, the newest event time (ms) of its rows and of its progress markers: what its
        rows tell a source of children's views (dsp.operators.source.SourceProgress), in one group-by."""
        found = self.whole._times
        if event_time not in found:
            found[event_time] = self.whole._newest_by_topic(event_time)
        return found[event_time]

    def _newest_by_topic(self, event_time: str) -> dict[str, tuple[int | None, int | None]]:
        columns = {"t": self.table[TOPIC_COLUMN], "m": self.is_marker, "ms": epoch_ms(self.table[event_time])}
        grouped = pa.table(columns).group_by(["t", "m"], use_threads=False).aggregate([("ms", "max")])
        found: dict[str, list[int | None]] = {}
        for topic, is_marker, newest in zip(*(grouped[c].to_pylist() for c in ("t", "m", "ms_max")), strict=True):
            found.setdefault(topic, [None, None])[1 if is_marker else 0] = newest
        return {topic: (rows, mark) for topic, (rows, mark) in found.items()}

    def only(self, topics: set[str]) -> TopicBatch:
        """The same batch as a part reading `topics` of it sees it."""
        view = copy.copy(self)
        view.__dict__.pop("topics", None)
        view.__dict__.pop("pieces", None)
        view.reader_topics = [t for t in self.reader_topics if t in topics]
        return view
