"""What each `hifi` command does (services.cli parses the command line and calls these)."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence

from glue.sql.lexer import SqlError
from glue.topology import load_topology
from services import heap
from services.embedded import redacted_url
from services.paths import (
    DEFAULT_TOPOLOGY,
)
from wire.errors import HiFiError
from wire.identity import SYSTEM


class CLIError(HiFiError):
    """A problem the user can fix; printed as one line, no stack trace."""


def _say(message: str) -> None:
    print(message, flush=True)


def _progress(message: str) -> None:
    print(f"[hifi] {message}", file=sys.stderr, flush=True)


def _mdr():
    from mdr.repository import MDR

    url = os.environ.get("HIFI_REDIS_URL") or _run_info().get("redis_url")
    if not url:
        raise CLIError("no running hierarchy found: start one with `hifi up`, or set HIFI_REDIS_URL")
    mdr = MDR.connect(url)
    try:
        mdr.r.ping()
    except Exception as exc:  # noqa: BLE001 - any connection failure means the same to the user
        raise CLIError(f"cannot reach the MDR at {redacted_url(url)}: {exc}") from None
    return mdr


def _security():
    """The TLS material and token the CLI's calls use: HIFI_TLS_DIR and HIFI_TOKEN, else those of
    the running `hifi up` (its run file: its certificates and its admin token)."""
    from services.auth import Security

    info = _run_info()
    tls_dir = os.environ.get("HIFI_TLS_DIR") or info.get("tls_dir", "")
    if not tls_dir:
        raise CLIError("no certificates known: set HIFI_TLS_DIR to the deployment's (`hifi certs DIR` makes them), "
                       "or run `hifi up`")
    return Security(tls_dir, os.environ.get("HIFI_TOKEN") or info.get("token", ""))


def _listing(args: argparse.Namespace, headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    """A listing command's rows, in the format it was asked for (services.listing)."""
    from services.listing import render

    if rows or args.format == "table":
        _say(render(headers, rows, args.format))


# ---------------------------------------------------------------- commands

def login_notice(dashboard_url: str, token: str, terminal: bool) -> str:
    """What `hifi up` says of its dashboard. The admin token rides in the link's fragment, which the
    browser never sends (as Jupyter's); the link goes to a file only its owner reads, and is
    printed only to a terminal: a log (CI, a service manager's journal) never holds the token."""
    from services.hierarchy import hifi_home

    link = f"{dashboard_url}#token={token}"
    path = os.path.join(hifi_home(), "login.url")
    os.makedirs(hifi_home(), exist_ok=True)
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as fh:
        os.fchmod(fh.fileno(), 0o600)
        fh.write(link + "\n")
    return f"dashboard at {link}" if terminal else f"dashboard at {dashboard_url} (the link that logs you in: {path})"


def _kafka_users(servers, topology) -> None:
    """The embedded broker's users and ACLs for the topology, and their client files (for kcat and
    Kafka's tools) under HIFI_HOME/kafka; a broker of HIFI_KAFKA_BOOTSTRAP is left as it is."""
    from services.hierarchy import hifi_home
    from services.kafka_client_files import write_client_files

    passwords = servers.authorize(topology)
    if servers.broker is not None:
        directory = os.path.join(hifi_home(), "kafka")
        write_client_files(directory, servers.bootstrap, servers.broker.ca_file, passwords)
        _progress(f"Kafka users {', '.join(sorted(passwords))}: client settings in {directory} (docs/other-tools.md)")


