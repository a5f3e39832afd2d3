"""Queries: `hifi query` (submit, explain, stream the rows), `hifi queries` and `hifi cancel`:
their parsers, help and work."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence

from glue.sql.lexer import SqlError
from services.cli.common import (
    CLIError,
    connect_mdr,
    format_option,
    placement_stub,
    print_listing,
    progress,
    rpc_error,
    run_info,
    say,
)
from services.cli.option_types import positive, priority
from wire.identity import SYSTEM

# what each command does, in prose: its --help description and its part of docs/cli.md
DESCRIPTIONS: dict[str, str] = {
    'query': (
        'submit a HiFi SQL statement as the principal of your token (`HIFI_TOKEN`, else the running `hifi '
        "up`'s admin token; `--principal` asks as another principal, with its roles: an admin only, to see "
        'what it would be answered) (the argument, or the text of `--file F`; `--file -` reads standard '
        'input) to the placement service and stream its result rows as windows close; if a part of the query '
        'keeps failing the stream ends with its cause (exit code 2). `--explain` prints the placement and '
        "every node's part (which views are reused, which created) and runs nothing; `--reference` computes "
        "the same query centrally over the running hierarchy's recorded readings (to check any answer); "
        '`--limit`/`--timeout` stop after N rows / S seconds. A `SELECT` is cancelled when the command exits '
        'unless `--keep`; `--detach` submits, prints the query id and returns; `CREATE VIEW` keeps running '
        'and exports the view, readable by you, the operators and each `--reader` (a principal, `role:NAME` '
        'or `*`). A query answers from its submission on: each source is read from the end it had at that '
        'moment and windows that started earlier (they would be partial) are not emitted; `--replay` reads '
        'the sources from their beginning instead (a long-running hierarchy then catches up first; where a '
        "node already reads a source, its part is fed the node's whole archive first). `--since T` answers "
        'from time T on — the past from what the nodes archived, then live with no window missing or doubled '
        'at the seam (see *The archive and queries over the past*); T is a UTC time (`2026-11-25T19:00:00`, a'
        " `Z` or offset allowed) or how long ago (`'10 minutes'`). `--until T` emits only windows (rows) "
        'starting before T (the same forms; a duration counts from now); the placement service cancels the '
        'query a minute after T (its last windows have gone out; `--detach`ed or not) and the command ends '
        "then. `--priority N` puts the query's parts in lane N of constrained uplinks (see *Priorities on "
        'constrained links*; default 0). Errors name the line, column and problem (exit code 2).'
    ),
    'queries': (
        'running queries with their root node, status (`FAILED` with the node, part and cause when a part of '
        'it died), submission time and result topic'
    ),
    'cancel': (
        'cancel a query: its remote queries on every node, and the views no other query uses'
    ),
}


def add_query(sub: argparse._SubParsersAction) -> None:
    query = sub.add_parser("query", help="submit a HiFi SQL query (or CREATE VIEW) and stream its results")
    query.add_argument("sql", nargs="?", default=None,
                       help="the statement, e.g. \"SELECT tag_id, count(*) AS n FROM rfid_stream "
                            "[range by '4 seconds'] GROUP BY tag_id\" (or --file)")
    query.add_argument("--file", default=None, help="read the statement from this file; - reads standard input")
    query.add_argument("--explain", action="store_true", help="print the placement and per-node plan, run nothing")
    query.add_argument("--reference", action="store_true",
                       help="compute the answer centrally over the running hierarchy's recorded readings")
    query.add_argument("--limit", type=positive(int), default=None, help="stop after this many result rows")
    query.add_argument("--timeout", type=positive(float), default=None, help="stop after this many seconds")
    format_option(query)
    query.add_argument("--principal", default="",
                       help="ask as this principal (an admin only; default: the token's own principal); "
                            "with --reference: read as it")
    query.add_argument("--reader", action="append", default=[],
                       help="CREATE VIEW: who may read the view besides you and the operators (a principal, "
                            "role:NAME, or '*' for everyone; repeat)")
    query.add_argument("--keep", action="store_true", help="leave a SELECT running after this command exits")
    query.add_argument("--detach", action="store_true", help="submit, print the query id and exit (keeps it)")
    query.add_argument("--replay", action="store_true",
                       help="read the sources from their beginning (default: answer from the submission on)")
    query.add_argument("--since", default="",
                       help="answer from this time on, the past from the nodes' archives and then live: a UTC time "
                            "('2026-11-25T19:00:00', 'Z' or an offset allowed) or how long ago ('10 minutes')")
    query.add_argument("--until", default="",
                       help="only windows (rows) starting before this time (the same forms; a duration: from now "
                            "on, e.g. '5 minutes'); the command ends a minute after it")
    query.add_argument("--priority", type=priority, default=0,
                       help="its parts' lane on constrained links between tiers (a node's `uplink`): higher goes "
                            "first (default 0; the topology's views may set theirs)")
    query.set_defaults(func=cmd_query)


def add_queries(sub: argparse._SubParsersAction) -> None:
    queries = sub.add_parser("queries", help="running queries with their root node and result topic")
    format_option(queries)
    queries.set_defaults(func=cmd_queries)


def add_cancel(sub: argparse._SubParsersAction) -> None:
    cancel = sub.add_parser("cancel", help="cancel a query: its remote queries and the views only it used")
    cancel.add_argument("query_id", help="the query's id (hifi queries lists them)")
    cancel.set_defaults(func=cmd_cancel)


def _json_cell(value: object) -> object:
    import datetime as dt

    from services.listing import iso

    return iso(value) if isinstance(value, dt.datetime) else value


def _print_rows(columns: Sequence[str], rows, fmt: str, limit: int | None) -> int:
    """Print rows as they come (a table, JSON lines or CSV); returns how many were printed."""
    import csv

    from services.listing import shown

    widths = [max(len(c), 12) for c in columns]
    as_csv = csv.writer(sys.stdout, lineterminator="\n")
    if fmt == "table":
        say("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip())
    elif fmt == "csv":
        as_csv.writerow(columns)
    printed = 0
    for row in rows:
        if fmt == "json":
            say(json.dumps({c: _json_cell(v) for c, v in zip(columns, row, strict=True)}))
        elif fmt == "csv":
            as_csv.writerow(["" if v is None else _json_cell(v) for v in row])
            sys.stdout.flush()
        else:
            say("  ".join(shown(v).ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())
        printed += 1
        if limit is not None and printed >= limit:
            break
    return printed


def _reference_rows(sql: str, principal):
    """The centralized answer over the running hierarchy's recorded readings."""
    import datetime as dt

    from edge.agent import read_jsonl
    from glue.analyzer import analyze
    from glue.reference import Reference
    from services.placement import load_catalog

    readings_path = run_info().get("readings")
    if not readings_path:
        raise CLIError("--reference needs a running `hifi up` (its recorded readings)")
    catalog = load_catalog(connect_mdr())
    query = analyze(sql, catalog, principal)
    rows = Reference.from_log(read_jsonl(readings_path), catalog).run(query)
    columns = (["window_start", "window_end"] if query.is_aggregate else []) + [n for n, _ in query.outputs]
    as_time = {"window_start", "window_end"}
    return columns, [[dt.datetime.fromtimestamp(r[c] / 1000, tz=dt.UTC) if c in as_time else r[c]
                      for c in columns] for r in rows]


