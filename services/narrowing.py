"""What `hifi nodes` and `hifi status` show of a large hierarchy: the nodes a pattern, a tier or
"only those not well" pick (their receptors and queries with them), the ones not well first, and
at most `limit` rows a table with a line saying how many more there are. Pure: tables in
(services.tables' headers and rows), tables out.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass

Table = tuple[list[str], list[list[object]]]
WELL = "alive"


@dataclass(frozen=True)
class Narrowing:
    """Which nodes to show (`node`: a glob such as 'wh-*'; `tier`; `problems`: only those whose
    state is not alive) and how many rows a table at most (0: all)."""

    node: str = ""
    tier: str = ""
    problems: bool = False
    limit: int = 0

    def keeps(self, node: str, tier: str, state: str) -> bool:
        return ((not self.node or fnmatch.fnmatchcase(node, self.node)) and (not self.tier or tier == self.tier)
                and (not self.problems or state.lower() != WELL))

    @property
    def narrows(self) -> bool:
        return bool(self.node or self.tier or self.problems)


def nodes_kept(table: Table, narrowing: Narrowing) -> tuple[Table, set[str]]:
    """A nodes table's rows the narrowing keeps, those not well first (then in their order), and
    their ids.

    >>> rows = [["hq", "core", "alive"], ["d1", "edge", "LAGGING"], ["d2", "edge", "alive"]]
    >>> table = (["node", "tier", "state"], rows)
    >>> nodes_kept(table, Narrowing(tier="edge"))[0][1]
    [['d1', 'edge', 'LAGGING'], ['d2', 'edge', 'alive']]
    >>> nodes_kept(table, Narrowing(problems=True))[1], nodes_kept(table, Narrowing(node="d*"))[1] == {"d1", "d2"}
    ({'d1'}, True)
    """
    headers, rows = table
    at = {name: headers.index(name) for name in ("node", "tier", "state")}
    kept = [row for row in rows if narrowing.keeps(*(str(row[at[name]]) for name in ("node", "tier", "state")))]
    kept.sort(key=lambda row: str(row[at["state"]]).lower() == WELL)   # stable: the not-well ones first
    return (headers, kept), {str(row[at["node"]]) for row in kept}


def rows_of_nodes(table: Table, column: str, nodes: set[str]) -> Table:
    """The rows of a table (receptors, queries) whose `column` is one of `nodes`."""
    headers, rows = table
    at = headers.index(column)
    return headers, [row for row in rows if row[at] in nodes]


def limited(table: Table, limit: int) -> tuple[Table, int]:
    """At most `limit` rows (0: all), and how many were left out.

    >>> limited((["n"], [[1], [2], [3]]), 2)
    ((['n'], [[1], [2]]), 1)
    """
    headers, rows = table
    if limit <= 0 or len(rows) <= limit:
        return table, 0
    return (headers, rows[:limit]), len(rows) - limit


def more_line(left_out: int, what: str) -> str:
    return f"… {left_out} more {what} (--limit, or narrow with --node, --tier, --problems)"


def narrowed_status(tables: dict[str, Table], problems: Sequence[str], narrowing: Narrowing
                    ) -> tuple[dict[str, Table], list[str]]:
    """`hifi status`'s tables and problem lines for the nodes the narrowing keeps: their receptors
    (by the edge that took them in) and the queries rooted at them; each table limited, a line
    saying what was left out."""
    nodes, kept = nodes_kept(tables["nodes"], narrowing)
    found = {"nodes": nodes, "receptors": rows_of_nodes(tables["receptors"], "node", kept),
             "queries": rows_of_nodes(tables["queries"], "root", kept)} if narrowing.narrows else \
        {"nodes": nodes, "receptors": tables["receptors"], "queries": tables["queries"]}
    lines = [line for line in problems if line.split(":", 1)[0] in kept]
    for name in found:
        found[name], left_out = limited(found[name], narrowing.limit)
        if left_out:
            lines.append(more_line(left_out, name))
    return found, lines
