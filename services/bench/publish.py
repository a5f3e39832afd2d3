"""`hifi bench report FOLDER`: the result files of `hifi bench <name> --json` (services.bench.results)
turned into docs/benchmarks.md — per benchmark the newest run's table, its machine, commit and
date, a chart (matplotlib, docs/img/bench-<name>.png), the field's published figures beside ours
with their sources, and the earlier runs recorded. The charts read the figures; nothing is typed
in by hand but the anchors.
"""

from __future__ import annotations

import os
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from services.bench.registry import BENCHES
from services.bench.report import percentile

Point = tuple[Any, float | None]


@dataclass(frozen=True)
class Chart:
    title: str
    x: str
    y: str
    series: dict[str, list[Point]]   # name -> (category, value) bars


def _ms_to_s(values: list[float], q: float) -> float | None:
    value = percentile(values, q)
    return None if value is None else value / 1000


def _pipeline(f: dict) -> Chart:
    levels = f["levels"]
    return Chart("A reading to the first emit of its window, per level", "level", "seconds",
                 {f"p{q}": [(lv["level"], _ms_to_s(lv["reading_ms"], q)) for lv in levels] for q in (50, 95)})


def _sharing(f: list) -> Chart:
    return Chart("CPU per minute with N distinct queries", "queries", "CPU-seconds per minute",
                 {"hierarchy": [(s["queries"], s["cpu_s_per_min"]) for s in f],
                  "with broker and Redis": [(s["queries"], s["cpu_with_servers_s_per_min"]) for s in f]})


def _capacity(f: dict) -> Chart:
    return Chart("Readings a second: sustained by the node, and its own client's floors", "", "readings/s",
                 {"readings/s": [("node, lag flat", f["sustained"]), ("librdkafka fetch", f["fetch_rate"]),
                                 ("fetch + node's decode", f["decode_rate"])]})


def _fanin(f: dict) -> Chart:
    series = {"parent alone": [(p["children"], p["cores"]) for p in f["parent"]],
              "whole hierarchy": [(w["children"], w["cores"]) for w in f["whole"]]}
    return Chart("Cores by number of children", "children", "cores", {k: v for k, v in series.items() if v})


def _by_path(title: str, x: str, key: str) -> Callable[[list], Chart]:
    def chart(f: list) -> Chart:
        paths = sorted({run["path"] for run in f})
        return Chart(title, x, "seconds", {p: [(run[key], run["seconds"]) for run in f if run["path"] == p]
                                           for p in paths})
    return chart


def _latencies(title: str, rows: Callable[[Any], list], name: str) -> Callable[[Any], Chart]:
    def chart(f: Any) -> Chart:
        return Chart(title, name, "seconds", {q: [(r["name"], None if r[f"{q}_ms"] is None else r[f"{q}_ms"] / 1000)
                                                  for r in rows(f)] for q in ("p50", "p95")})
    return chart


def _chaos(f: list) -> Chart:
    return Chart("Seconds until results flow again, per fault", "fault", "seconds",
                 {"back after": [(fault["fault"], fault["back_s"]) for fault in f]})


def _lag(f: list) -> Chart:
    return Chart("Window end to the core's emit", "plan, slide", "seconds",
                 {"end to end": [(f"{r['mode']} {r['slide_s']:g} s", None if r["end_to_end_ms"] is None
                                  else r["end_to_end_ms"] / 1000) for r in f]})


def _events(f: list) -> Chart:
    return Chart("Detections right and staged events found", "kind", "share",
                 {"precision": [(k["kind"], k["right"] / k["detected"] if k["detected"] else None) for k in f],
                  "recall": [(k["kind"], k["found"] / k["staged"] if k["staged"] else None) for k in f]})


def _planning(f: dict) -> Chart:
    p = f["planning"]
    return Chart(f"Planning one query ({p['nodes']} nodes, {p['views']} views)", "", "ms",
                 {"ms": [("p50", p["p50_ms"]), ("p95", p["p95_ms"]), ("max", p["max_ms"])]})


def _idle(f: dict) -> Chart:
    return Chart("Cores of an idle edge and core", "", "cores", {"cores": [("idle", f["cores"])]})


def _cleaning(f: dict) -> Chart:
    rows = f["presence"]
    return Chart("Presence errors over the best fixed window's (chosen in hindsight), per setting", "setting",
                 "errors / best fixed window's",
                 {"adaptive": [(r["setting"], r["adaptive_errors"] / r["best_fixed_errors"]) for r in rows],
                  "oracle (each tag its best window)": [(r["setting"], r["oracle_errors"] / r["best_fixed_errors"])
                                                        for r in rows]})


CHARTS: dict[str, Callable[[Any], Chart]] = {
    "pipeline": _pipeline, "sharing": _sharing, "capacity": _capacity, "fanin": _fanin,
    "batches": _by_path("A backlog drained, by path", "readings", "backlog"),
    "past": _by_path("A query over an archived hour, by path", "readings/s in the hour", "rate"),
    "triage": _latencies("Latency per load", lambda f: f["loads"], "load"),
    "priority": _latencies("Alert latency per phase", lambda f: f["phases"], "phase"),
    "chaos": _chaos, "lag": _lag, "events": _events, "planning": _planning, "idle": _idle, "cleaning": _cleaning,
}

