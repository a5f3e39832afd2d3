"""Rewrite rule: each input of a stream join as a selection of its own, placed and planned like
any selection (filtered and projected at its producers, its rows sent up with progress markers);
the join runs at the lowest common ancestor of all their producers. Pure.

>>> from glue.analyzer import analyze
>>> from tests.catalogs import supply_chain_catalog
>>> query = analyze("SELECT a.receptor_id, b.temperature FROM sensor_stream a JOIN sensor_stream b "
...                 "ON b.ts BETWEEN a.ts AND a.ts + INTERVAL '5' SECOND WHERE a.temperature > 30",
...                 supply_chain_catalog())
>>> [(name, expr.name) for name, expr in input_query(query, query.stream_join.inputs[0]).outputs]
[('receptor_id', 'receptor_id')]
>>> input_query(query, query.stream_join.inputs[0]).predicate
BinOp(op='>', left=Col(name='temperature'), right=Lit(value=30))
"""

from __future__ import annotations

from base.plan import Col, expr_columns
from glue.logical_query import LogicalQuery
from glue.stream_join import JoinInput


def used_columns(query: LogicalQuery) -> set[str]:
    """Every column of the joined rows the query reads after the join (qualified names)."""
    assert query.stream_join is not None
    exprs = [query.predicate, query.having, *(e for _, e in query.outputs), *(e for _, e in query.derived)]
    names = {name for expr in exprs if expr is not None for name in expr_columns(expr)}
    names |= set(query.keys) | {call.column for call in query.aggregates if call.column}
    return names | {column for pair in query.stream_join.keys for column in pair}


def input_query(query: LogicalQuery, given: JoinInput) -> LogicalQuery:
    """The selection of `given` the join reads: its own conditions, the columns used of it."""
    used = used_columns(query)
    kept = tuple(name for name, _ in given.source_columns if f"{given.alias}.{name}" in used)
    return LogicalQuery(text=query.text, source=given.source, source_kind=given.source_kind,
                        source_columns=given.source_columns, event_time=given.event_time,
                        source_window=given.source_window, window=None, joins=(), predicate=given.predicate,
                        keys=(), aggregates=(), having=None, outputs=tuple((name, Col(name)) for name in kept))
