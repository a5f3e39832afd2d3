"""`hifi bench triage`: one edge node fed 1x, 3x and 10x the rate it sustains exactly, with Data
Triage (dsp.triage) keeping its latency, then 1x again (exact again, no restart).

The one-edge hierarchy with the edge's `latency_target` set; an approximate count per receptor
and antenna over 2 s windows placed at the edge (`[range by '2 seconds', approximate]`). First a
ramp finds 1x: the rate doubles from --rate (20 s a step) until the node triages a window; 1x is
the last rate it answered exactly. A publisher process (services.bench.publisher) stamps read
cycles of READS_PER_CYCLE tags with the time they are sent, at each phase's rate, and tallies
what it sent per window, receptor and antenna: the exact count, known without the node (a
reading lost or doubled at intake shows). Per phase: readings/s published, the windows' latency
(emission minus window end) p50/p95, the share of windows triaged, and for those the relative
error of the count against the exact count, and the share of windows whose error is within the
stated bound. Untriaged windows must equal the exact count: the bench says how many do not (it
should be none).
"""

from __future__ import annotations

import multiprocessing
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace

from services.bench.publisher import Cycle, publish
from services.bench.report import figures_table, percentile
from services.bench.runtime import one_edge_topology
from wire.codec import TagObservation

WINDOW_MS = 2_000
QUERY = ("SELECT receptor_id, antenna, count(*) AS n FROM rfid_stream [range by '2 seconds', approximate] "
         "GROUP BY receptor_id, antenna")
RAMP_S = 20.0
READS_PER_CYCLE = 50
LOADS = (("1x", 1), ("3x", 3), ("10x", 10), ("1x again", 1))


@dataclass(frozen=True)
class LoadFigures:
    name: str
    asked_per_s: float
    published_per_s: float        # below asked: more than the publisher could send on this machine
    windows: int
    p50_ms: float | None
    p95_ms: float | None
    triaged: int
    median_error: float | None    # relative, triaged windows
    p95_error: float | None
    within_bound: float | None    # share of triaged windows whose error is within their bound
    wrong_exact: int              # untriaged windows that differ from the exact count


def cycles(receptors: list[str]) -> list[Cycle]:
    """The read cycles the publisher sends round: READS_PER_CYCLE valid reads each."""
    reads = [[TagObservation(f"urn:epc:id:sgtin:0614141.812345.{(i * 7 + j) % 2000}", 1 + j % 2, 0.6)
              for j in range(READS_PER_CYCLE)] for i in range(64)]
    return [(receptors[i % len(receptors)], reads[i % 64]) for i in range(64 * len(receptors))]


def run_triage_bench(rate: float, seconds: float, latency_target_ms: int,
                     progress: Callable[[str], None]) -> tuple[list[LoadFigures], list[LoadFigures]]:
    """(the ramp that found 1x, the loads)."""
    from services.embedded import embedded_or_external
    from services.hierarchy import Hierarchy, follow_results
    from wire.topics import raw_topic

    topology = one_edge_topology()
    edge = topology.edge_nodes()[0]
    topology.nodes = {n: replace(s, latency_target_ms=latency_target_ms) if n == edge else s
                      for n, s in topology.nodes.items()}
    topic = raw_topic(edge)
    sent_round = cycles([r.id for r in topology.receptors_of(edge)])
    windows: list[dict] = []
    exact: Counter = Counter()   # the publisher's own tally of what it sent: the truth
    spans: list[tuple[str, float, float, int, int]] = []   # (load, readings/s asked, published, from ms, to ms)
    with embedded_or_external() as servers:
        hierarchy = Hierarchy(topology, servers.redis_url, servers.bootstrap)
        stop = threading.Event()
        try:
            hierarchy.start(progress)
            assert hierarchy.placement is not None
            plan = hierarchy.placement.submit(QUERY)
            threading.Thread(target=follow_results, daemon=True,
                             args=(servers.bootstrap, [plan.result_topic], stop,
                                   lambda _, row: windows.append(row))).start()
            with multiprocessing.get_context("spawn").Pool(1) as pool:

                def load(name: str, per_s: float, duration_s: float) -> None:
                    progress(f"{name}: {per_s:,.0f} readings/s for {duration_s:.0f} s")
                    start_ms = int(time.time() * 1000)
                    sent = pool.apply(publish, (servers.bootstrap, topic, sent_round, per_s, duration_s, 0.0,
                                                WINDOW_MS))
                    exact.update(sent.tally)
                    spans.append((name, per_s, sent.readings / duration_s, start_ms, int(time.time() * 1000)))

                def closed(name: str) -> list[dict]:
                    """The load's windows, once the next load's readings have closed them."""
                    time.sleep(2 * WINDOW_MS / 1000 + 1)
                    low, high = next((low, high) for n, _, _, low, high in spans if n == name)
                    return _inside(windows, low, high)

                base = step = rate
                while True:   # the ramp: double until a window is triaged or the publisher falls short
                    load(f"ramp {step:,.0f}/s", step, RAMP_S)
                    closing = pool.apply_async(publish, (servers.bootstrap, topic, sent_round, step, 5.0, 0.0,
                                                         WINDOW_MS))   # closes them
                    found = closed(spans[-1][0])
                    exact.update(closing.get().tally)
                    if any(w["triaged"] for w in found) or spans[-1][2] < 0.9 * step:
                        break
                    base, step = step, 2 * step
                ramp = len(spans)
                for name, times in LOADS:   # back to back: each load's readings close the windows before
                    load(name, base * times, seconds)
                load("the last windows closing", base, 2 * WINDOW_MS / 1000 + 1)
            progress(f"the edge left {int(hierarchy.mdr.stats(edge).get('triaged', 0)):,} records undecoded")
        finally:
            stop.set()
            hierarchy.stop()
    figures = [_figures(name, asked, sent, _inside(windows, low, high), exact)
               for name, asked, sent, low, high in spans]
    return figures[:ramp], figures[ramp:-1]


