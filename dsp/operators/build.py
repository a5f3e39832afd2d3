"""A plan's evaluator built, and run over batches (for tests and tools)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import pyarrow as pa

from base.plan import (
    PROGRESS_COLUMN,
    Aggregate,
    Changes,
    Filter,
    LookupJoin,
    Match,
    Plan,
    PlanError,
    Project,
    Qualify,
    Source,
    Union_,
    WindowJoin,
)
from base.plan_schema import output_columns
from dsp.operators.aggregate import AggregateOp
from dsp.operators.changes import ChangesOp
from dsp.operators.core import Operator
from dsp.operators.expressions import arrow_schema, epoch_ms
from dsp.operators.pattern import MatchOp
from dsp.operators.quality import QualifyOp, qualify_means
from dsp.operators.rowwise import FilterOp, LookupJoinOp, ProjectOp, UnionOp
from dsp.operators.source import SourceOp
from dsp.operators.window_join import WindowJoinOp


def lateness_seen(batches: Iterable[pa.Table], column: str) -> int:
    """How far (ms) behind the newest event time before it the latest row of `batches`, in order,
    came: the lateness a replay of them needs for no row to be late."""
    newest, most = None, 0
    for batch in batches:
        if column not in batch.column_names or not batch.num_rows:
            continue
        stamps = epoch_ms(batch[column]).drop_null().to_numpy()
        if not len(stamps):
            continue
        before = np.maximum.accumulate(stamps)
        if newest is not None:
            before = np.maximum(before, newest)
        most = max(most, int((before - stamps).max()))
        newest = int(before[-1])
    return most


def build(plan: Plan, relations: Mapping[str, Sequence[tuple]]) -> Operator:
    """The evaluator of a plan; `relations` holds the rows of the static relations it joins."""
    output_columns(plan)   # type-check first: errors name the operator
    if isinstance(plan, Source):
        return SourceOp(plan)
    if isinstance(plan, Filter):
        return FilterOp(plan=plan, child=build(plan.child, relations))
    if isinstance(plan, Project):
        return ProjectOp(plan=plan, child=build(plan.child, relations))
    if isinstance(plan, Aggregate):
        return AggregateOp(plan, build(plan.child, relations))
    if isinstance(plan, LookupJoin):
        rows = relations.get(plan.relation)
        if rows is None:
            raise PlanError(f"static relation {plan.relation!r} is not replicated at this node")
        return LookupJoinOp(plan=plan, child=build(plan.child, relations), rows=list(rows))
    if isinstance(plan, Union_):
        return UnionOp([build(child, relations) for child in plan.children])
    if isinstance(plan, Match):
        return MatchOp(plan, build(plan.child, relations))
    if isinstance(plan, WindowJoin):
        return WindowJoinOp(plan, [build(child, relations) for child in plan.children])
    if isinstance(plan, Qualify):
        return QualifyOp(plan=plan, child=build(qualify_means(plan), relations))
    if isinstance(plan, Changes):
        return ChangesOp(plan=plan, child=build(plan.child, relations))
    raise PlanError(f"{type(plan).__name__} does not run in the shared runtime")


def supported(plan: Plan) -> bool:
    """Whether the evaluator runs every operator of the plan (Smooth keeps a Spark query of its
    own: its state lives in its sink, dsp.spark.smoothing)."""
    if isinstance(plan, Source):
        return True
    if isinstance(plan, Union_ | WindowJoin):
        return all(supported(child) for child in plan.children)
    if isinstance(plan, Filter | Project | Aggregate | LookupJoin | Match | Qualify | Changes):
        return supported(plan.child)
    return False


def rows_of(table: pa.Table) -> list[tuple]:
    """A table's rows as tuples (timestamps as aware datetimes), for the wire (wire.codec)."""
    return list(zip(*[table[name].to_pylist() for name in table.column_names], strict=True))


def view_batch(columns: Sequence[tuple[str, str]], rows: pa.Table | None = None,
               marker_ms: int | None = None) -> pa.Table:
    """A view's rows, then a progress marker, in a view reader's shape (dsp.spark.kafka_source): what a
    part on the same node as the view's producer is handed without a Kafka round trip."""
    schema = arrow_schema([*columns, (PROGRESS_COLUMN, "boolean")])
    parts = []
    if rows is not None and rows.num_rows:
        shaped = rows.append_column(PROGRESS_COLUMN, pa.nulls(rows.num_rows, pa.bool_()))
        # cast only when it changes something: a cast costs per column, and a door's few rows a
        # batch paid ~0.7 ms for one in a process of 33 lanes (py-spy, 2026-11-28)
        parts.append(shaped if shaped.schema.equals(schema) else shaped.cast(schema))
    if marker_ms is not None:
        stamp = pa.scalar(marker_ms * 1000, pa.timestamp("us", tz="UTC"))
        parts.append(pa.Table.from_arrays([pa.array([stamp if kind == "timestamp" else None], field.type)
                                           if name != PROGRESS_COLUMN else pa.array([True])
                                           for (name, kind), field in zip([*columns, (PROGRESS_COLUMN, "boolean")],
                                                                          schema, strict=True)], schema=schema))
    return pa.concat_tables(parts) if parts else schema.empty_table()


def run_batches(plan: Plan, batches: Iterable[tuple[str, pa.Table]],
                relations: Mapping[str, Sequence[tuple]] | None = None) -> list[tuple]:
    """Every row a plan emits over a sequence of (topic, batch): for tests and tools."""
    root = build(plan, relations or {})
    out: list[tuple] = []
    for topic, batch in batches:
        rows = root.push(topic, batch)
        if rows is not None:
            out.extend(rows_of(rows))
    return out