def _statement_text(args: argparse.Namespace) -> str:
    """The statement of `hifi query`: the argument, or the text of --file (- for standard input)."""
    if (args.sql is None) == (args.file is None):
        raise CLIError("give the statement either as an argument or with --file FILE (- for standard input)")
    if args.file is None:
        return args.sql
    try:
        if args.file == "-":
            return sys.stdin.read()
        with open(args.file, encoding="utf-8") as fh:
            return fh.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise CLIError(f"cannot read the statement from {args.file}: {exc}") from None


def cmd_query(args: argparse.Namespace) -> int:
    import grpc

    from protos import hifi_pb2
    from services.placement import UNTIL_GRACE_MS
    from wire.codec import from_value
    from wire.windows import DurationError, time_at

    args.sql = _statement_text(args)
    now = int(time.time() * 1000)
    try:
        since_ms = time_at(args.since, now, ago=True) if args.since else 0
        until_ms = time_at(args.until, now, ago=False) if args.until else 0
    except DurationError as exc:
        raise CLIError(str(exc)) from None
    if until_ms and args.timeout is None:
        args.timeout = max(0.0, (until_ms - now) / 1000) + UNTIL_GRACE_MS / 1000
    if args.reference:
        try:
            columns, rows = _reference_rows(args.sql, args.principal or SYSTEM)
        except SqlError as exc:
            raise CLIError(str(exc)) from None
        _print_rows(columns, rows, args.format, args.limit)
        return 0
    stub = placement_stub()
    try:
        reply = stub.Submit(hifi_pb2.SubmitRequest(sql=args.sql, principal=args.principal, explain_only=args.explain,
                                                   replay=args.replay, readers=args.reader, since_ms=since_ms,
                                                   until_ms=until_ms, priority=args.priority), timeout=120)
    except grpc.RpcError as exc:
        raise rpc_error(exc) from None
    if args.explain:
        say(reply.plan)
        return 0
    progress(f"query {reply.query_id} placed at {reply.root_node}; results on {reply.result_topic}")
    for line in reply.plan.splitlines():
        if line.strip().startswith("warning:"):
            progress(line.strip())
    if args.detach:
        say(reply.query_id)
        return 0
    keep = args.keep or args.sql.lstrip().upper().startswith("CREATE")
    stream = stub.Results(hifi_pb2.QueryRef(query_id=reply.query_id), timeout=args.timeout)
    try:
        _print_rows(list(reply.columns), ([from_value(v) for v in r.row.values] for r in stream), args.format,
                    args.limit)
    except grpc.RpcError as exc:
        if exc.code() != grpc.StatusCode.DEADLINE_EXCEEDED:
            raise rpc_error(exc) from None
    except KeyboardInterrupt:
        pass
    finally:
        stream.cancel()
        if not keep:
            try:
                stub.Cancel(hifi_pb2.QueryRef(query_id=reply.query_id), timeout=60)
                progress(f"query {reply.query_id} cancelled")
            except grpc.RpcError as exc:   # its --until passed: the placement ended it
                if exc.code() != grpc.StatusCode.NOT_FOUND:
                    raise rpc_error(exc) from None
    return 0


def cmd_queries(args: argparse.Namespace) -> int:
    from services.health import query_states

    mdr = connect_mdr()
    queries = mdr.queries()
    states = query_states(mdr, queries)
    from services.listing import when

    headers = ["query", "root", "status", "submitted", "results", "text"]
    if args.format != "table":   # whole: a program reads them
        print_listing(args, [*headers, "cause"], [[q.id, q.root, states[q.id][0], when(q.submitted_ms), q.result_topic,
                                              q.text, states[q.id][1] or None] for q in queries])
        return 0
    print_listing(args, headers, [[q.id, q.root, states[q.id][0], when(q.submitted_ms), q.result_topic,
                              " ".join(q.text.split())[:60]] for q in queries])
    for query_id, (_, cause) in states.items():
        if cause:
            say(f"{query_id} FAILED: {cause}")
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    import grpc

    from protos import hifi_pb2

    try:
        placement_stub().Cancel(hifi_pb2.QueryRef(query_id=args.query_id), timeout=60)
    except grpc.RpcError as exc:
        raise rpc_error(exc) from None
    say(f"cancelled {args.query_id}")
    return 0