def _inside(windows: list[dict], low: int, high: int) -> list[dict]:
    """The windows wholly inside a load but its first (the load before may still be draining)."""
    return [w for w in list(windows) if low + WINDOW_MS <= _ms(w["window_start"]) and _ms(w["window_end"]) <= high]


def _figures(name: str, asked: float, sent: float, mine: list[dict], exact: Counter) -> LoadFigures:
    def truth(w: dict) -> int:
        return exact[_ms(w["window_start"]), w["receptor_id"], w["antenna"]]

    latency = [w["_emitted_ms"] - _ms(w["window_end"]) for w in mine]
    triaged = [w for w in mine if w["triaged"]]
    errors = [abs(w["n"] - truth(w)) for w in triaged]
    relative = [e / max(1, truth(w)) for e, w in zip(errors, triaged, strict=True)]
    within = sum(e <= w["error_bound"] for e, w in zip(errors, triaged, strict=True))
    wrong = sum(w["n"] != truth(w) for w in mine if not w["triaged"])
    return LoadFigures(name, asked, sent, len(mine), percentile(latency, 50), percentile(latency, 95), len(triaged),
                       percentile(relative, 50), percentile(relative, 95),
                       within / len(triaged) if triaged else None, wrong)


def _ms(value) -> int:
    return int(value.timestamp() * 1000)


def triage_table(ramp: list[LoadFigures], figures: list[LoadFigures], latency_target_ms: int) -> str:
    def pct(value: float | None) -> str:
        return "n/a" if value is None else f"{100 * value:.1f} %"

    def secs(value: float | None) -> str:
        return "n/a" if value is None else f"{value / 1000:.2f} s"

    rows = [("edge latency target", f"{latency_target_ms / 1000:g} s; query: {QUERY}")]
    rows += [(f.name, f"{f.published_per_s:,.0f} readings/s published; {f.triaged} of {f.windows} windows triaged")
             for f in ramp]
    for f in figures:
        share = f.triaged / f.windows if f.windows else None
        short = f" of {f.asked_per_s:,.0f} asked: more than this machine could publish" \
            if f.published_per_s < 0.9 * f.asked_per_s else ""
        rows += [(f"{f.name}: published", f"{f.published_per_s:,.0f} readings/s{short}"),
                 (f"{f.name}: latency", f"p50 {secs(f.p50_ms)}, p95 {secs(f.p95_ms)} ({f.windows} windows)"),
                 (f"{f.name}: triaged", f"{f.triaged} windows ({pct(share)}); their count's error p50 "
                                        f"{pct(f.median_error)}, p95 {pct(f.p95_error)}; within the stated bound "
                                        f"{pct(f.within_bound)}"),
                 (f"{f.name}: exact windows", f"{f.windows - f.triaged - f.wrong_exact} equal the exact count, "
                                              f"{f.wrong_exact} differ")]
    return figures_table(rows)
