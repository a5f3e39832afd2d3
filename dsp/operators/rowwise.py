"""The stateless operators: filter, project, lookup join, union."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa

from base.plan import Filter, LookupJoin, Project, conjuncts
from base.plan_schema import output_columns
from dsp.operators.core import Operator, carry_hidden, none_min
from dsp.operators.expressions import arrow_schema, column, evaluate
from dsp.operators.source import SILENT_CHILD_GRACE_MS
from dsp.operators.topic_batch import TopicBatch


@dataclass
class RowwiseOp(Operator):
    """An operator over one child that maps each batch its child gives (a filter, a projection, a
    lookup join row by row; the judging of mote quality period by period): it reads what its
    child reads and its progress is its child's unless it says otherwise."""

    child: Operator

    def apply(self, rows: pa.Table | None) -> pa.Table | None:
        """What it makes of its child's rows (None: its child read none of the topics)."""
        raise NotImplementedError

    def push(self, topic: str, batch: pa.Table) -> pa.Table | None:
        return self.apply(self.child.push(topic, batch))

    def push_many(self, pieces: Sequence[tuple[str, pa.Table]]) -> pa.Table | None:
        return self.apply(self.child.push_many(pieces))

    def push_tagged(self, batch: TopicBatch) -> pa.Table | None:
        return self.apply(self.child.push_tagged(batch))

    def bound(self) -> int | None:
        return self.child.bound()

    def late_rows(self) -> int:
        return self.child.late_rows()

    def triaged(self) -> tuple[int, int] | None:
        return self.child.triaged()


@dataclass
class FilterOp(RowwiseOp):
    plan: Filter

    def __post_init__(self) -> None:
        self.columns = self.child.columns
        self.terms = conjuncts(self.plan.predicate)

    def apply(self, rows: pa.Table | None) -> pa.Table | None:
        """The rows of `rows` the predicate holds for."""
        # term by term, in the plan's order (the planner puts the most selective first,
        # glue.rewrite.selectivity): each later term is evaluated on the rows the earlier kept
        for term in self.terms:
            if rows is None or not rows.num_rows:
                return rows
            keep = evaluate(term, rows)
            if isinstance(keep, pa.Scalar):
                rows = rows if keep.as_py() else rows.slice(0, 0)
            else:
                rows = rows.filter(keep)   # NULL is not true: dropped, as in SQL
        return rows


@dataclass
class ProjectOp(RowwiseOp):
    plan: Project

    def __post_init__(self) -> None:
        self.columns = output_columns(self.plan)
        self.schema = arrow_schema(self.columns)

    def apply(self, rows: pa.Table | None) -> pa.Table | None:
        """The projection of `rows`."""
        if rows is None:
            return None
        outputs = zip(self.plan.outputs, self.columns, strict=True)
        arrays = [column(expr, rows, kind) for (_, expr), (_, kind) in outputs]
        return carry_hidden(rows, pa.Table.from_arrays(arrays, schema=self.schema))


@dataclass
class LookupJoinOp(RowwiseOp):
    """Stream-static left outer equi-join with a relation the node holds."""

    plan: LookupJoin
    rows: Sequence[tuple] = ()

    def __post_init__(self) -> None:
        self.columns = output_columns(self.plan)
        self.schema = arrow_schema(self.columns)
        key_type = dict(self.child.columns)[self.plan.on]
        schema = arrow_schema([(self.plan.on, key_type), *self.plan.columns])
        self.relation = pa.Table.from_pylist([dict(zip(schema.names, row, strict=False)) for row in self.rows],
                                             schema=schema)

    def apply(self, rows: pa.Table | None) -> pa.Table | None:
        """`rows` joined with the relation (a row without a match keeps NULLs)."""
        if rows is None:
            return None
        joined = rows.join(self.relation, keys=self.plan.on, join_type="left outer", use_threads=False)
        return carry_hidden(joined, joined.select(self.schema.names).cast(self.schema))


@dataclass
class UnionOp(Operator):
    children: list[Operator]
    first_ms: int | None = None    # the first bound any input gave

    def __post_init__(self) -> None:
        self.columns = self.children[0].columns

    def push(self, topic: str, batch: pa.Table) -> pa.Table | None:
        parts = [rows for child in self.children if (rows := child.push(topic, batch)) is not None]
        # an input's rows may carry triage weights the other's lack (null: weight 1)
        return pa.concat_tables(parts, promote_options="default") if parts else None

    def bound(self) -> int | None:
        """The smallest of the inputs' bounds. An input with none yet is waited for (its reader
        may start later) until the others are SILENT_CHILD_GRACE_MS past their first; an input
        that far behind the newest (a node with no motes, or whose motes all went silent) must
        not hold the other's rows for ever."""
        bounds = [child.bound() for child in self.children]
        heard = [b for b in bounds if b is not None]
        if not heard:
            return None
        newest = max(heard)
        self.first_ms = none_min(self.first_ms, min(heard))
        if len(heard) < len(bounds) and newest - self.first_ms < SILENT_CHILD_GRACE_MS:
            return None
        return min(b for b in heard if newest - b < SILENT_CHILD_GRACE_MS)

    def late_rows(self) -> int:
        return sum(child.late_rows() for child in self.children)

    def triaged(self) -> tuple[int, int] | None:
        spans = [span for child in self.children if (span := child.triaged()) is not None]
        return (min(s[0] for s in spans), max(s[1] for s in spans)) if spans else None
