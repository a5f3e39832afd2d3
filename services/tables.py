"""The listings users ask for — nodes, views, motes, the health summary — as tables built from the
MDR: what `hifi nodes|views|motes|status` print (services.listing renders them) and what the
placement service's `Listing` call answers a caller with only a token (its views and queries
filtered by what the caller may read and touch). A table crosses the wire as JSON (`encode`,
`decode`), its times as epoch milliseconds so that each side shows them its own way."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime

from glue.catalog import internal_view
from mdr.repository import now_ms
from services.health import CountsSample, RateWindow, moves, node_health, tiers_top_down
from services.listing import clock, when
from wire.identity import Identity

Table = tuple[list[str], list[list[object]]]   # headers, rows
LISTINGS = ("nodes", "views", "motes", "status")


def nodes_table(mdr) -> Table:
    moved = moves(mdr.adoptions(), lambda ms: clock(when(ms)) if ms else "-")
    return (["node", "tier", "parent", "address", "state", "last heartbeat", "up since", "starts", "moved"],
            [[n.id, n.tier, n.parent or None, n.address, "alive" if n.alive else "DEAD", when(n.last_heartbeat_ms),
              when(n.started_ms), n.starts, moved.get(n.id, ("", None))[1]] for n in mdr.nodes()])


def views_table(mdr, node: str | None = None, caller: Identity | None = None) -> Table:
    """Exported views (of `node`), those `caller` may read when one is given."""
    views = [v for v in mdr.views(node) if caller is None or caller.may_read(v.readers)]
    return (["view", "node", "window", "topic", "readers"],
            [[v.name, v.node, v.window or None, v.topic or "(definition only)", ",".join(v.readers)] for v in views])


def motes_table(mdr, node: str | None = None) -> Table:
    edges = [node] if node else sorted(n.id for n in mdr.nodes() if n.tier == "edge")
    return (["node", "mote", "sends", "quantities", "version"],
            [[edge, mote, told["rule"], ", ".join(told.get("fields", ())) or "all", told["version"]]
             for edge in edges for mote, told in sorted(mdr.told(edge).items())])


def status_tables(mdr, rates: RateWindow | None = None, caller: Identity | None = None
                  ) -> tuple[dict[str, Table], list[str]]:
    """What `hifi status` shows (the dashboard shows the same): its tables, "nodes", "receptors" and
    "queries" (those `caller` may touch when one is given), and a line for each node not well.
    With `rates` (kept across redraws), each receptor's reads/s and read-cycle time since the
    earlier ones."""
    from services.health import query_states

    now = now_ms()
    views = mdr.views()
    health = tiers_top_down([node_health(n, mdr.stats(n.id),   # the users' views, not the planner's own
                                         [v.name for v in views if v.node == n.id and not internal_view(v.name)], now)
                             for n in mdr.nodes()])
    nodes = (["node", "tier", "state", "rows in", "rows/s", "lag s", "rows out", "dead", "late", "queries",
              "archived KB", "uplink queue KB", "triaged", "views"],
             [[h.id, h.tier, h.state.upper() if h.state != "alive" else h.state, h.rows_in,
               round(h.input_rate, 1), round(h.lag_s, 1), h.rows_out, h.dead_lettered, h.late_rows, h.queries,
               h.archive_bytes // 1000, h.uplink_queued_bytes // 1000, h.triaged, ",".join(h.views) or None]
              for h in health])
    problems = [f"{h.id}: {h.state} ({h.reason})" for h in health if h.reason]
    by_edge = {h.id: mdr.receptor_stats(h.id) for h in health if h.tier == "edge"}
    edges = {rid: node for node, stats in by_edge.items() for rid in stats}
    counts = {rid: c for stats in by_edge.values() for rid, c in stats.items()}
    rates = rates.add(CountsSample(now, counts)) if rates is not None else {}
    receptors = (["receptor", "node", "reads", "cycles", "weak", "reads/s", "cycle ms", "state"],
                 [[rid, edges.get(rid), c["reads"], c["cycles"], c["weak"],
                   round(rates[rid].reads_per_s, 1) if rid in rates else None,
                   round(rates[rid].cycle_ms) if rid in rates and rates[rid].cycle_ms else None,
                   "SILENT" if rid in rates and rates[rid].silent else "reading" if rid in rates else None]
                  for rid, c in sorted(counts.items())])
    queries = [q for q in mdr.queries() if caller is None or caller.may_touch(q.principal)]
    states = query_states(mdr, queries)
    running = (["query", "root", "submitted", "text", "cause"],
               [[q.id, q.root, when(q.submitted_ms), " ".join(q.text.split()), states[q.id][1] or None]
                for q in queries])
    return {"nodes": nodes, "receptors": receptors, "queries": running}, problems


def encode(tables: Mapping[str, Table], problems: list[str] = ()) -> str:
    """Tables as JSON for the wire: each its headers, rows, and which columns hold times (as ms).

    >>> from datetime import UTC
    >>> text = encode({"nodes": (["node", "up since"], [["door1", datetime(2026, 12, 3, tzinfo=UTC)]])})
    >>> decode(text)[0]["nodes"][1] == [["door1", datetime(2026, 12, 3, tzinfo=UTC)]]
    True
    """
    def plain(value: object) -> object:
        return int(value.timestamp() * 1000) if isinstance(value, datetime) else value

    return json.dumps({"tables": {name: {"headers": headers, "rows": [[plain(v) for v in row] for row in rows],
                                         "times": sorted({i for row in rows for i, v in enumerate(row)
                                                          if isinstance(v, datetime)})}
                                  for name, (headers, rows) in tables.items()},
                       "problems": list(problems)})


def decode(text: str) -> tuple[dict[str, Table], list[str]]:
    found = json.loads(text)
    tables = {}
    for name, table in found["tables"].items():
        times = set(table["times"])
        tables[name] = (table["headers"], [[when(v) if i in times and v is not None else v for i, v in enumerate(row)]
                                           for row in table["rows"]])
    return tables, found["problems"]
