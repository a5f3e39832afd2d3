"""`hifi bench`: every benchmark as one entry (its name, what it measures, its own options, how it
runs), each run giving the table it prints and the figures behind it, which `--json FILE` writes
with the machine, the git commit and the date (`services.bench.results`), for `hifi bench report`.

The runners import their bench module when called: `hifi` starts without Spark or the broker's
client loaded, and a bench pulls in only what it measures.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from services.cli.option_types import SEED, bounded, positive
from services.paths import (
    DEEP_TOPOLOGY,
    DEFAULT_TOPOLOGY,
    FAN_IN_SCENARIO,
    HAZMAT_TOPOLOGY,
    SMALL_TOPOLOGY,
    STORE_TOPOLOGY,
    SUPPLY_CHAIN_SCENARIO,
)


@dataclass(frozen=True)
class Option:
    """One flag of one bench, as argparse's add_argument takes it."""
    flags: tuple[str, ...]
    settings: dict[str, Any]


def option(*flags: str, **settings: Any) -> Option:
    return Option(flags, settings)


@dataclass(frozen=True)
class Outcome:
    text: str       # what the bench prints
    figures: Any    # the figures behind it: dataclasses, lists, dicts, numbers (services.bench.results.plain)


@dataclass(frozen=True)
class Bench:
    name: str
    summary: str
    run: Callable[[argparse.Namespace], Outcome]
    options: tuple[Option, ...] = field(default=())
    spark: bool = True      # Spark is stopped after it (a Python listener left attached can hang the exit)


def progress(message: str) -> None:
    print(f"[hifi] {message}", file=sys.stderr, flush=True)


def duration(default: float, what: str = "seconds the agents run") -> Option:
    return option("--duration", type=positive(float), default=default, help=f"{what} (default {default:g})")


def topology(default: str) -> Option:
    return option("--topology", default=default, help=f"topology file (default {default.rsplit('/', 1)[-1]})")


TRIGGER = option("--trigger-ms", type=positive(int), default=1000, help="micro-batch interval of every query")


def _topology(args: argparse.Namespace):
    from glue.topology import load_topology

    return load_topology(args.topology)


# ---------------------------------------------------------------- the runners

def _pipeline(args: argparse.Namespace) -> Outcome:
    from services.bench.pipeline import run_pipeline_bench

    figures = run_pipeline_bench(_topology(args), args.duration, progress, args.trigger_ms)
    return Outcome(figures.table(), figures)


def _planning(args: argparse.Namespace) -> Outcome:
    from services.bench.planning import run_planning_bench, run_submit_bench

    figures = run_planning_bench(args.queries, args.fanout, args.levels)
    text, out = figures.table(), {"planning": figures}
    if args.submit:
        submitted = run_submit_bench(_topology(args), args.submit, args.fanout, args.levels, progress)
        text, out = f"{text}\n\n{submitted.table()}", {**out, "submit": submitted}
    return Outcome(text, out)


def _lag(args: argparse.Namespace) -> Outcome:
    from services.bench.lag import run_lag_bench, table

    figures = run_lag_bench(_topology(args), args.slides, args.duration, progress)
    return Outcome(table(figures), figures)


def _agents(args: argparse.Namespace) -> Outcome:
    from services.bench.agents import run_agents_bench
    from services.emulation import agent_scenario

    text = run_agents_bench(lambda start_ms: agent_scenario(args.scenario, None, start_ms, args.seed),
                            args.duration, progress)
    return Outcome(text, {"table": text})


def _cleaning(args: argparse.Namespace) -> Outcome:
    from services.bench.cleaning import run_cleaning_bench

    text, presence = run_cleaning_bench(args.scenario, args.duration, args.seed, args.plot or None, progress)
    return Outcome(text, {"table": text, "presence": presence})


def _dashboard(args: argparse.Namespace) -> Outcome:
    from services.bench.dashboard import run_dashboard_bench

    text = run_dashboard_bench(_topology(args), args.duration, progress)
    return Outcome(text, {"table": text})


def _idle(args: argparse.Namespace) -> Outcome:
    from services.bench.runtime import run_idle_bench

    cores = run_idle_bench(args.duration, progress)
    return Outcome(f"cores used by one edge node and the core, standing views, no input: {cores:.3f}",
                   {"cores": cores})


