"""The long-running services as commands — `hifi node`, `hifi placement`, `hifi dashboard` — and
`hifi kafka-setup`, which prepares the broker they use: their parsers, help and work."""

from __future__ import annotations

import argparse
import json
import os
import sys

from glue.topology import load_topology
from services import heap
from services.cli.common import (
    CLIError,
    advertise_option,
    broker_bootstrap,
    cli_security,
    connect_mdr,
    env_or,
    progress,
    run_info,
    serve_until_stopped,
    stop_spark,
    topology_option,
)
from services.cli.option_types import port, positive
from services.paths import DEFAULT_TOPOLOGY

# what each command does, in prose: its --help description and its part of docs/cli.md
DESCRIPTIONS: dict[str, str] = {
    'dashboard': (
        'serve the operations dashboard for a hierarchy that is already running (`hifi up` starts one; this '
        'one is for a second port or after a restart: it holds no state). `--listen` default `127.0.0.1:8470`'
        " (on any address but a loopback one it serves HTTPS only, with the deployment's certificate "
        '`dashboard.pem`, else `hifi.pem`, from `HIFI_TLS_DIR`, and a `Secure` session cookie); `--topology` '
        "(default: the running one's) names the alert views"
    ),
    'node': (
        'run one node of a topology in this process, with its own Spark (`SPARK_MASTER` for a cluster), '
        'against `HIFI_REDIS_URL` and `HIFI_KAFKA_BOOTSTRAP`: what a node container runs. It first waits (up '
        'to `--wait`, default 600 s) until its children export their views, then registers, exports its own '
        'and serves until SIGTERM/Ctrl-C. Every option defaults from the environment: `HIFI_NODE_ID`, '
        '`HIFI_TOPOLOGY`, `HIFI_LISTEN`, `HIFI_ADVERTISE_HOST` (the host others reach it at when it listens '
        'on `0.0.0.0`), `HIFI_METRICS_PORT`, `HIFI_STATE_DIR` (checkpoints; default a temporary directory). '
        '`--standby` starts Spark and a Python worker first, then reads from stdin the node to become (one '
        'JSON line `{"env": {...}, "log": FILE}`: its environment, where its output goes) and parses its '
        'options again under it: the warm spare a supervisor keeps'
    ),
    'placement': (
        "run the placement service alone: loads the topology's schema, receptors and static relations into "
        'the MDR, serves `Submit`/`Cancel`/`List`/`Results` (default `127.0.0.1:50050`; `HIFI_TOPOLOGY`, '
        '`HIFI_LISTEN`, `HIFI_ADVERTISE_HOST`, `HIFI_METRICS_PORT`)'
    ),
    'kafka-setup': (
        "give the broker at `--bootstrap` the topology's Kafka users (SCRAM-SHA-512, each password from its "
        "`HIFI_KAFKA_PASSWORD_<USER>` variable) and ACLs (services/kafka_acls.py), idempotently: what "
        "compose's `kafka-setup` service runs, and what `hifi up` applies to its embedded broker"
    ),
}


def add_dashboard(sub: argparse._SubParsersAction) -> None:
    dashboard = sub.add_parser("dashboard", help="serve the operations dashboard for a running hierarchy "
                                                 "(`hifi up` starts one already)")
    dashboard.add_argument("--listen", default=env_or("HIFI_LISTEN", "127.0.0.1:8470"),
                           help="host:port to serve on (default $HIFI_LISTEN, else 127.0.0.1:8470); beyond "
                                "loopback it serves HTTPS only, with the deployment's certificate (HIFI_TLS_DIR)")
    advertise_option(dashboard)
    dashboard.add_argument("--topology", default=os.environ.get("HIFI_TOPOLOGY"),
                           help="the topology file (default $HIFI_TOPOLOGY, else the running hierarchy's); "
                                "names the alert views")
    dashboard.set_defaults(func=cmd_dashboard)


def cmd_dashboard(args: argparse.Namespace) -> int:
    """A dashboard for a hierarchy already running (e.g. after the first one was stopped)."""
    from services.dashboard import Dashboard

    mdr = connect_mdr()
    topology_file = args.topology or run_info().get("topology") or DEFAULT_TOPOLOGY
    dashboard = Dashboard(mdr, broker_bootstrap(), cli_security(), load_topology(topology_file))
    try:
        url = dashboard.serve(args.listen, args.advertise)
    except OSError as exc:
        raise CLIError(f"cannot listen on {args.listen}: {exc.strerror}") from None
    progress(f"dashboard at {url} (Ctrl-C stops)")
    serve_until_stopped(dashboard.close)
    return 0