def cmd_up(args: argparse.Namespace) -> int:
    from services.embedded import embedded_or_external
    from services.hierarchy import Hierarchy, follow_results, format_result, hifi_home

    topology = load_topology(args.topology)
    stop = threading.Event()
    for stopping in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(stopping, lambda *_: stop.set())
    started = time.monotonic()
    if not args.verbose:
        os.environ["HIFI_SPARK_LOG"] = os.path.join(hifi_home(), "logs", "spark.log")
        os.makedirs(os.path.dirname(os.environ["HIFI_SPARK_LOG"]), exist_ok=True)
        open(os.environ["HIFI_SPARK_LOG"], "w").close()   # this run's
        _progress(f"Spark's own log: {os.environ['HIFI_SPARK_LOG']} (--verbose: here)")
    with embedded_or_external() as servers:
        _progress(f"MDR at {redacted_url(servers.redis_url)}, broker at {servers.bootstrap}")
        _kafka_users(servers, topology)
        hierarchy = Hierarchy(topology, servers.redis_url, servers.bootstrap, state_dir=args.state_dir or "",
                              trigger_ms=args.trigger_ms, processes=args.processes,
                              tls_dir=os.path.join(hifi_home(), "tls"))
        try:
            hierarchy.start(_progress)
            hierarchy.start_agents(args.receptor_dir)
            dashboard_url = _start_dashboard(hierarchy, args.dashboard)
            hierarchy.write_run_file()
            _progress(login_notice(dashboard_url, hierarchy.admin_token, sys.stderr.isatty()))
            _progress(f"hierarchy {topology.name!r} is up: {len(topology.nodes)} nodes"
                      f"{' (processes)' if args.processes else ''}, "
                      f"{len(hierarchy.agent.scenario.readers)} readers; the chain's results follow: trends, and "
                      f"each alert as it starts and as it ends (Ctrl-C stops)")
            first: list[float] = []

            def emit(topic: str, row: dict) -> None:
                if not first:
                    first.append(time.monotonic() - started)
                    _progress(f"first result {first[0]:.1f} s after start")
                _say(format_result(topic, row))

            follower = threading.Thread(target=follow_results,
                                        args=(servers.bootstrap, hierarchy.result_topics(), stop, emit), daemon=True)
            follower.start()
            deadline = time.monotonic() + args.duration if args.duration else None
            while not stop.is_set() and (deadline is None or time.monotonic() < deadline):
                stop.wait(0.5)
        except KeyboardInterrupt:
            pass
        finally:
            stop.set()
            _progress("stopping")
            hierarchy.stop()
            _stop_spark()
    _progress("stopped")
    return 0


def _start_dashboard(hierarchy, listen: str) -> str:
    """The dashboard on `listen`; when that port is taken (another hifi up), on any free port."""
    try:
        return hierarchy.start_dashboard(listen)
    except OSError as exc:
        _progress(f"dashboard: cannot listen on {listen} ({exc.strerror}); using a free port")
        return hierarchy.start_dashboard(f"{listen.rpartition(':')[0]}:0")


def _bootstrap() -> str:
    """The broker: HIFI_KAFKA_BOOTSTRAP's, else the running `hifi up`'s, whose credentials (its run
    file's) this process's clients then use."""
    if os.environ.get("HIFI_KAFKA_BOOTSTRAP"):
        return os.environ["HIFI_KAFKA_BOOTSTRAP"]
    info = _run_info()
    if not info.get("bootstrap"):
        raise CLIError("no broker known: set HIFI_KAFKA_BOOTSTRAP or run `hifi up`")
    for name, value in info.get("kafka", {}).items():
        os.environ.setdefault(name, value)
    return info["bootstrap"]


