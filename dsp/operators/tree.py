"""Walks over an operator tree: its sources, and whether (and how) an aggregate takes a batch of many topics whole."""

from __future__ import annotations

import pyarrow as pa

from dsp.operators.core import Operator, together
from dsp.operators.rowwise import FilterOp, LookupJoinOp, ProjectOp, RowwiseOp, UnionOp
from dsp.operators.source import SourceOp
from dsp.operators.topic_batch import TopicBatch
from dsp.operators.window_join import WindowJoinOp


def takes_whole(op: Operator) -> bool:
    """Whether `op` (an Aggregate's input) computes a batch of children's views at once: sources
    of views under filters, projections, lookup joins and unions (spark_partials' prefix too)."""
    if isinstance(op, SourceOp):
        return op.plan.format == "rows"
    if isinstance(op, UnionOp):
        return all(takes_whole(child) for child in op.children)
    return isinstance(op, FilterOp | ProjectOp | LookupJoinOp) and takes_whole(op.child)


def tagged_rows(op: Operator, batch: TopicBatch, topics: set[str]) -> pa.Table | None:
    """`op`'s rows (`takes_whole`) of the batch's `topics`, each with its topic."""
    if isinstance(op, SourceOp):
        return op.tagged_rows(batch, topics)
    if isinstance(op, UnionOp):
        found = [rows for child in op.children if (rows := tagged_rows(child, batch, topics)) is not None]
        return together(found)
    assert isinstance(op, RowwiseOp)
    return op.apply(tagged_rows(op.child, batch, topics))


def sources_under(root: Operator) -> list[SourceOp]:
    """The sources `root` reads, left to right."""
    if isinstance(root, SourceOp):
        return [root]
    children = root.children if isinstance(root, UnionOp | WindowJoinOp) else [root.child]   # type: ignore[attr-defined]
    return [source for child in children for source in sources_under(child)]


def raw_sources(root: Operator) -> list[SourceOp]:
    """The sources of raw readings or samples under `root` (their bound is event time minus lateness)."""
    return [source for source in sources_under(root) if not source.plan.markers]