def add_node(sub: argparse._SubParsersAction) -> None:
    node = sub.add_parser("node", help="run one node of a topology in this process, against the MDR and broker "
                                       "of HIFI_REDIS_URL and HIFI_KAFKA_BOOTSTRAP (what a node container runs)")
    node.add_argument("--id", default=os.environ.get("HIFI_NODE_ID", ""), help="the node (default $HIFI_NODE_ID)")
    topology_option(node)
    node.add_argument("--listen", default=env_or("HIFI_LISTEN", ""),
                      help="gRPC host:port (default $HIFI_LISTEN, else the topology's `listen`, else a free port)")
    advertise_option(node)
    node.add_argument("--metrics-port", type=port, default=os.environ.get("HIFI_METRICS_PORT") or None,
                      help="/metrics port (default $HIFI_METRICS_PORT, else the topology's `metrics_port`)")
    node.add_argument("--state-dir", default=env_or("HIFI_STATE_DIR", ""),
                      help="checkpoints (default $HIFI_STATE_DIR, else a temporary directory)")
    node.add_argument("--trigger-ms", type=positive(int), default=1000, help="micro-batch interval of every query")
    node.add_argument("--wait", type=positive(float), default=600.0,
                      help="seconds to wait for the children's views before giving up (default 600)")
    node.add_argument("--standby", action="store_true",
                      help="start Spark, then wait on stdin for the node to become (one JSON line: "
                           '{"env": {...}, "log": FILE}): the warm spare of a supervisor (hifi up --processes)')
    node.set_defaults(func=cmd_node)


def become_from_standby() -> None:
    """A warm spare (`hifi node --standby`): the node's modules loaded, Spark and a Python worker
    started; then the node it becomes is read from stdin (one JSON line: {"env": {...}, "log":
    FILE}), its environment set, the output sent to its log. The caller parses the `hifi node`
    arguments again under that environment (services.cli.app.standby_args)."""
    from dsp.runtime import faults
    from dsp.spark.session import spark_session

    spark_session("hifi-standby")   # Spark and its Python workers up (dsp.spark.session.start_python_workers)
    progress("standby: warm, waiting for the node to become")
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
    mdr, bootstrap = connect_mdr(), broker_bootstrap()
    state_dir = args.state_dir or tempfile.mkdtemp(prefix=f"hifi-{args.id}-")
    progress(f"node {args.id}: starting Spark ({os.environ.get('SPARK_MASTER') or 'local'})")
    node = HiFiNode(args.id, topology, mdr, spark_session(f"hifi-{args.id}"), bootstrap, state_dir, args.trigger_ms,
                    listen=args.listen, advertise_host=args.advertise, metrics_port=args.metrics_port,
                    security=cli_security())
    node.wait_for_children(args.wait, progress)
    node.start()
    heap.settle()
    progress(f"node {args.id} ({topology.nodes[args.id].tier}) serving at {node.address}, metrics at "
              f"{node.metrics.url}, checkpoints in {state_dir} (Ctrl-C stops)")

    def close() -> None:
        node.stop()
        stop_spark()
    serve_until_stopped(close)
    return 0


def add_placement(sub: argparse._SubParsersAction) -> None:
    placement = sub.add_parser("placement", help="run the placement service alone (loads the topology's schema, "
                                                 "receptors and relations into the MDR first)")
    topology_option(placement)
    placement.add_argument("--listen", default=env_or("HIFI_LISTEN", "127.0.0.1:50050"),
                           help="gRPC host:port (default $HIFI_LISTEN, else 127.0.0.1:50050)")
    advertise_option(placement)
    placement.add_argument("--metrics-port", type=port, default=os.environ.get("HIFI_METRICS_PORT") or "0",
                           help="/metrics port (default $HIFI_METRICS_PORT, else a free port)")
    placement.set_defaults(func=cmd_placement)


def cmd_placement(args: argparse.Namespace) -> int:
    """The placement service alone; it loads the topology's metadata into the MDR first."""
    from services.hierarchy import load_metadata
    from services.placement_service import start_placement_service

    mdr, bootstrap = connect_mdr(), broker_bootstrap()
    topology = load_topology(args.topology)
    load_metadata(mdr, topology)
    try:
        service = start_placement_service(mdr, bootstrap, cli_security(), args.listen, args.metrics_port,
                                          args.advertise)
    except RuntimeError as exc:   # grpc: the port is taken
        raise CLIError(f"cannot listen on {args.listen}: {exc}") from None
    progress(f"placement service for {topology.name!r} at {service.address}, metrics at {service.metrics.url} "
              f"(Ctrl-C stops)")
    serve_until_stopped(service.close)
    return 0


def add_kafka_setup(sub: argparse._SubParsersAction) -> None:
    setup = sub.add_parser("kafka-setup", help="give a broker the topology's Kafka users and ACLs (compose's "
                                               "kafka-setup service)")
    setup.add_argument("--bootstrap", default="127.0.0.1:9094",
                       help="the broker's listener to set it up on, as its super user (default compose's "
                            "loopback one, 127.0.0.1:9094; HIFI_KAFKA_USERNAME and friends authenticate if set)")
    setup.add_argument("--topology", default=env_or("HIFI_TOPOLOGY", DEFAULT_TOPOLOGY),
                       help="the topology whose users and ACLs (default $HIFI_TOPOLOGY, else supply-chain); each "
                            "user's password from its HIFI_KAFKA_PASSWORD_<USER> variable")
    setup.set_defaults(func=cmd_kafka_setup)


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
    progress(f"kafka users ({len(passwords)}) and ACLs ({count}) in place on {args.bootstrap}")
    return 0