def _serve_until_stopped(close) -> None:
    """Block until SIGTERM or Ctrl-C, then `close()`: the services' (containers') main loop."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        while not stop.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        _progress("stopping")
        close()


def cmd_dashboard(args: argparse.Namespace) -> int:
    """A dashboard for a hierarchy already running (e.g. after the first one was stopped)."""
    from services.dashboard import Dashboard

    mdr = _mdr()
    topology_file = args.topology or _run_info().get("topology") or DEFAULT_TOPOLOGY
    dashboard = Dashboard(mdr, _bootstrap(), _security(), load_topology(topology_file))
    try:
        url = dashboard.serve(args.listen, args.advertise)
    except OSError as exc:
        raise CLIError(f"cannot listen on {args.listen}: {exc.strerror}") from None
    _progress(f"dashboard at {url} (Ctrl-C stops)")
    _serve_until_stopped(dashboard.close)
    return 0


def become_from_standby() -> None:
    """A warm spare (`hifi node --standby`): the node's modules loaded, Spark and a Python worker
    started; then the node it becomes is read from stdin (one JSON line: {"env": {...}, "log":
    FILE}), its environment set, the output sent to its log. The caller parses the `hifi node`
    arguments again under that environment (services.cli.main)."""
    from dsp.runtime import faults
    from dsp.spark.session import spark_session

    spark_session("hifi-standby")   # Spark and its Python workers up (dsp.spark.session.start_python_workers)
    _progress("standby: warm, waiting for the node to become")
    line = sys.stdin.readline()
    if not line.strip():
        raise SystemExit(0)   # its supervisor stopped without needing it
    assignment = json.loads(line)
    os.environ.update(assignment.get("env", {}))
    if assignment.get("log"):
        out = os.open(assignment["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.close(out)
    faults.from_environment()   # a fault set for this node counts from now, when it becomes it


def cmd_node(args: argparse.Namespace) -> int:
    """One node of a topology in this process (its own Spark session): what a container runs."""
    import tempfile

    from dsp.spark.session import spark_session
    from services.node import HiFiNode

    topology = load_topology(args.topology)
    if not args.id:
        raise CLIError("name the node to run: --id or HIFI_NODE_ID")
    if args.id not in topology.nodes:
        raise CLIError(f"node {args.id!r} is not in topology {topology.name!r} ({', '.join(topology.nodes)})")
    mdr, bootstrap = _mdr(), _bootstrap()
    state_dir = args.state_dir or tempfile.mkdtemp(prefix=f"hifi-{args.id}-")
    _progress(f"node {args.id}: starting Spark ({os.environ.get('SPARK_MASTER') or 'local'})")
    node = HiFiNode(args.id, topology, mdr, spark_session(f"hifi-{args.id}"), bootstrap, state_dir, args.trigger_ms,
                    listen=args.listen, advertise_host=args.advertise, metrics_port=args.metrics_port,
                    security=_security())
    node.wait_for_children(args.wait, _progress)
    node.start()
    heap.settle()
    _progress(f"node {args.id} ({topology.nodes[args.id].tier}) serving at {node.address}, metrics at "
              f"{node.metrics.url}, checkpoints in {state_dir} (Ctrl-C stops)")

    def close() -> None:
        node.stop()
        _stop_spark()
    _serve_until_stopped(close)
    return 0


def cmd_placement(args: argparse.Namespace) -> int:
    """The placement service alone; it loads the topology's metadata into the MDR first."""
    from services.hierarchy import load_metadata
    from services.placement import start_placement_service

    mdr, bootstrap = _mdr(), _bootstrap()
    topology = load_topology(args.topology)
    load_metadata(mdr, topology)
    try:
        service = start_placement_service(mdr, bootstrap, _security(), args.listen, args.metrics_port, args.advertise)
    except RuntimeError as exc:   # grpc: the port is taken
        raise CLIError(f"cannot listen on {args.listen}: {exc}") from None
    _progress(f"placement service for {topology.name!r} at {service.address}, metrics at {service.metrics.url} "
              f"(Ctrl-C stops)")
    _serve_until_stopped(service.close)
    return 0


def health_problem(args: argparse.Namespace) -> str | None:
    """Why the service `args` names is not healthy, or None (`hifi health`, the containers' checks)."""
    import urllib.request

    if args.node:
        mdr = _mdr()
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

        with open_channel(args.grpc, _security().with_token("")) as channel:
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

    return certs.client_context(_security().tls_dir)


def cmd_health(args: argparse.Namespace) -> int:
    if not (args.node or args.grpc or args.http or args.fresh):
        raise CLIError("name what to check: --node ID, --grpc ADDRESS, --http URL or --fresh FILE")
    problem = health_problem(args)
    _say(f"unhealthy: {problem}" if problem else "healthy")
    return 1 if problem else 0


def cmd_deploy(args: argparse.Namespace) -> int:
    import secrets

    from services.compose import render_compose, secret_variables

    topology = load_topology(args.topology)
    if args.what == "secrets":
        text = ("# secrets of the compose deployment of topology " + repr(topology.name) + ": keep this file private\n"
                + "".join(f"{name}={secrets.token_urlsafe(24)}\n"
                          for name in secret_variables(topology, args.spark_cluster)))
    else:
        text = render_compose(topology, args.topology, args.spark_cluster)
    if args.output:
        if args.what == "secrets" and os.path.exists(args.output):
            raise CLIError(f"{args.output} exists: new secrets would lock the running deployment out of its "
                           f"Redis and broker; remove it first to start afresh")
        mode = 0o600 if args.what == "secrets" else 0o644
        with open(os.open(args.output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode), "w") as fh:
            fh.write(text)
        _progress(f"wrote {args.output}")
    else:
        sys.stdout.write(text)
    return 0


def _run_info() -> dict:
    from services.hierarchy import run_file

    try:
        with open(run_file()) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return {}