def _sharing(args: argparse.Namespace) -> Outcome:
    from services.bench.runtime import run_sharing_bench, sharing_table

    figures = run_sharing_bench(args.counts, args.duration, progress)
    return Outcome(sharing_table(figures), figures)


def _capacity(args: argparse.Namespace) -> Outcome:
    from services.bench.capacity import RATES, capacity_table, run_capacity_bench
    from services.bench.results import plain

    figures = run_capacity_bench(sorted(args.rates or RATES), args.step, progress, args.spark_cluster)
    return Outcome(capacity_table(figures), {**plain(figures), "sustained": figures.sustained})


def _chaos(args: argparse.Namespace) -> Outcome:
    from services.bench.chaos import chaos_table, run_chaos_bench

    figures = run_chaos_bench(args.settle, progress)
    return Outcome(chaos_table(figures), figures)


def _events(args: argparse.Namespace) -> Outcome:
    from services.bench.events import SEEDS, run_live, run_offline, table

    topology = _topology(args)
    if args.offline:
        scores = run_offline(topology, args.duration, args.seeds or SEEDS)
    else:
        scores = run_live(topology, args.duration, progress, args.trigger_ms, (args.seeds or SEEDS)[0])
    return Outcome(table(scores, live=not args.offline), scores)


def _proxy(args: argparse.Namespace) -> Outcome:
    from services.bench.proxy import run, run_selectivity, selectivity_table, table

    workloads, selectivity = run(args.duration), run_selectivity(args.duration)
    return Outcome(f"{table(workloads)}\n\n{selectivity_table(selectivity)}",
                   {"workloads": workloads, "selectivity": selectivity})


def _priority(args: argparse.Namespace) -> Outcome:
    from services.bench.priority import priority_table, run_priority_bench

    figures = run_priority_bench(_topology(args), args.duration, progress, args.uplink)
    return Outcome(priority_table(figures, args.uplink), {"uplink_bytes_per_s": args.uplink, "phases": figures})


def _triage(args: argparse.Namespace) -> Outcome:
    from services.bench.triage import run_triage_bench, triage_table

    ramp, loads = run_triage_bench(args.rate, args.duration, args.latency_target, progress)
    return Outcome(triage_table(ramp, loads, args.latency_target),
                   {"latency_target_ms": args.latency_target, "ramp": ramp, "loads": loads})


def _fanin(args: argparse.Namespace) -> Outcome:
    from services.bench.fanin import fanin_table, parent_table, run_fanin_bench, run_parent_bench

    parent = run_parent_bench(args.children, 20.0, args.duration, progress) if args.children else []
    whole = run_fanin_bench(args.whole, 20.0, args.duration, progress) if args.whole else []
    text = "\n\n".join([*([parent_table(parent)] if parent else []), *([fanin_table(whole)] if whole else [])])
    return Outcome(text, {"parent": parent, "whole": whole})


def _batches(args: argparse.Namespace) -> Outcome:
    from services.bench.batches import batches_table, run_batches_bench

    drains = run_batches_bench(args.backlogs, progress)
    return Outcome(batches_table(drains), drains)


def _past(args: argparse.Namespace) -> Outcome:
    from services.bench.past import past_table, run_past_bench

    runs = run_past_bench(args.hour_rates, progress)
    return Outcome(past_table(runs), runs)


def _joins(args: argparse.Namespace) -> Outcome:
    from glue.standing import topology_catalog
    from glue.topology import load_topology
    from services.bench import hazmat
    from services.bench.joins import algorithms_table, orders_table, run_algorithms, run_orders
    from services.bench.shared_joins import run_shared_joins, shared_joins_table

    algorithms = run_algorithms(args.rates, progress)
    orders = run_orders(progress)
    plant = load_topology(HAZMAT_TOPOLOGY)
    shared = run_shared_joins(plant, topology_catalog(plant), progress)
    scores = [hazmat.run_offline(plant, 300.0)]
    progress(f"hazmat offline: precision {scores[0].precision}, recall {scores[0].recall}")
    if args.hazmat_duration:
        scores.append(hazmat.run_live(plant, args.hazmat_duration, progress))
    tables = [algorithms_table(algorithms), orders_table(orders), shared_joins_table(shared),
              hazmat.hazmat_table(scores)]
    return Outcome("\n\n".join(tables), {"algorithms": algorithms, "orders": orders, "shared": shared,
                                          "hazmat": scores})


