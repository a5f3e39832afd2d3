"""What every operator is: a batch in, rows out, a bound; and the hidden columns of a triaged batch."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from dsp.operators.topic_batch import TOPIC_COLUMN, TopicBatch

# Hidden columns of a triaged batch's rows (see the module docstring): how many records a row's
# record stands for, and which record it came from (partition and offset in one number).
WEIGHT, CLUSTER = "__weight", "__cluster"


HIDDEN = (WEIGHT, CLUSTER)


def none_min(a: Any, b: Any) -> Any:
    return b if a is None else a if b is None else min(a, b)


def none_max(a: Any, b: Any) -> Any:
    return b if a is None else a if b is None else max(a, b)


def none_add(a: Any, b: Any) -> Any:
    return b if a is None else a if b is None else a + b


def first_window_open(bound: int, range_ms: int, slide_ms: int) -> int:
    """The start of the earliest window (starts are multiples of the slide) ending after `bound`."""
    return ((bound - range_ms) // slide_ms + 1) * slide_ms


def together(tables: Sequence[pa.Table]) -> pa.Table | None:
    """Tables of one operator's output as one (a triaged input's hidden weights: null is 1)."""
    if len(tables) <= 1:
        return tables[0] if tables else None
    return pa.concat_tables(tables, promote_options="default")


class Operator:
    """One node of an evaluated plan: `push` hands it a topic's batch (in the reader's shape)
    and returns the rows it lets through now, or None when it does not read that topic."""

    columns: tuple[tuple[str, str], ...]

    def push(self, topic: str, batch: pa.Table) -> pa.Table | None:
        raise NotImplementedError

    def push_many(self, pieces: Sequence[tuple[str, pa.Table]]) -> pa.Table | None:
        """One micro-batch of several topics (a shared reader's), as `push` of each in turn would
        return it, the rows together; None when the operator reads none of them. An aggregate
        folds and emits once (AggregateOp), whatever the number of topics."""
        outs = [out for topic, batch in pieces if (out := self.push(topic, batch)) is not None]
        return together(outs)

    def push_tagged(self, batch: TopicBatch) -> pa.Table | None:
        """A shared reader's micro-batch (dsp.operators.topic_batch), as `push_many` of its pieces would
        return it; an Aggregate over children's views takes it whole (AggregateOp.push_tagged)."""
        return self.push_many(batch.pieces)

    def bound(self) -> int | None:
        raise NotImplementedError

    def late_rows(self) -> int:
        return 0

    def triaged(self) -> tuple[int, int] | None:
        """The event-time span (ms) of the last batch pushed if Data Triage sampled it, else None."""
        return None


def carry_hidden(source: pa.Table, out: pa.Table) -> pa.Table:
    """`out` (computed row for row from `source`) with `source`'s triage weights and topic, if it has them."""
    for name in (*HIDDEN, TOPIC_COLUMN):
        if name in source.column_names:
            out = out.append_column(name, source[name])
    return out


def as_ms(value: Any) -> int:
    if hasattr(value, "timestamp"):
        return round(value.timestamp() * 1000)
    return int(value)


def truths(values: Any, n: int) -> list[bool]:
    """A condition's values as booleans (NULL is not true)."""
    if isinstance(values, pa.Scalar):
        return [values.as_py() is True] * n
    return [v is True for v in values.to_pylist()]