def _stop_spark() -> None:
    from dsp.spark.session import stop_session

    stop_session()


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
            reply = _placement_stub().Listing(hifi_pb2.ListingRequest(what=what, node=node or ""), timeout=60)
        except grpc.RpcError as exc:
            raise _rpc_error(exc) from None
        return tables.decode(reply.tables)
    mdr = _mdr()
    if what == "status":
        return tables.status_tables(mdr)
    made = {"nodes": lambda: tables.nodes_table(mdr), "views": lambda: tables.views_table(mdr, node),
            "motes": lambda: tables.motes_table(mdr, node)}[what]
    return {what: made()}, []


def cmd_nodes(args: argparse.Namespace) -> int:
    from services.narrowing import limited, more_line, nodes_kept

    (headers, rows), _ = nodes_kept(_tables("nodes")[0]["nodes"], _narrowing(args))
    (headers, rows), left_out = limited((headers, rows), args.limit)
    _listing(args, headers, rows)
    if left_out and args.format == "table":
        _say(more_line(left_out, "nodes"))
    return 0


def _narrowing(args: argparse.Namespace):  # noqa: ANN202 (services.narrowing.Narrowing)
    from services.narrowing import Narrowing

    if args.limit < 0:
        raise CLIError(f"--limit is a number of rows, 0 for all (got {args.limit})")
    return Narrowing(args.node or "", args.tier or "", args.problems, args.limit)


def cmd_views(args: argparse.Namespace) -> int:
    _listing(args, *_tables("views", args.node)[0]["views"])
    return 0


def cmd_motes(args: argparse.Namespace) -> int:
    headers, rows = _tables("motes", args.node)[0]["motes"]
    if not rows and args.format == "table":
        _progress("no sensor proxy has told any mote yet (no edge node with motes is running)")
    _listing(args, headers, rows)
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
        _say(status_report(narrowed_status(*_tables("status"), narrowing), args.format))
        return 0
    if args.interval <= 0:
        raise CLIError(f"--interval must be positive (got {args.interval})")
    from services.health import RateWindow
    from services.listing import clock, when
    from services.tables import status_tables

    local = not _through_placement()
    mdr, rates = (_mdr() if local else None), RateWindow()   # rates between redraws: the MDR's counts
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


def _placement_stub():
    from protos import hifi_pb2_grpc
    from services.auth import open_channel

    address = os.environ.get("HIFI_PLACEMENT") or _mdr().placement_address()
    if not address:
        raise CLIError("no placement service found: start the hierarchy with `hifi up`, or set HIFI_PLACEMENT")
    security = _security()
    if not security.token:
        raise CLIError("no token: set HIFI_TOKEN to yours (an admin makes one with `hifi users add`)")
    return hifi_pb2_grpc.PlacementStub(open_channel(address, security))


