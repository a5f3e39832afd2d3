"""Rewrite rule's estimates for a stream join: each input's rows per second, from what the MDR
keeps (each node's input rate, shared evenly among its receptors; the motes' histograms for the
input's own conditions), and the probe order they choose (base.window_join.probe_order). Pure.

The node that runs the join chooses its order again from its own buffers as rows arrive (the data's
own statistics where the join runs), so these estimates say what to expect; an input whose rate
cannot be estimated (a view: the MDR keeps no view's rate) leaves the order to the join's shape.

>>> from glue.catalog import ReceptorInfo
>>> from glue.rewrite.placement import Placement
>>> motes = [ReceptorInfo("m1", "e1", "", "", "mote"), ReceptorInfo("m2", "e1", "", "", "mote")]
>>> catalog = Catalog({}, [], {}, {}, motes, node_rates={"e1": 4.0})
>>> input_rate(Placement("e1", ("e1",), ("m1",)), None, catalog)
2.0
"""

from __future__ import annotations

import math
from collections import Counter

from base.plan import Expr, conjuncts
from base.window_join import InputStats, probe_cost, probe_order, time_reach
from glue.catalog import Catalog
from glue.rewrite.placement import Placement
from glue.rewrite.selectivity import estimate
from glue.stream_join import StreamJoin


def input_rate(placement: Placement, predicate: Expr | None, catalog: Catalog) -> float | None:
    """Rows per second an input's producers send: its receptors' share of their nodes' input
    rates, times the share of recent values its own conditions keep (where histograms tell)."""
    nodes = {r.id: r.node for r in catalog.receptors}
    scope = [r for r in placement.receptors if r in nodes]
    if not scope or any(nodes[r] not in catalog.node_rates for r in scope):
        return None
    per_node = Counter(r.node for r in catalog.receptors)
    rate = sum(catalog.node_rates[nodes[r]] / per_node[nodes[r]] for r in scope)
    for term in conjuncts(predicate):
        share = estimate(term, catalog, scope)
        rate *= 1.0 if share is None else share
    return rate


def explain(join: StreamJoin, rates: dict[str, float | None]) -> list[str]:
    """The explain lines: each input's estimated rate, and the order a row of each probes the others in."""
    estimated = ", ".join(f"{alias} ~{rate:.3g} rows/s" if rate is not None else f"{alias} (no estimate)"
                          for alias, rate in rates.items())
    lines = [f"    inputs: {estimated}; the join re-chooses its order from its own buffers as rows come"]
    reach = time_reach(join.aliases, join.bounds)
    stats = {a: InputStats(r) for a, r in rates.items() if r is not None}
    known = len(stats) == len(join.aliases)
    for first, rest in probe_order(join.aliases, join.keys, reach, stats if known else None).items():
        cost = probe_cost(first, rest, join.keys, reach, stats) if known else math.nan
        expected = f" (~{cost:.3g} rows examined a row)" if known else " (by the join's shape)"
        lines.append(f"    a row of {first} probes {', '.join(rest)}{expected}")
    return lines
