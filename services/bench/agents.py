"""`hifi bench agents`: how fast one agent process emulates and publishes a scenario.

Two runs on the embedded (or HIFI_*) broker, both writing readings.jsonl and truth.jsonl as a real
run does: flat out (no pacing: the most scenario time the process can publish per wall second,
the real-time factor) and paced in real time (does it keep up: how many ticks went out late, and by how much).
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable

from edge.agent import AgentStats, ReceptorAgent
from edge.scenario import Scenario
from services.bench.report import figures_table
from services.embedded import embedded_or_external
from services.hierarchy import next_whole_second


def _run(make: Callable[[int], Scenario], bootstrap: str, duration_s: float, speed: float) -> ReceptorAgent:
    scenario = make(next_whole_second(int(time.time() * 1000)))
    with tempfile.TemporaryDirectory(prefix="hifi-bench-agents-") as out:
        agent = ReceptorAgent(scenario, bootstrap, out, speed)
        agent.run(duration_s)
        return agent


def run_agents_bench(make: Callable[[int], Scenario], duration_s: float, progress: Callable[[str], None]) -> str:
    scenario = make(0)
    with embedded_or_external() as servers:
        progress(f"scenario {scenario.name!r}: {len(scenario.readers)} readers and {len(scenario.motes)} motes; "
                 f"{duration_s:.0f} scenario seconds flat out")
        agent = _run(make, servers.bootstrap, duration_s, 0)
        progress(f"{duration_s:.0f} s in real time")
        flat, paced = agent.stats, _run(make, servers.bootstrap, duration_s, 1.0).stats
    scenario_s = (flat.stopped_ms - flat.started_ms) / 1000

    def rate(count: int, stats: AgentStats) -> str:
        return f"{count / max(stats.wall_s, 1e-9):,.0f}/s"

    return figures_table([
        ("receptors", f"{agent.receptors} ({len(scenario.readers)} RFID readers, "
                      f"{len(scenario.motes) + agent.replay_motes} motes)"),
        ("flat out: real-time factor", f"{scenario_s / max(flat.wall_s, 1e-9):.2f}x "
                                       f"({scenario_s:.0f} scenario s in {flat.wall_s:.1f} wall s)"),
        ("flat out: read cycles", rate(flat.cycles, flat)),
        ("flat out: tag reads", rate(flat.readings, flat)),
        ("flat out: mote samples", rate(flat.samples, flat)),
        ("flat out: messages", f"{rate(flat.messages, flat)} "
                               f"({flat.payload_bytes / max(flat.wall_s, 1e-9) / 1e6:.2f} MB/s)"),
        ("real time: tag reads", rate(paced.readings, paced)),
        ("real time: ticks late", f"{paced.late_ticks} of {paced.ticks} more than a tick late, "
                                  f"the latest by {paced.max_late_ms} ms"),
    ])