def _rpc_error(exc) -> CLIError:
    return CLIError(exc.details() or str(exc.code()))


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
        _say("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip())
    elif fmt == "csv":
        as_csv.writerow(columns)
    printed = 0
    for row in rows:
        if fmt == "json":
            _say(json.dumps({c: _json_cell(v) for c, v in zip(columns, row, strict=True)}))
        elif fmt == "csv":
            as_csv.writerow(["" if v is None else _json_cell(v) for v in row])
            sys.stdout.flush()
        else:
            _say("  ".join(shown(v).ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())
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

    readings_path = _run_info().get("readings")
    if not readings_path:
        raise CLIError("--reference needs a running `hifi up` (its recorded readings)")
    catalog = load_catalog(_mdr())
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
    stub = _placement_stub()
    try:
        reply = stub.Submit(hifi_pb2.SubmitRequest(sql=args.sql, principal=args.principal, explain_only=args.explain,
                                                   replay=args.replay, readers=args.reader, since_ms=since_ms,
                                                   until_ms=until_ms, priority=args.priority), timeout=120)
    except grpc.RpcError as exc:
        raise _rpc_error(exc) from None
    if args.explain:
        _say(reply.plan)
        return 0
    _progress(f"query {reply.query_id} placed at {reply.root_node}; results on {reply.result_topic}")
    for line in reply.plan.splitlines():
        if line.strip().startswith("warning:"):
            _progress(line.strip())
    if args.detach:
        _say(reply.query_id)
        return 0
    keep = args.keep or args.sql.lstrip().upper().startswith("CREATE")
    stream = stub.Results(hifi_pb2.QueryRef(query_id=reply.query_id), timeout=args.timeout)
    try:
        _print_rows(list(reply.columns), ([from_value(v) for v in r.row.values] for r in stream), args.format,
                    args.limit)
    except grpc.RpcError as exc:
        if exc.code() != grpc.StatusCode.DEADLINE_EXCEEDED:
            raise _rpc_error(exc) from None
    except KeyboardInterrupt:
        pass
    finally:
        stream.cancel()
        if not keep:
            try:
                stub.Cancel(hifi_pb2.QueryRef(query_id=reply.query_id), timeout=60)
                _progress(f"query {reply.query_id} cancelled")
            except grpc.RpcError as exc:   # its --until passed: the placement ended it
                if exc.code() != grpc.StatusCode.NOT_FOUND:
                    raise _rpc_error(exc) from None
    return 0


def cmd_certs(args: argparse.Namespace) -> int:
    from services.certs import expiry, make_certificates, write_keystore

    services = args.service or ["hifi"]
    try:
        written = make_certificates(args.directory, services, args.host, args.deployment)
        keystores = [write_keystore(args.directory, service) for service in args.keystore]
    except (OSError, ValueError) as exc:
        raise CLIError(f"cannot make certificates in {args.directory}: {exc}") from None
    for path in written:
        _say(f"{path}  valid until {expiry(path):%Y-%m-%d}")
    for path in keystores:
        _say(f"{path}  (its password in {path}.password)")
    _progress(f"give services HIFI_TLS_DIR={os.path.abspath(args.directory)}; clients need only its ca.pem "
              f"(keep ca.key off the hosts)")
    return 0


def cmd_kafka_setup(args: argparse.Namespace) -> int:
    """The topology's users (their passwords from the environment, as compose gives them) and ACLs."""
    from services.kafka_acls import ADMIN_USER, password_variable, users
    from services.kafka_setup import KafkaSetupError, apply
    from wire.kafka.config import librdkafka_client

    topology = load_topology(args.topology)
    named = [user for user in users(topology) if user != ADMIN_USER]
    missing = [password_variable(user) for user in named if not os.environ.get(password_variable(user))]
    if missing:
        raise CLIError(f"no password for {len(missing)} Kafka users: set {', '.join(missing)}")
    passwords = {user: os.environ[password_variable(user)] for user in named}
    try:
        count = apply(librdkafka_client(args.bootstrap), topology, passwords)
    except KafkaSetupError as exc:
        raise CLIError(str(exc)) from None
    _progress(f"kafka users ({len(passwords)}) and ACLs ({count}) in place on {args.bootstrap}")
    return 0


def cmd_users(args: argparse.Namespace) -> int:
    """Users and their tokens, in the MDR (whoever may write the MDR administers the deployment)."""
    from services.auth import mint_token
    from wire.identity import IdentityError, checked_principal, checked_roles
    from wire.windows import WindowError, duration_ms

    mdr = _mdr()
    if args.action == "list":
        from services.listing import when

        rows = sorted(([r.principal, ",".join(r.roles), when(r.created_ms), when(r.expires_ms), digest[:12]]
                       for digest, r in mdr.tokens().items()), key=lambda row: (row[0], row[4]))
        _listing(args, ["principal", "roles", "created", "expires", "token sha256"], rows)   # expires -: never
        return 0
    if not args.name:
        raise CLIError(f"hifi users {args.action} needs the principal's name")
    try:
        name = checked_principal(args.name)
        if args.action == "remove":
            removed = mdr.drop_tokens(name)
            if not removed:
                raise CLIError(f"{name} has no tokens")
            _say(f"removed {name}'s {removed} token(s): they stop working at once")
            return 0
        roles = checked_roles(args.role or ["user"])
        expires_ms = int(time.time() * 1000) + duration_ms(args.expires) if args.expires else 0
    except (IdentityError, WindowError) as exc:
        raise CLIError(str(exc)) from None
    token = mint_token(mdr, name, roles, expires_ms)
    _progress(f"a token for {name} ({', '.join(roles)}){'' if not expires_ms else ', expiring ' + args.expires}: "
              f"it is shown once; give it as HIFI_TOKEN or log in to the dashboard with it")
    _say(token)
    return 0


def cmd_queries(args: argparse.Namespace) -> int:
    from services.health import query_states

    mdr = _mdr()
    queries = mdr.queries()
    states = query_states(mdr, queries)
    from services.listing import when

    headers = ["query", "root", "status", "submitted", "results", "text"]
    if args.format != "table":   # whole: a program reads them
        _listing(args, [*headers, "cause"], [[q.id, q.root, states[q.id][0], when(q.submitted_ms), q.result_topic,
                                              q.text, states[q.id][1] or None] for q in queries])
        return 0
    _listing(args, headers, [[q.id, q.root, states[q.id][0], when(q.submitted_ms), q.result_topic,
                              " ".join(q.text.split())[:60]] for q in queries])
    for query_id, (_, cause) in states.items():
        if cause:
            _say(f"{query_id} FAILED: {cause}")
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    import grpc

    from protos import hifi_pb2

    try:
        _placement_stub().Cancel(hifi_pb2.QueryRef(query_id=args.query_id), timeout=60)
    except grpc.RpcError as exc:
        raise _rpc_error(exc) from None
    _say(f"cancelled {args.query_id}")
    return 0


def load_agent_scenario(args: argparse.Namespace, start_ms: int):
    """The scenario `hifi agents` runs: --scenario, else the topology's."""
    from services.emulation import agent_scenario

    return agent_scenario(args.scenario, args.topology, start_ms, args.seed)


def cmd_agents(args: argparse.Namespace) -> int:
    from edge.agent import ReceptorAgent
    from services.hierarchy import next_whole_second

    if args.benchmark:   # the same as `hifi bench agents`
        from services.bench.agents import run_agents_bench

        _say(run_agents_bench(lambda start_ms: load_agent_scenario(args, start_ms), args.duration or 60.0,
                              _progress))
        return 0
    bootstrap = os.environ.get("HIFI_KAFKA_BOOTSTRAP")
    if not bootstrap:
        raise CLIError("hifi agents needs a broker: set HIFI_KAFKA_BOOTSTRAP (hifi up runs its own agents)")
    if args.speed <= 0:
        raise CLIError(f"--speed must be positive (got {args.speed}); `hifi bench agents` runs flat out")
    scenario = load_agent_scenario(args, next_whole_second(int(time.time() * 1000)))
    agent = ReceptorAgent(scenario, bootstrap, args.receptor_dir, args.speed, int(args.spool_mb * 1024 * 1024))
    signal.signal(signal.SIGTERM, lambda *_: agent.stop())   # `docker stop`: finish the tick, close the logs
    _progress(f"scenario {scenario.name!r}: {len(scenario.readers)} readers, {len(scenario.motes)} motes"
              f"{', Intel Lab replay' if scenario.replay else ''} publishing to {bootstrap} at {args.speed:g}x"
              + (f"; readings and truth in {args.receptor_dir}" if args.receptor_dir else ""))
    stats = agent.run(args.duration)
    _say(f"{stats.readings} tag reads in {stats.cycles} read cycles and {stats.samples} mote samples "
         f"over {stats.wall_s:.1f} s ({stats.readings / max(stats.wall_s, 1e-9):.0f} tag reads/s)")
    if stats.spooled:
        _say(f"{stats.spooled} messages spooled while the broker was unreachable, {stats.forwarded} forwarded, "
             f"{stats.spool_dropped} dropped by a full spool")
    return 0




def cmd_bench(args: argparse.Namespace) -> int:
    """`hifi bench <name>`: run it (services.bench.registry), print its table, write --json."""
    from services.bench import results

    outcome = args.bench.run(args)
    _say(outcome.text)
    if args.json:
        results.write(args.json, results.record(args.which, results.command_line(sys.argv, args.which),
                                                outcome.text, outcome.figures))
        _progress(f"figures written to {args.json}")
    if args.bench.spark:
        _stop_spark()
    return 0


def cmd_bench_report(args: argparse.Namespace) -> int:
    """`hifi bench report FOLDER`: docs/benchmarks.md from the result files in FOLDER."""
    from services.bench import publish, results

    if not os.path.isdir(args.folder):
        raise CLIError(f"no such folder: {args.folder}")
    found = results.read_folder(args.folder)
    if not found:
        raise CLIError(f"no result files in {args.folder} (write them with `hifi bench <name> --json FILE`)")
    written = publish.report(found, args.out, args.folder)
    _say(f"{args.out}: {len(written)} benchmarks ({', '.join(written)}) from {len(found)} result files")
    return 0
