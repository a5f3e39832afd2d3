"""`hifi up` (a whole topology in one process, or a process per node) and `hifi agents` (the
receptor emulation of a scenario): their parsers, help and work."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time

from glue.topology import load_topology
from services.cli.common import CLIError, env_or, progress, say, stop_spark
from services.cli.option_types import SEED, megabytes, positive
from services.embedded import redacted_url
from services.paths import DEFAULT_TOPOLOGY

# what each command does, in prose: its --help description and its part of docs/cli.md
DESCRIPTIONS: dict[str, str] = {
    'up': (
        "run a whole topology: MDR, every node, the receptor agents (the topology's scenario), the operations"
        ' dashboard (`--dashboard`, default `127.0.0.1:8470`, a free port when that one is taken; its URL is '
        'printed); print live the rows of the views at the ends of its CSAVA chain (the views no other view '
        'reads: trends, and the alerts, each as it starts and as it ends). `--duration` stops cleanly after '
        'S seconds; `--receptor-dir` is where the agents write `readings.jsonl` and `truth.jsonl` (default '
        "`<state dir>/receptors`); `--trigger-ms` is every query's micro-batch interval (default 1000; a "
        "node's stream polls its inputs at a quarter of it, its raw topics at half). `--processes` runs each "
        "node as a `hifi node` "
        'process of its own (its own Spark; its log at `<state dir>/<node>.log`) under a supervisor that '
        'starts a node process that dies again after 0.25 s, from a warm spare process it keeps beside the '
        'nodes (`hifi node --standby`, started 15 s after the nodes and 15 s after each use); by default '
        'every node runs in this one process and Spark application (less memory, faster to start). Spark\'s '
        'and the JVM\'s own log lines go to `<HIFI_HOME>/logs/spark.log` (`--verbose`: here too). Ctrl-C, '
        'SIGTERM or SIGHUP (to the process or its whole group) stops every node, then Spark, then the '
        'servers, and exits 0; one that cannot start exits 2 with a line saying why.'
    ),
    'agents': (
        "run receptor agents alone against `HIFI_KAFKA_BOOTSTRAP`: the topology's scenario, or a scenario "
        'file (`deploy/scenarios/`); `--seed` overrides its seed; `--speed` runs scenario time X times faster'
        ' than the clock (readings carry scenario time, and nodes dead-letter readings more than the '
        "topology's `max_ahead`, default 500 ms, ahead of their arrival: raise it for X > 1); `--duration` in"
        ' scenario seconds (default: until Ctrl-C); `--receptor-dir` writes `readings.jsonl` and '
        '`truth.jsonl`; `--spool-mb` bounds the spool on disk that keeps what the broker does not take while '
        'it is unreachable (default `$HIFI_SPOOL_MB`, else 256; see *When parts fail*); `--benchmark` '
        'measures instead, as `hifi bench agents` does for that scenario'
    ),
}


def add_up(sub: argparse._SubParsersAction) -> None:
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
        progress(f"Kafka users {', '.join(sorted(passwords))}: client settings in {directory} (docs/other-tools.md)")


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
        progress(f"Spark's own log: {os.environ['HIFI_SPARK_LOG']} (--verbose: here)")
    with embedded_or_external() as servers:
        progress(f"MDR at {redacted_url(servers.redis_url)}, broker at {servers.bootstrap}")
        _kafka_users(servers, topology)
        hierarchy = Hierarchy(topology, servers.redis_url, servers.bootstrap, state_dir=args.state_dir or "",
                              trigger_ms=args.trigger_ms, processes=args.processes,
                              tls_dir=os.path.join(hifi_home(), "tls"))
        try:
            hierarchy.start(progress)
            hierarchy.start_agents(args.receptor_dir)
            dashboard_url = _start_dashboard(hierarchy, args.dashboard)
            hierarchy.write_run_file()
            progress(login_notice(dashboard_url, hierarchy.admin_token, sys.stderr.isatty()))
            progress(f"hierarchy {topology.name!r} is up: {len(topology.nodes)} nodes"
                      f"{' (processes)' if args.processes else ''}, "
                      f"{len(hierarchy.agent.scenario.readers)} readers; the chain's results follow: trends, and "
                      f"each alert as it starts and as it ends (Ctrl-C stops)")
            first: list[float] = []

            def emit(topic: str, row: dict) -> None:
                if not first:
                    first.append(time.monotonic() - started)
                    progress(f"first result {first[0]:.1f} s after start")
                say(format_result(topic, row))

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
            progress("stopping")
            hierarchy.stop()
            stop_spark()
    progress("stopped")
    return 0


def _start_dashboard(hierarchy, listen: str) -> str:
    """The dashboard on `listen`; when that port is taken (another hifi up), on any free port."""
    try:
        return hierarchy.start_dashboard(listen)
    except OSError as exc:
        progress(f"dashboard: cannot listen on {listen} ({exc.strerror}); using a free port")
        return hierarchy.start_dashboard(f"{listen.rpartition(':')[0]}:0")


def add_agents(sub: argparse._SubParsersAction) -> None:
    agents = sub.add_parser("agents", help="run receptor agents alone, against the broker in HIFI_KAFKA_BOOTSTRAP")
    agents.add_argument("--topology", default=env_or("HIFI_TOPOLOGY", DEFAULT_TOPOLOGY),
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


def load_agent_scenario(args: argparse.Namespace, start_ms: int):
    """The scenario `hifi agents` runs: --scenario, else the topology's."""
    from services.emulation import agent_scenario

    return agent_scenario(args.scenario, args.topology, start_ms, args.seed)


def cmd_agents(args: argparse.Namespace) -> int:
    from edge.agent import ReceptorAgent
    from services.hierarchy import next_whole_second

    if args.benchmark:   # the same as `hifi bench agents`
        from services.bench.agents import run_agents_bench

        say(run_agents_bench(lambda start_ms: load_agent_scenario(args, start_ms), args.duration or 60.0,
                              progress))
        return 0
    bootstrap = os.environ.get("HIFI_KAFKA_BOOTSTRAP")
    if not bootstrap:
        raise CLIError("hifi agents needs a broker: set HIFI_KAFKA_BOOTSTRAP (hifi up runs its own agents)")
    if args.speed <= 0:
        raise CLIError(f"--speed must be positive (got {args.speed}); `hifi bench agents` runs flat out")
    scenario = load_agent_scenario(args, next_whole_second(int(time.time() * 1000)))
    agent = ReceptorAgent(scenario, bootstrap, args.receptor_dir, args.speed, int(args.spool_mb * 1024 * 1024))
    signal.signal(signal.SIGTERM, lambda *_: agent.stop())   # `docker stop`: finish the tick, close the logs
    progress(f"scenario {scenario.name!r}: {len(scenario.readers)} readers, {len(scenario.motes)} motes"
              f"{', Intel Lab replay' if scenario.replay else ''} publishing to {bootstrap} at {args.speed:g}x"
              + (f"; readings and truth in {args.receptor_dir}" if args.receptor_dir else ""))
    stats = agent.run(args.duration)
    say(f"{stats.readings} tag reads in {stats.cycles} read cycles and {stats.samples} mote samples "
         f"over {stats.wall_s:.1f} s ({stats.readings / max(stats.wall_s, 1e-9):.0f} tag reads/s)")
    if stats.spooled:
        say(f"{stats.spooled} messages spooled while the broker was unreachable, {stats.forwarded} forwarded, "
             f"{stats.spool_dropped} dropped by a full spool")
    return 0
