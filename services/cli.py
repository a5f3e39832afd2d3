"""The `hifi` command line: its parser and entry point (services.commands does the work).
`hifi --help` and `hifi COMMAND --help` document every option."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence

from services.bench.registry import BENCHES
from services.cli_help import DESCRIPTIONS, EPILOG
from services.cli_types import SEED, bounded, megabytes, port, positive, priority
from services.commands import (
    become_from_standby,
    cmd_agents,
    cmd_bench,
    cmd_bench_report,
    cmd_cancel,
    cmd_certs,
    cmd_dashboard,
    cmd_deploy,
    cmd_health,
    cmd_kafka_setup,
    cmd_motes,
    cmd_node,
    cmd_nodes,
    cmd_placement,
    cmd_queries,
    cmd_query,
    cmd_status,
    cmd_up,
    cmd_users,
    cmd_views,
)
from services.listing import FORMATS
from services.paths import DEFAULT_TOPOLOGY
from wire.errors import HiFiError

# ---------------------------------------------------------------- parser

def _env(name: str, fallback: str) -> str:
    return os.environ.get(name) or fallback


def _topology_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--topology", default=_env("HIFI_TOPOLOGY", DEFAULT_TOPOLOGY),
                        help="topology YAML (default $HIFI_TOPOLOGY, else supply-chain)")


def _advertise_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--advertise", default=_env("HIFI_ADVERTISE_HOST", ""),
                        help="the host others reach this service at, recorded in the MDR (default "
                             "$HIFI_ADVERTISE_HOST, else the listen host; set it when listening on 0.0.0.0)")


def _up_command(sub: argparse._SubParsersAction) -> None:
    up = sub.add_parser("up", help="run a whole topology (nodes + agents) and print the results at the ends of its "
                                   "CSAVA chain (alerts, trends)")
    up.add_argument("--topology", default=DEFAULT_TOPOLOGY, help="topology YAML (default: supply-chain)")
    up.add_argument("--duration", type=positive(float), default=None, help="stop cleanly after this many seconds")
    up.add_argument("--state-dir", default=None, help="checkpoints and ground truth (default: a temp dir)")
    up.add_argument("--receptor-dir", default=None,
                    help="where the agents write readings.jsonl and truth.jsonl (default: <state dir>/receptors)")
    up.add_argument("--trigger-ms", type=positive(int), default=1000, help="micro-batch interval of every query")
    up.add_argument("--processes", action="store_true",
                    help="run each node as a `hifi node` process of its own (its own Spark) under a supervisor "
                         "that starts a node process that dies again (from a warm spare process, which it keeps "
                         "one of); default: every node in this process")
    up.add_argument("--dashboard", default="127.0.0.1:8470", metavar="HOST:PORT",
                    help="where the operations dashboard listens (default 127.0.0.1:8470; a free port if taken)")
    up.add_argument("--verbose", action="store_true",
                    help="print Spark's and the JVM's own log lines here too (default: to <HIFI_HOME>/logs/spark.log)")
    up.set_defaults(func=cmd_up)


def _format_option(parser: argparse.ArgumentParser, formats: Sequence[str] = FORMATS) -> None:
    """`--format`: the one spelling of how a command prints its rows (services.listing)."""
    parser.add_argument("--format", choices=list(formats), default="table",
                        help="table for people (default), json: a JSON object a line, csv: a header and rows; "
                             "times in JSON and CSV are ISO 8601 with their offset")


def _narrowing_options(parser: argparse.ArgumentParser) -> None:
    """Which nodes a listing of a large hierarchy shows (services.narrowing)."""
    parser.add_argument("--node", metavar="PATTERN", help="only the nodes whose id matches, e.g. 'wh-*' (a glob)")
    parser.add_argument("--tier", choices=["edge", "aggregation", "core"], help="only the nodes of this tier")
    parser.add_argument("--problems", action="store_true", help="only the nodes that are not alive and well")
    parser.add_argument("--limit", type=bounded(int, 0), default=0, metavar="N",
                        help="at most N rows a table, and a line saying how many more (default 0: all)")


def _nodes_command(sub: argparse._SubParsersAction) -> None:
    nodes = sub.add_parser("nodes", help="nodes in the MDR with tier, parent, address, liveness")
    _narrowing_options(nodes)
    _format_option(nodes)
    nodes.set_defaults(func=cmd_nodes)


def _views_command(sub: argparse._SubParsersAction) -> None:
    views = sub.add_parser("views", help="exported views with node, window and topic")
    views.add_argument("--node", default=None, help="only this node's views")
    _format_option(views)
    views.set_defaults(func=cmd_views)


def _motes_command(sub: argparse._SubParsersAction) -> None:
    motes = sub.add_parser("motes", help="what each edge node's sensor proxy told its motes to send (always, "
                                         "never, or thresholds) and the settings version")
    motes.add_argument("--node", default=None, help="only this edge node's motes")
    _format_option(motes)
    motes.set_defaults(func=cmd_motes)


def _status_command(sub: argparse._SubParsersAction) -> None:
    status = sub.add_parser("status", help="health per node (alive, lagging, dead), input rate, lag, dead letters, "
                                           "receptor telemetry, running queries")
    status.add_argument("--watch", action="store_true", help="redraw every --interval seconds until Ctrl-C, "
                                                             "with each receptor's reads/s and read-cycle time")
    status.add_argument("--interval", type=positive(float), default=2.0, help="seconds between redraws (default 2)")
    _narrowing_options(status)
    _format_option(status, ("table", "json"))   # json: one object of its tables a report
    status.set_defaults(func=cmd_status)


def _dashboard_command(sub: argparse._SubParsersAction) -> None:
    dashboard = sub.add_parser("dashboard", help="serve the operations dashboard for a running hierarchy "
                                                 "(`hifi up` starts one already)")
    dashboard.add_argument("--listen", default=_env("HIFI_LISTEN", "127.0.0.1:8470"),
                           help="host:port to serve on (default $HIFI_LISTEN, else 127.0.0.1:8470); beyond "
                                "loopback it serves HTTPS only, with the deployment's certificate (HIFI_TLS_DIR)")
    _advertise_option(dashboard)
    dashboard.add_argument("--topology", default=os.environ.get("HIFI_TOPOLOGY"),
                           help="the topology file (default $HIFI_TOPOLOGY, else the running hierarchy's); "
                                "names the alert views")
    dashboard.set_defaults(func=cmd_dashboard)


def _node_command(sub: argparse._SubParsersAction) -> None:
    node = sub.add_parser("node", help="run one node of a topology in this process, against the MDR and broker "
                                       "of HIFI_REDIS_URL and HIFI_KAFKA_BOOTSTRAP (what a node container runs)")
    node.add_argument("--id", default=os.environ.get("HIFI_NODE_ID", ""), help="the node (default $HIFI_NODE_ID)")
    _topology_option(node)
    node.add_argument("--listen", default=_env("HIFI_LISTEN", ""),
                      help="gRPC host:port (default $HIFI_LISTEN, else the topology's `listen`, else a free port)")
    _advertise_option(node)
    node.add_argument("--metrics-port", type=port, default=os.environ.get("HIFI_METRICS_PORT") or None,
                      help="/metrics port (default $HIFI_METRICS_PORT, else the topology's `metrics_port`)")
    node.add_argument("--state-dir", default=_env("HIFI_STATE_DIR", ""),
                      help="checkpoints (default $HIFI_STATE_DIR, else a temporary directory)")
    node.add_argument("--trigger-ms", type=positive(int), default=1000, help="micro-batch interval of every query")
    node.add_argument("--wait", type=positive(float), default=600.0,
                      help="seconds to wait for the children's views before giving up (default 600)")
    node.add_argument("--standby", action="store_true",
                      help="start Spark, then wait on stdin for the node to become (one JSON line: "
                           '{"env": {...}, "log": FILE}): the warm spare of a supervisor (hifi up --processes)')
    node.set_defaults(func=cmd_node)


def _placement_command(sub: argparse._SubParsersAction) -> None:
    placement = sub.add_parser("placement", help="run the placement service alone (loads the topology's schema, "
                                                 "receptors and relations into the MDR first)")
    _topology_option(placement)
    placement.add_argument("--listen", default=_env("HIFI_LISTEN", "127.0.0.1:50050"),
                           help="gRPC host:port (default $HIFI_LISTEN, else 127.0.0.1:50050)")
    _advertise_option(placement)
    placement.add_argument("--metrics-port", type=port, default=os.environ.get("HIFI_METRICS_PORT") or "0",
                           help="/metrics port (default $HIFI_METRICS_PORT, else a free port)")
    placement.set_defaults(func=cmd_placement)


def _health_command(sub: argparse._SubParsersAction) -> None:
    health = sub.add_parser("health", help="check a service, print healthy/unhealthy and exit 0/1 (the "
                                           "containers' health checks)")
    health.add_argument("--node", default=None, help="this node is alive in the MDR and exports all its views")
    _topology_option(health)
    health.add_argument("--grpc", default=None, metavar="ADDRESS", help="this gRPC server reports SERVING")
    health.add_argument("--http", default=None, metavar="URL", help="this URL answers 200")
    health.add_argument("--fresh", default=None, metavar="FILE", help="this file was written within --max-age")
    health.add_argument("--max-age", type=positive(float), default=30.0, help="seconds, for --fresh (default 30)")
    health.set_defaults(func=cmd_health)


def _deploy_command(sub: argparse._SubParsersAction) -> None:
    deploy = sub.add_parser("deploy", help="render deployment files for a topology")
    deploy.add_argument("what", choices=["compose", "secrets"],
                        help="compose: a docker-compose.yml (Apache Kafka, Redis, every node, placement, dashboard, "
                             "agents, Prometheus, Grafana); secrets: a .env of new random passwords for every secret "
                             "that compose file needs (Redis, Grafana, each Kafka user), written 0600")
    deploy.add_argument("--topology", default=DEFAULT_TOPOLOGY, help="topology YAML (default: supply-chain)")
    deploy.add_argument("--output", default=None, help="write here instead of to standard output")
    deploy.add_argument("--spark-cluster", action="store_true",
                        help="the nodes on a Spark standalone cluster of the deployment's own (a master, two "
                             "workers; each node's application holds one core), not each in Spark's local mode; "
                             "with secrets: HIFI_SPARK_SECRET too")
    deploy.set_defaults(func=cmd_deploy)


def _query_command(sub: argparse._SubParsersAction) -> None:
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
    _format_option(query)
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


def _certs_command(sub: argparse._SubParsersAction) -> None:
    certs = sub.add_parser("certs", help="make a deployment's CA (once) and TLS certificates for its services")
    certs.add_argument("directory", help="where (ca.pem, ca.key, <service>.pem/.key); give services HIFI_TLS_DIR")
    certs.add_argument("--service", action="append", default=[],
                       help="a certificate for this service (repeat; default: one shared 'hifi' certificate). "
                            "A node uses its id's, the placement service 'placement''s; SERVICE:HOST[,HOST] "
                            "makes it valid for those names too, and for no other service's")
    certs.add_argument("--host", action="append", default=[],
                       help="a name or address the certificates are valid for besides the service name, "
                            "localhost and 127.0.0.1 (repeat)")
    certs.add_argument("--deployment", default="hifi", help="the CA's name (default hifi)")
    certs.add_argument("--keystore", action="append", default=[], metavar="SERVICE",
                       help="also write SERVICE's key and certificate as a PKCS#12 keystore, SERVICE.p12, locked "
                            "with a random password in SERVICE.p12.password (a JVM service: the Kafka broker)")
    certs.set_defaults(func=cmd_certs)


def _kafka_setup_command(sub: argparse._SubParsersAction) -> None:
    setup = sub.add_parser("kafka-setup", help="give a broker the topology's Kafka users and ACLs (compose's "
                                               "kafka-setup service)")
    setup.add_argument("--bootstrap", default="127.0.0.1:9094",
                       help="the broker's listener to set it up on, as its super user (default compose's "
                            "loopback one, 127.0.0.1:9094; HIFI_KAFKA_USERNAME and friends authenticate if set)")
    setup.add_argument("--topology", default=_env("HIFI_TOPOLOGY", DEFAULT_TOPOLOGY),
                       help="the topology whose users and ACLs (default $HIFI_TOPOLOGY, else supply-chain); each "
                            "user's password from its HIFI_KAFKA_PASSWORD_<USER> variable")
    setup.set_defaults(func=cmd_kafka_setup)


def _users_command(sub: argparse._SubParsersAction) -> None:
    users = sub.add_parser("users", help="users' tokens: add (prints a new token once), remove, list")
    users.add_argument("action", choices=["add", "remove", "list"],
                       help="add: a new token for NAME (printed once); remove: revoke all of NAME's; list: every token")
    users.add_argument("name", nargs="?", default="", help="the principal (add, remove)")
    users.add_argument("--role", action="append", choices=["user", "operator", "service", "admin"], default=[],
                       help="a role of the new token (repeat; default user): user submits and reads its own "
                            "queries; operator sees all queries and the nodes; service is the placement's; "
                            "admin everything")
    users.add_argument("--expires", default="",
                       help="the token expires after this long, e.g. '30 days' or '12 hours' (default: never)")
    _format_option(users)   # list's
    users.set_defaults(func=cmd_users)


def _queries_command(sub: argparse._SubParsersAction) -> None:
    queries = sub.add_parser("queries", help="running queries with their root node and result topic")
    _format_option(queries)
    queries.set_defaults(func=cmd_queries)


def _cancel_command(sub: argparse._SubParsersAction) -> None:
    cancel = sub.add_parser("cancel", help="cancel a query: its remote queries and the views only it used")
    cancel.add_argument("query_id", help="the query's id (hifi queries lists them)")
    cancel.set_defaults(func=cmd_cancel)


def _agents_command(sub: argparse._SubParsersAction) -> None:
    agents = sub.add_parser("agents", help="run receptor agents alone, against the broker in HIFI_KAFKA_BOOTSTRAP")
    agents.add_argument("--topology", default=_env("HIFI_TOPOLOGY", DEFAULT_TOPOLOGY),
                        help="run this topology's scenario (default $HIFI_TOPOLOGY, else supply-chain)")
    agents.add_argument("--scenario", default=None, help="run this scenario file instead (deploy/scenarios/)")
    agents.add_argument("--seed", type=SEED, default=None, help="override the scenario's seed")
    agents.add_argument("--speed", type=positive(float), default=1.0,
                        help="scenario seconds per wall second (default 1; readings are stamped with scenario "
                             "time, and nodes dead-letter readings more than the topology's `max_ahead`, "
                             "default 500 ms, ahead of their arrival: raise it for a speed above 1)")
    agents.add_argument("--duration", type=positive(float), default=None,
                        help="scenario seconds to run (default: until Ctrl-C)")
    agents.add_argument("--receptor-dir", default=os.environ.get("HIFI_RECEPTOR_DIR"),
                        help="write readings.jsonl and truth.jsonl here (default $HIFI_RECEPTOR_DIR)")
    agents.add_argument("--spool-mb", type=megabytes, default=os.environ.get("HIFI_SPOOL_MB") or "256",
                        help="bound of the spool on disk (<receptor dir>/spool) that keeps what the broker does "
                             "not take while it is unreachable, forwarded in order when it is back; past it the "
                             "newest messages are dropped and counted (default $HIFI_SPOOL_MB, else 256)")
    agents.add_argument("--benchmark", action="store_true",
                        help="instead, measure: the same as `hifi bench agents` for this scenario (default "
                             "duration 60 s; the embedded broker unless HIFI_KAFKA_BOOTSTRAP is set)")
    agents.set_defaults(func=cmd_agents)


def _bench_command(sub: argparse._SubParsersAction) -> None:
    bench = sub.add_parser("bench", help="benchmarks that print figures (and write them with --json)")
    benches = bench.add_subparsers(dest="which", required=True, metavar="BENCH")
    for entry in BENCHES:
        one = benches.add_parser(entry.name, help=entry.summary, description=entry.summary)
        for flag in entry.options:
            one.add_argument(*flag.flags, **flag.settings)
        one.add_argument("--json", metavar="FILE", default=None,
                         help="also write the figures, the machine, the git commit and the date to FILE")
        one.set_defaults(func=cmd_bench, bench=entry)
    report = benches.add_parser("report", help="turn a folder of --json results into docs/benchmarks.md",
                                description="turn a folder of `hifi bench <name> --json` results into a page "
                                            "with a chart per benchmark and the field's published figures")
    report.add_argument("folder", help="the result files (*.json)")
    report.add_argument("--out", default="docs/benchmarks.md", help="the page to write (default docs/benchmarks.md)")
    report.set_defaults(func=cmd_bench_report)


# every command's parser, in the order `hifi --help` lists them
COMMANDS: tuple[Callable[[argparse._SubParsersAction], None], ...] = (
    _up_command,
    _nodes_command,
    _views_command,
    _motes_command,
    _status_command,
    _dashboard_command,
    _node_command,
    _placement_command,
    _health_command,
    _deploy_command,
    _query_command,
    _certs_command,
    _kafka_setup_command,
    _users_command,
    _queries_command,
    _cancel_command,
    _agents_command,
    _bench_command,
)


def use_profile(name: str) -> None:
    """The chosen profile's settings as the process's HIFI_PLACEMENT / HIFI_TLS_DIR / HIFI_TOKEN:
    one named (`--profile`) over what the environment says, the implicit one under it."""
    from hifi.profiles import profile_settings

    for variable, value in profile_settings(name).items():
        if name:
            os.environ[variable] = value
        else:
            os.environ.setdefault(variable, value)


def _version() -> str:
    """The installed package's version (pyproject.toml's), or what a source tree without it is."""
    from importlib import metadata

    try:
        return metadata.version("hifi")
    except metadata.PackageNotFoundError:
        return "(not installed)"


def build_parser() -> argparse.ArgumentParser:
    """`hifi`'s parser: each command's own from COMMANDS, in the order `hifi --help` lists them."""
    parser = argparse.ArgumentParser(prog="hifi", description="HiFi: hierarchical high fan-in stream middleware",
                                     epilog=EPILOG)
    parser.add_argument("--version", action="version", version=f"hifi {_version()}")
    parser.add_argument("--profile", default="", metavar="NAME",
                        help="the deployment to reach: a profile of ~/.config/hifi/config.toml (its placement "
                             "address, certificates, token; docs/cli.md). Default $HIFI_PROFILE, else its "
                             "`default` profile if it has one, else the running `hifi up`")
    sub = parser.add_subparsers(dest="command", required=True)
    for add in COMMANDS:
        add(sub)
    for name, command in sub.choices.items():   # what each does, in prose (docs/cli.md shows it too)
        command.description = DESCRIPTIONS.get(name, command.description)
    return parser


def standby_args(argv: Sequence[str]) -> argparse.Namespace:
    """`hifi node --standby`: once the spare knows which node it becomes (services.commands), its
    arguments parsed again under that node's environment."""
    become_from_standby()
    return build_parser().parse_args([a for a in argv if a != "--standby"])


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        use_profile(args.profile)
        if getattr(args, "standby", False):
            args = standby_args(argv if argv is not None else sys.argv[1:])
        return int(args.func(args) or 0)
    except HiFiError as exc:   # a user's mistake or a missing server: the reason, never a stack trace
        print(f"hifi: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