# ---------------------------------------------------------------- argument types that need a module

def _duration_ms(text: str) -> int:
    from wire.windows import DurationError, duration_ms

    try:
        value = duration_ms(text)
    except DurationError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text}")
    return value


def _byte_rate(text: str) -> int:
    from glue.topology import TopologyError, byte_rate

    try:
        return byte_rate(text, "--uplink")
    except TopologyError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


BENCHES: tuple[Bench, ...] = (
    Bench("pipeline", "start-up time, edge input rate, latency from a reading to each level's window "
          "(headquarters included) and windows missing, accuracy", _pipeline,
          (topology(DEFAULT_TOPOLOGY), duration(60.0), TRIGGER)),
    Bench("planning", "parse + place + rewrite time on a large generated hierarchy (--submit N: also "
          "deploy N queries to a running deep.yaml hierarchy)", _planning,
          (option("--queries", type=positive(int), default=200, help="how many queries to plan (default 200)"),
           option("--fanout", type=positive(int), default=4, help="children per node (default 4)"),
           option("--levels", type=positive(int), default=4, help="depth of the tree (default 4)"),
           option("--submit", type=bounded(int, 0), default=0, metavar="N",
                  help="also submit N queries to a running deep.yaml hierarchy whose MDR holds the generated "
                       "tree, timing plan + place + deploy on the nodes"),
           topology(DEEP_TOPOLOGY))),
    Bench("lag", "lag added per level, pane partials against naive windows", _lag,
          (topology(DEEP_TOPOLOGY), duration(60.0, "seconds each query runs"),
           option("--slides", type=positive(float), nargs="+", default=[1.0, 10.0],
                  help="window slides in seconds, range = 2 x slide (default 1 10)"))),
    Bench("agents", "how fast one agent process publishes a scenario, flat out and in real time", _agents,
          (option("--scenario", default=FAN_IN_SCENARIO, help="the scenario file (default fan-in.yaml)"),
           option("--seed", type=SEED, default=None, help="override the scenario's seed"), duration(60.0)),
          spark=False),
    Bench("cleaning", "errors against ground truth of raw reads, fixed windows and adaptive smoothing, "
          "arbitration and counts; faulty-mote detection on the Intel Lab replay (offline)", _cleaning,
          (option("--scenario", default=SUPPLY_CHAIN_SCENARIO,
                  help="the scenario scored for arbitration and counts (default supply-chain.yaml)"),
           option("--seed", type=SEED, default=7, help="the seed of every setting (default 7)"),
           option("--plot", default="bench-cleaning.png",
                  help="where to write the plot (PNG; empty: none; default bench-cleaning.png)"), duration(60.0)),
          spark=False),
    Bench("dashboard", "snapshot build time and size, metrics scrape times, MDR operations/s per node, "
          "seconds from an edge node's crash to dead", _dashboard, (topology(SMALL_TOPOLOGY), duration(60.0))),
    Bench("idle", "cores one edge node (and the core) use with their standing views and no input", _idle,
          (duration(60.0, "seconds measured"),)),
    Bench("sharing", "CPU-seconds per minute of one edge and the core (alone, and with the broker and Redis) "
          "with N distinct user queries, their results' latency, their answers against the reference",
          _sharing, (duration(60.0),
                     option("--counts", type=positive(int), nargs="+", default=[1, 10, 100],
                            help="how many distinct user queries, one hierarchy each (default 1 10 100)"))),
    Bench("capacity", "the highest reading rate (supply-chain mix) one edge node sustains with its lag flat, "
          "beside librdkafka fetching the topic and fetching plus the node's decode", _capacity,
          (option("--rates", type=positive(float), nargs="+", default=None,
                  help="readings/s offered in turn, until one is not held (default 10000, doubling to 320000)"),
           option("--step", type=positive(float), default=120.0, help="seconds each rate is offered (default 120)"),
           option("--spark-cluster", action="store_true",
                  help="run the hierarchy's Spark on a standalone cluster the bench starts (two workers of one "
                       "core) and count its executors' tasks; default: local mode"))),
    Bench("chaos", "nodes as processes under a supervisor, one query, faults one after another: seconds until "
          "results flow again, readings published against counted, duplicates, windows equal to the fault-free "
          "answer", _chaos,
          (option("--settle", type=positive(float), default=20.0,
                  help="seconds of normal running after each fault (default 20)"),), spark=False),
    Bench("events", "the topology's alerting event views against the events its scenario stages: precision, "
          "recall (tag and location), seconds from a match's end to its alert", _events,
          (topology(STORE_TOPOLOGY), duration(300.0, "seconds of scenario"), TRIGGER,
           option("--offline", action="store_true",
                  help="evaluate the views centrally by the reference evaluator over the readings the agents "
                       "would publish (no broker or Spark)"),
           option("--seeds", type=SEED, nargs="+", default=None,
                  help="the scenario seeds scored, offline each, live the first (default 101 202 303: not the "
                       "seeds the patterns were tuned on); the staging is made denser for scoring"))),
    Bench("proxy", "the sensor proxy on the Intel Lab replay (offline): samples and bytes from the motes with "
          "and without it, per workload, whether each answer is identical; selectivity estimates", _proxy,
          (duration(240.0, "seconds of replay"),), spark=False),
    Bench("priority", "alert latency across the doors' constrained uplinks alone, beside a flood of detail "
          "with priorities, and beside it without", _priority,
          (topology(SMALL_TOPOLOGY), duration(60.0),
           option("--uplink", type=_byte_rate, default="3 KB/s",
                  help="each door's uplink byte rate (default '3 KB/s', under the flood's)"))),
    Bench("triage", "one edge node with a latency target fed 1x (found by a ramp), 3x, 10x and 1x again: "
          "latency, share of windows triaged, their error against the publisher's tally", _triage,
          (duration(60.0, "seconds per load"),
           option("--rate", type=positive(float), default=10_000,
                  help="readings/s the ramp that finds 1x starts at, doubling every 20 s (default 10000)"),
           option("--latency-target", type=_duration_ms, default="1 second",
                  help="the edge's latency target (default '1 second')"))),
    Bench("fanin", "a warehouse over N doors at the same total reading rate: the parent alone (doors emulated), "
          "then whole hierarchies: cores, windows after they close, readers", _fanin,
          (duration(60.0),
           option("--children", type=positive(int), nargs="*", default=[4, 16, 64],
                  help="the parent alone: its numbers of doors, one run each (default 4 16 64)"),
           option("--whole", type=positive(int), nargs="*", default=[4, 16, 32],
                  help="whole hierarchies (every door a node): their numbers of doors (default 4 16 32)"))),
    Bench("batches", "a backlog drained by one node's driver path and by Spark's: seconds, CPU-seconds, "
          "counts agreeing", _batches,
          (option("--backlogs", type=positive(int), nargs="+", default=[20_000, 200_000, 1_000_000],
                  help="backlog sizes in readings (default 20000 200000 1000000)"),)),
    Bench("past", "a query over an hour of archive by the driver's path and by Spark's: seconds, CPU-seconds, "
          "answers agreeing row by row", _past,
          (option("--hour-rates", type=positive(int), nargs="+", default=[200, 2_000],
                  help="readings a second in the archived hour (default 200 2000)"),)),
    Bench("joins", "the W-join against STEAM's nested-loop W-join at several input rates (rows per CPU-second, "
          "state), the probe order from the buffers' statistics against the written order, ten queries sharing one "
          "join against one and against ten joins (all three offline), and the "
          "hazmat plant's gas_spread view against its staged releases: precision, recall, alert latency", _joins,
          (option("--rates", type=positive(int), nargs="+", default=[50, 200, 800],
                  help="rows a second of each of the three inputs (default 50 200 800)"),
           option("--hazmat-duration", type=bounded(float, 0), default=240.0,
                  help="seconds the hazmat plant runs live for the gas-spread view's alert latency "
                       "(default 240; 0: offline only)"))),
)


def named(name: str) -> Bench:
    return next(b for b in BENCHES if b.name == name)
