"""The `hifi` command line. `hifi --help` and `hifi COMMAND --help` document every option."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence

from glue.topology import TopologyError, load_topology

DEFAULT_TOPOLOGY = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "deploy",
                                "topologies", "supply-chain.yaml")


class CLIError(Exception):
    """A problem the user can fix; printed as one line, no stack trace."""


def _say(message: str) -> None:
    print(message, flush=True)


def _progress(message: str) -> None:
    print(f"[hifi] {message}", file=sys.stderr, flush=True)


def _mdr():
    from mdr.repository import MDR
    from services.hierarchy import run_file

    url = os.environ.get("HIFI_REDIS_URL")
    if not url:
        try:
            with open(run_file()) as fh:
                url = json.load(fh)["redis_url"]
        except (OSError, ValueError, KeyError):
            raise CLIError("no running hierarchy found: start one with `hifi up`, or set HIFI_REDIS_URL") from None
    mdr = MDR.connect(url)
    try:
        mdr.r.ping()
    except Exception as exc:  # noqa: BLE001 - any connection failure means the same to the user
        raise CLIError(f"cannot reach the MDR at {url}: {exc}") from None
    return mdr


def _table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [[str(c) for c in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


# ---------------------------------------------------------------- commands

def cmd_up(args: argparse.Namespace) -> int:
    from services.embedded import embedded_or_external
    from services.hierarchy import Hierarchy, follow_results, format_result

    topology = load_topology(args.topology)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    started = time.monotonic()
    with embedded_or_external() as servers:
        _progress(f"MDR at {servers.redis_url}, broker at {servers.bootstrap}")
        hierarchy = Hierarchy(topology, servers.redis_url, servers.bootstrap, state_dir=args.state_dir or "",
                              trigger_ms=args.trigger_ms)
        try:
            hierarchy.start(_progress)
            hierarchy.start_agents(args.truth)
            hierarchy.write_run_file()
            _progress(f"hierarchy {topology.name!r} is up: {len(hierarchy.nodes)} nodes, "
                      f"{len(hierarchy.agent.scenario.readers)} readers; results from {topology.root} follow "
                      f"(Ctrl-C stops)")
            first: list[float] = []

            def emit(topic: str, row: dict) -> None:
                if not first:
                    first.append(time.monotonic() - started)
                    _progress(f"first result at the core {first[0]:.1f} s after start")
                _say(format_result(topic, row))

            follower = threading.Thread(target=follow_results,
                                        args=(servers.bootstrap, hierarchy.root_topics(), stop, emit), daemon=True)
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


def _stop_spark() -> None:
    from pyspark.sql import SparkSession

    session = SparkSession.getActiveSession()
    if session is not None:
        session.stop()


def cmd_nodes(args: argparse.Namespace) -> int:
    nodes = _mdr().nodes()
    _say(_table(["node", "tier", "parent", "address", "state", "last heartbeat"],
                [[n.id, n.tier, n.parent or "-", n.address, "alive" if n.alive else "DEAD",
                  time.strftime("%H:%M:%S", time.localtime(n.last_heartbeat_ms / 1000)) if n.last_heartbeat_ms
                  else "-"] for n in nodes]))
    return 0


def cmd_views(args: argparse.Namespace) -> int:
    views = _mdr().views(args.node)
    _say(_table(["view", "node", "window", "topic", "readers"],
                [[v.name, v.node, v.window or "-", v.topic or "(definition only)", ",".join(v.readers)]
                 for v in views]))
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    mdr = _mdr()
    rows = []
    for node in mdr.nodes():
        stats = mdr.stats(node.id)
        rows.append([node.id, node.tier, "alive" if node.alive else "DEAD", int(stats.get("rows_in", 0)),
                     f"{stats.get('input_rate', 0.0):.1f}", f"{stats.get('lag_ms', 0.0) / 1000:.1f}",
                     int(stats.get("rows_out", 0)), int(stats.get("dead", 0)), int(stats.get("late_rows", 0)),
                     int(stats.get("running_queries", 0))])
    _say(_table(["node", "tier", "state", "rows in", "rows/s", "lag s", "rows out", "dead", "late", "queries"],
                rows))
    return 0


def cmd_agents(args: argparse.Namespace) -> int:
    from edge.agent import ReaderAgent, scenario_from_topology

    bootstrap = os.environ.get("HIFI_KAFKA_BOOTSTRAP")
    if not bootstrap:
        raise CLIError("hifi agents needs a broker: set HIFI_KAFKA_BOOTSTRAP (hifi up runs its own agents)")
    topology = load_topology(args.topology)
    agent = ReaderAgent(scenario_from_topology(topology), bootstrap, args.truth)
    _progress(f"{len(agent.scenario.readers)} readers publishing to {bootstrap}")
    stats = agent.run(args.duration)
    seconds = max((stats.stopped_ms - stats.started_ms) / 1000, 1e-9)
    _say(f"{stats.readings} readings in {stats.cycles} cycles over {seconds:.1f} s "
         f"({stats.readings / seconds:.0f} readings/s)")
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from services.bench import run_pipeline_bench

    figures = run_pipeline_bench(load_topology(args.topology), args.duration, _progress, args.trigger_ms)
    _stop_spark()
    _say(figures.table())
    return 0


# ---------------------------------------------------------------- parser

def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hifi", description="HiFi: hierarchical high fan-in stream middleware")
    sub = parser.add_subparsers(dest="command", required=True)

    up = sub.add_parser("up", help="run a whole topology (nodes + agents) and print results at the core")
    up.add_argument("--topology", default=DEFAULT_TOPOLOGY, help="topology YAML (default: supply-chain)")
    up.add_argument("--duration", type=float, default=None, help="stop cleanly after this many seconds")
    up.add_argument("--state-dir", default=None, help="checkpoints and ground truth (default: a temp dir)")
    up.add_argument("--truth", default=None, help="write the agents' ground truth JSONL here")
    up.add_argument("--trigger-ms", type=int, default=1000, help="micro-batch interval of every query")
    up.set_defaults(func=cmd_up)

    nodes = sub.add_parser("nodes", help="nodes in the MDR with tier, parent, address, liveness")
    nodes.set_defaults(func=cmd_nodes)

    views = sub.add_parser("views", help="exported views with node, window and topic")
    views.add_argument("--node", default=None, help="only this node's views")
    views.set_defaults(func=cmd_views)

    status = sub.add_parser("status", help="per-node input rate, lag, dead letters")
    status.set_defaults(func=cmd_status)

    agents = sub.add_parser("agents", help="run the topology's receptor agents alone")
    agents.add_argument("--topology", default=DEFAULT_TOPOLOGY)
    agents.add_argument("--duration", type=float, default=None, help="seconds to run (default: until Ctrl-C)")
    agents.add_argument("--truth", default=None, help="write ground truth JSONL here")
    agents.set_defaults(func=cmd_agents)

    bench = sub.add_parser("bench", help="benchmarks that print figures")
    bench.add_argument("which", choices=["pipeline"],
                       help="pipeline: start-up time, edge input rate, reading-to-core latency, accuracy")
    bench.add_argument("--topology", default=DEFAULT_TOPOLOGY)
    bench.add_argument("--duration", type=float, default=60.0, help="seconds the agents run (default 60)")
    bench.add_argument("--trigger-ms", type=int, default=1000, help="micro-batch interval of every query")
    bench.set_defaults(func=cmd_bench)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (CLIError, TopologyError) as exc:
        print(f"hifi: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
