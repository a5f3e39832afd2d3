"""What is running, as tables: `hifi nodes`, `views`, `motes`, `status` (a redrawn summary) and
`health` (a probe for containers and scripts): their parsers, help and work."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from glue.topology import load_topology
from services.cli.common import (
    CLIError,
    cli_security,
    connect_mdr,
    format_option,
    placement_stub,
    print_listing,
    progress,
    rpc_error,
    say,
    topology_option,
)
from services.cli.option_types import bounded, positive

# what each command does, in prose: its --help description and its part of docs/cli.md
DESCRIPTIONS: dict[str, str] = {
    'nodes': (
        'nodes with tier, parent, gRPC address, alive/DEAD (heartbeat TTL 5 s), last heartbeat, when its '
        'process started and how many processes have started as it (a restart adds one), and `moved`: a '
        're-parenting under way (a child `moved to <adopter> (<parent> dead)`, a dead parent `parts at '
        '<adopter> since …`); those not well first. On a large hierarchy `--node`, `--tier` and `--problems` '
        'pick the nodes shown and `--limit` caps the rows (a line says how many more)'
    ),
    'views': (
        'exported views with node, window, topic, readers'
    ),
    'motes': (
        "what each edge node's sensor proxy told its motes to send — `always`, `never` (no running query "
        'reads the mote) or thresholds such as `(temperature > 30) OR (humidity >= 45) OR (every 6 s)` —, the'
        ' quantities a sample carries (those the queries read; `all`) and the settings version (see *The '
        'sensor proxy*)'
    ),
    'status': (
        'the health summary the dashboard shows: per node (core first) its state — alive, `FAILED` (a query '
        'part on it died: `hifi queries` names the cause), `LAGGING` (newest processed event older than 120 '
        's, its input waiting 30 s for it, or no statistics for 10 s), `TRIAGING` (over its latency target '
        'in the last 10 s: Data Triage decoded a sample of its input, and approximate queries\' windows say '
        'so) or `DEAD` (no heartbeat within the 5 s TTL) with the reason — readings'
        ' in, input rows/s, lag (s), rows out, dead-lettered, late rows, queries, KB archived since it '
        'started and KB waiting for its constrained uplink (see *The archive* and *Priorities*), exported '
        'views; per receptor the readings, read cycles and weak readings (below `strength_T`) its edge took '
        'in; the running queries. `--watch` redraws every `--interval` seconds (default 2) until Ctrl-C, '
        "adding each receptor's reads/s, read-cycle time and `SILENT` when it ran no cycle for 5 s. "
        '`--node`, `--tier` and `--problems` pick the nodes shown (with their receptors and the queries '
        'rooted at them), those not well first; `--limit` caps each table (a line says how many more)'
    ),
    'health': (
        'print `healthy` or `unhealthy: <why>` and exit 0 or 1: a node alive in the MDR and exporting all its'
        ' views; a gRPC server reporting SERVING; a URL answering 200; a file written within `--max-age` '
        "seconds (default 30). The compose deployment's health checks"
    ),
}


def _narrowing_options(parser: argparse.ArgumentParser) -> None:
    """Which nodes a listing of a large hierarchy shows (services.narrowing)."""
    parser.add_argument("--node", metavar="PATTERN", help="only the nodes whose id matches, e.g. 'wh-*' (a glob)")
    parser.add_argument("--tier", choices=["edge", "aggregation", "core"], help="only the nodes of this tier")
    parser.add_argument("--problems", action="store_true", help="only the nodes that are not alive and well")
    parser.add_argument("--limit", type=bounded(int, 0), default=0, metavar="N",
                        help="at most N rows a table, and a line saying how many more (default 0: all)")


def add_nodes(sub: argparse._SubParsersAction) -> None:
    nodes = sub.add_parser("nodes", help="nodes in the MDR with tier, parent, address, liveness")
    _narrowing_options(nodes)
    format_option(nodes)
    nodes.set_defaults(func=cmd_nodes)


def add_views(sub: argparse._SubParsersAction) -> None:
    views = sub.add_parser("views", help="exported views with node, window and topic")
    views.add_argument("--node", default=None, help="only this node's views")
    format_option(views)
    views.set_defaults(func=cmd_views)


def add_motes(sub: argparse._SubParsersAction) -> None:
    motes = sub.add_parser("motes", help="what each edge node's sensor proxy told its motes to send (always, "
                                         "never, or thresholds) and the settings version")
    motes.add_argument("--node", default=None, help="only this edge node's motes")
    format_option(motes)
    motes.set_defaults(func=cmd_motes)


def add_status(sub: argparse._SubParsersAction) -> None:
    status = sub.add_parser("status", help="health per node (alive, lagging, dead), input rate, lag, dead letters, "
                                           "receptor telemetry, running queries")
    status.add_argument("--watch", action="store_true", help="redraw every --interval seconds until Ctrl-C, "
                                                             "with each receptor's reads/s and read-cycle time")
    status.add_argument("--interval", type=positive(float), default=2.0, help="seconds between redraws (default 2)")
    _narrowing_options(status)
    format_option(status, ("table", "json"))   # json: one object of its tables a report
    status.set_defaults(func=cmd_status)


def add_health(sub: argparse._SubParsersAction) -> None:
    health = sub.add_parser("health", help="check a service, print healthy/unhealthy and exit 0/1 (the "
                                           "containers' health checks)")
    health.add_argument("--node", default=None, help="this node is alive in the MDR and exports all its views")
    topology_option(health)
    health.add_argument("--grpc", default=None, metavar="ADDRESS", help="this gRPC server reports SERVING")
    health.add_argument("--http", default=None, metavar="URL", help="this URL answers 200")
    health.add_argument("--fresh", default=None, metavar="FILE", help="this file was written within --max-age")
    health.add_argument("--max-age", type=positive(float), default=30.0, help="seconds, for --fresh (default 30)")
    health.set_defaults(func=cmd_health)


def _through_placement() -> bool:
    """Whether listings come from the placement service (a placement named, no MDR URL given)."""
    return not os.environ.get("HIFI_REDIS_URL") and bool(os.environ.get("HIFI_PLACEMENT"))


def _tables(what: str, node: str | None = None) -> tuple[dict, list[str]]:
    """A listing's tables (services.tables): from the MDR when this process may read it
    (HIFI_REDIS_URL, or the running `hifi up`'s), else from the placement service with the
    caller's token (HIFI_PLACEMENT or a profile: a user with only a token lists too)."""
    from services import tables

    if _through_placement():
        import grpc

        from protos import hifi_pb2

        try:
            reply = placement_stub().Listing(hifi_pb2.ListingRequest(what=what, node=node or ""), timeout=60)
        except grpc.RpcError as exc:
            raise rpc_error(exc) from None
        return tables.decode(reply.tables)
    mdr = connect_mdr()
    if what == "status":
        return tables.status_tables(mdr)
    made = {"nodes": lambda: tables.nodes_table(mdr), "views": lambda: tables.views_table(mdr, node),
            "motes": lambda: tables.motes_table(mdr, node)}[what]
    return {what: made()}, []


def _narrowing(args: argparse.Namespace):  # noqa: ANN202 (services.narrowing.Narrowing)
    from services.narrowing import Narrowing

    if args.limit < 0:
        raise CLIError(f"--limit is a number of rows, 0 for all (got {args.limit})")
    return Narrowing(args.node or "", args.tier or "", args.problems, args.limit)


def cmd_nodes(args: argparse.Namespace) -> int:
    from services.narrowing import limited, more_line, nodes_kept

    (headers, rows), _ = nodes_kept(_tables("nodes")[0]["nodes"], _narrowing(args))
    (headers, rows), left_out = limited((headers, rows), args.limit)
    print_listing(args, headers, rows)
    if left_out and args.format == "table":
        say(more_line(left_out, "nodes"))
    return 0


def cmd_views(args: argparse.Namespace) -> int:
    print_listing(args, *_tables("views", args.node)[0]["views"])
    return 0


def cmd_motes(args: argparse.Namespace) -> int:
    headers, rows = _tables("motes", args.node)[0]["motes"]
    if not rows and args.format == "table":
        progress("no sensor proxy has told any mote yet (no edge node with motes is running)")
    print_listing(args, headers, rows)
    return 0


def status_report(found: tuple[dict, list[str]], form: str = "table") -> str:
    """`hifi status`'s report of its tables and problems (services.tables.status_tables): tables
    and lines for people, or (`form` "json") one JSON object of the tables' rows and the
    problems, a line a program reads."""
    from services.listing import render, table

    tables, problems = found
    if form == "json":
        return json.dumps({name: [json.loads(line) for line in render(*table_of, "json").splitlines()]
                           for name, table_of in tables.items()} | {"problems": problems})
    lines = [table(*tables["nodes"]), *problems]
    if tables["receptors"][1]:
        lines += ["", table(*tables["receptors"])]
    queries = tables["queries"][1]
    lines += ["", f"{len(queries)} queries running" + "".join(
        f"\n  {query} at {root}: {text[:70]}" + (f"\n    FAILED: {cause}" if cause else "")
        for query, root, _, text, cause in queries)]
    return "\n".join(lines)


def cmd_status(args: argparse.Namespace) -> int:
    from services.narrowing import narrowed_status

    narrowing = _narrowing(args)
    if not args.watch:
        say(status_report(narrowed_status(*_tables("status"), narrowing), args.format))
        return 0
    if args.interval <= 0:
        raise CLIError(f"--interval must be positive (got {args.interval})")
    from services.health import RateWindow
    from services.listing import clock, when
    from services.tables import status_tables

    local = not _through_placement()
    mdr, rates = (connect_mdr() if local else None), RateWindow()   # rates between redraws: the MDR's counts
    redraw = args.format == "table" and sys.stdout.isatty()   # a pipe gets each report after the last
    try:
        while True:
            found = status_tables(mdr, rates) if local else _tables("status")
            report = status_report(narrowed_status(*found, narrowing), args.format)
            if args.format == "json":
                sys.stdout.write(report + "\n")
            else:
                heading = f"{clock(when(time.time() * 1000))}  hifi status (Ctrl-C stops)"
                # clear the screen and home the cursor, then redraw: a live view in any ANSI terminal
                sys.stdout.write(f"{chr(27)}[2J{chr(27)}[H" if redraw else "\n")
                sys.stdout.write(f"{heading}\n\n{report}\n")
            sys.stdout.flush()
            time.sleep(args.interval)
    except KeyboardInterrupt:
        return 0


def health_problem(args: argparse.Namespace) -> str | None:
    """Why the service `args` names is not healthy, or None (`hifi health`, the containers' checks)."""
    import urllib.request

    if args.node:
        mdr = connect_mdr()
        record = mdr.node(args.node)
        if record is None or not record.alive:
            return f"node {args.node} is not alive in the MDR"
        wanted = {v.name for v in load_topology(args.topology).views_at(args.node)}
        missing = wanted - {v.name for v in mdr.views(args.node)}
        if missing:
            return f"node {args.node} does not export {', '.join(sorted(missing))} yet"
    if args.grpc:
        import grpc
        from grpc_health.v1 import health_pb2, health_pb2_grpc

        from services.auth import open_channel

        with open_channel(args.grpc, cli_security().with_token("")) as channel:
            try:
                status = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5).status
            except grpc.RpcError as exc:
                return f"{args.grpc}: {exc.code().name}"
        if status != health_pb2.HealthCheckResponse.SERVING:
            return f"{args.grpc}: {health_pb2.HealthCheckResponse.ServingStatus.Name(status)}"
    if args.http:
        try:
            with urllib.request.urlopen(args.http, timeout=5, context=_https_context(args.http)) as answer:
                if answer.status != 200:
                    return f"{args.http}: HTTP {answer.status}"
        except (OSError, ValueError) as exc:   # ValueError: not a URL urllib can open
            return f"{args.http}: {exc}"
    if args.fresh:
        try:
            age = time.time() - os.path.getmtime(args.fresh)
        except OSError:
            return f"{args.fresh} does not exist"
        if age > args.max_age:
            return f"{args.fresh} was last written {age:.0f} s ago"
    return None


def _https_context(url: str):
    """For an https URL, a TLS context trusting the deployment's CA (HIFI_TLS_DIR) only."""
    if not url.startswith("https:"):
        return None
    from services import certs

    return certs.client_context(cli_security().tls_dir)


def cmd_health(args: argparse.Namespace) -> int:
    if not (args.node or args.grpc or args.http or args.fresh):
        raise CLIError("name what to check: --node ID, --grpc ADDRESS, --http URL or --fresh FILE")
    problem = health_problem(args)
    say(f"unhealthy: {problem}" if problem else "healthy")
    return 1 if problem else 0