# The field's published figures a reader compares ours with (what, and where it was published).
ANCHORS: dict[str, list[tuple[str, str]]] = {
    "capacity": [
        ("General stream slicing: ~1.85 M events/s per core, flat from 1 to 80 concurrent windows",
         "Scotty (TU Berlin), scotty-window-processor: its published evaluation"),
        ("Flink's own window operator in the same evaluation: falls to ~30 k events/s at 80 windows",
         "Scotty (TU Berlin), scotty-window-processor: its published evaluation")],
    "sharing": [
        ("300 rules sharing one source on 2 cores", "LF Edge eKuiper: its published benchmark"),
        ("Aggregation shared across thousands of concurrent queries", "Desis; ISQM: their papers")],
}


def chart_png(chart: Chart, path: str) -> None:
    """Grouped bars, a group per category, a bar per series; missing values left out."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    categories = list(dict.fromkeys(str(x) for points in chart.series.values() for x, _ in points))
    width = 0.8 / max(len(chart.series), 1)
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for i, (name, points) in enumerate(chart.series.items()):
        values = {str(x): y for x, y in points if y is not None}
        xs = [j + i * width for j, c in enumerate(categories) if c in values]
        ax.bar(xs, [values[c] for c in categories if c in values], width, label=name)
    ax.set_xticks([j + width * (len(chart.series) - 1) / 2 for j in range(len(categories))],
                  [textwrap.fill(c, 18) for c in categories], fontsize=8)
    ax.set_title(chart.title)
    ax.set_xlabel(chart.x)
    ax.set_ylabel(chart.y)
    if len(chart.series) > 1:
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def newest_of_each_form(runs: list[dict]) -> list[dict]:
    """The newest run of each command line (a bench run two ways, e.g. capacity locally and on a
    cluster, shows both), oldest first.

    >>> runs = [{"argv": ["capacity"], "date": "1"}, {"argv": ["capacity", "--spark-cluster"], "date": "2"},
    ...         {"argv": ["capacity"], "date": "3"}]
    >>> [r["date"] for r in newest_of_each_form(runs)]
    ['2', '3']
    """
    newest = {" ".join(run["argv"]): run for run in runs}
    return sorted(newest.values(), key=lambda r: r["date"])


def _chart_lines(name: str, run: dict, n: int, images: str, docs: str) -> list[str]:
    """The chart of one run (a result of an older shape has none), beside its own table: a bench
    shown two ways (capacity locally and on a cluster) has a chart for each, never one run's chart
    above the other's table."""
    try:
        chart = CHARTS[name](run["figures"])
    except (KeyError, TypeError, IndexError):
        return []
    if chart is None:
        return []
    file = f"bench-{name}{'' if n == 0 else f'-{n + 1}'}.png"
    chart_png(chart, os.path.join(images, file))
    return [f"![{chart.title}]({os.path.relpath(images, docs)}/{file})", ""]


def _section(name: str, summary: str, runs: list[dict], images: str, docs: str) -> list[str]:
    shown = newest_of_each_form(runs)
    lines = [f"## {name}", "", summary, ""]
    for n, run in enumerate(shown):
        m = run["machine"]
        changed = " (with uncommitted changes)" if run["dirty"] else ""
        how = f"{m['cores']} cores, {m['memory_gb']} GB, {m['cpu']}; `hifi bench {' '.join(run['argv'])}`"
        lines += [f"{'Run' if len(shown) > 1 else 'Newest run'}: {run['date']}, commit `{run['commit'][:10]}`"
                  f"{changed}, {how}", ""]
        if name in CHARTS:
            lines += _chart_lines(name, run, n, images, docs)
        lines += ["```text", run["text"].rstrip(), "```", ""]
    if name in ANCHORS:
        lines += ["| beside it, published | source |", "|---|---|"]
        lines += [f"| {what} | {source} |" for what, source in ANCHORS[name]] + [""]
    earlier = [r for r in runs if r not in shown]
    if earlier:
        lines += ["Earlier runs: " + ", ".join(f"{r['date'][:10]} (`{r['commit'][:10]}`)" for r in earlier), ""]
    return lines


def report(results: list[dict], out: str, folder: str) -> list[str]:
    """Write `out` (and its charts beside it under img/) from `results`; the benches written."""
    docs = os.path.dirname(os.path.abspath(out))
    images = os.path.join(docs, "img")
    os.makedirs(images, exist_ok=True)
    lines = ["# Benchmarks", "",
             f"Generated by `hifi bench report {folder}` from the result files there (`hifi bench <name> --json "
             "FILE`): do not edit by hand. Every figure is the one the code at the named commit printed, on "
             "the machine named; compare figures as ratios within one run (the machine is shared and noisy). "
             "The dated history of earlier figures, with what changed between them: "
             "[benchmark history](benchmark-history.md).", ""]
    written, missing = [], []
    for bench in BENCHES:
        runs = [r for r in results if r["bench"] == bench.name]
        if runs:
            lines += _section(bench.name, bench.summary, runs, images, docs)
            written.append(bench.name)
        else:
            missing.append(bench.name)
    if missing:
        lines += ["## Not yet recorded", "",
                  "No result file for: " + ", ".join(f"`{n}`" for n in missing) +
                  f". Record one with `hifi bench <name> --json {folder}/<name>-<date>.json`.", ""]
    with open(out, "w") as fh:
        fh.write("\n".join(lines))
    return written
