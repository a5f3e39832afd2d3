"""Rewrite rule: split aggregates into partials below, merges in between, and a final above. Pure.

    count(*), count(x)   partial count        merge sum          final the sum
    sum(x)               partial sum          merge sum          final the sum
    min(x) / max(x)      partial min / max    merge min / max    final as is
    avg(x)               partial sum, count   merge sum, sum     final sum / count
    count(DISTINCT x)    partial set of x     merge set union    final size of the set
    tag_estimate(tag)    partial set of reads merge set union    final the π-estimate over the set
                         (and its interval's ends _low, _high: one set of reads for the three)

Every stage's columns keep the aggregate's name (with a suffix where it needs two), so a merge
can run any number of levels deep and the final projection finds its inputs by name.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass

from base.plan import AggSpec, BinOp, Col, Expr, Func
from glue.logical_query import AggCall
from glue.sql.parser import TAG_ESTIMATES


@dataclass(frozen=True)
class SplitAggregate:
    partial: tuple[AggSpec, ...]   # over raw input rows
    merge: tuple[AggSpec, ...]     # over partial (or merged) rows
    final: Expr                    # over merged rows: the aggregate's value


def split(call: AggCall) -> SplitAggregate:
    name, column = call.name, call.column
    if call.fn == "count":
        return SplitAggregate((AggSpec(name, "count", column),), (AggSpec(name, "sum", name),), Col(name))
    if call.fn in ("sum", "min", "max"):
        merge_fn = "sum" if call.fn == "sum" else call.fn
        return SplitAggregate((AggSpec(name, call.fn, column),), (AggSpec(name, merge_fn, name),), Col(name))
    if call.fn == "avg":
        total, n = f"{name}__sum", f"{name}__n"
        return SplitAggregate((AggSpec(total, "sum", column), AggSpec(n, "count", column)),
                              (AggSpec(total, "sum", total), AggSpec(n, "sum", n)),
                              BinOp("/", Func("double", (Col(total),)), Col(n)))
    if call.fn == "count_distinct":
        members = f"{name}__set"
        return SplitAggregate((AggSpec(members, "collect_set", column),), (AggSpec(members, "union_sets", members),),
                              Func("size", (Col(members),)))
    if call.fn in TAG_ESTIMATES:
        reads = f"{call.column}__set"   # the query's estimates over one tag column share it
        return SplitAggregate((AggSpec(reads, "collect_set", call.column),), (AggSpec(reads, "union_sets", reads),),
                              Func(call.fn, (Col(reads),)))
    raise ValueError(f"aggregate {call.fn!r} cannot be split")


Specs = tuple[AggSpec, ...]


@functools.lru_cache(maxsize=1024)
def split_all(calls: tuple[AggCall, ...]) -> tuple[Specs, Specs, tuple[tuple[str, Expr], ...]]:
    """(partials, merges, finals as (name, expression)) for a query's aggregates (once per query:
    its parts ask for them at every node, and share what they get)."""
    parts = [split(call) for call in calls]
    return (_once(s for p in parts for s in p.partial), _once(s for p in parts for s in p.merge),
            tuple((call.name, p.final) for call, p in zip(calls, parts, strict=True)))


def _once(specs: Iterable[AggSpec]) -> Specs:
    """The specs, a spec two aggregates share (a tag estimate and its interval's) once."""
    return tuple(dict.fromkeys(specs))
