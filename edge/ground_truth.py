"""What really happened during a receptor agent's run (edge.agent): its truth.jsonl lines. Pure.

The scenario's fault plan first, then per tick the tags that appeared (EPC, kind, parent) and
moved, every sampled mote's true values and active fault, the faulty readers, and the events the
world and the environment staged (a fire, every person in its room while it burns).
"""

from __future__ import annotations

import heapq
from dataclasses import asdict
from typing import Any

from edge.intel_lab import Fault
from edge.scenario import Scenario
from edge.supply_chain import AWAY, SupplyChainWorld


def replay_receptor(mote_id: int) -> str:
    """The receptor id of an Intel Lab mote replayed.

    >>> replay_receptor(7)
    'lab-m7'
    """
    return f"lab-m{mote_id}"


class GroundTruth:
    """The truth of a run, tick by tick; it remembers what it already told (tags, positions,
    events, fires)."""

    def __init__(self, scenario: Scenario, world: SupplyChainWorld, tick_ms: int,
                 lab_faults: list[Fault]) -> None:
        self.scenario, self.world, self.tick_ms, self.lab_faults = scenario, world, tick_ms, lab_faults
        self._positions: dict[str, str] = {}
        self._events_seen = 0
        self._staged: list[tuple[int, int]] = []   # (time, index into world.events) not yet told
        self._tags_told = 0
        self._told_fires: set[tuple[int, str]] = set()

    def plan(self) -> dict[str, Any]:
        """The first line: the scenario and its fault plan."""
        s = self.scenario
        return {
            "scenario": s.name, "seed": s.seed, "cycle_ms": s.cycle_ms, "tick_ms": self.tick_ms,
            "reader_faults": [{"reader": r.receptor_id, **asdict(f)} for r in s.readers for f in r.faults],
            "mote_faults": [{"mote": m.receptor_id, **asdict(m.fault)} for m in s.motes if m.fault is not None],
            "replay_faults": [{"mote": replay_receptor(f.mote_id), **asdict(f)} for f in self.lab_faults],
            "fires": [asdict(f) for f in s.environment.fires],
            "gas_releases": [asdict(r) for r in s.environment.releases],
        }

    def line(self, t: int, motes: dict[str, dict[str, Any]]) -> dict[str, Any]:
        """The line of the tick at `t` (`motes`: each sampled mote's true values and fault)."""
        line: dict[str, Any] = {"t": t}
        tags = self.world.tags
        if len(tags) > self._tags_told:   # a repeating world ships new pallets as time goes on
            line["new_tags"] = {tag: {"epc": tags[tag].epc_hex, "kind": tags[tag].kind, "parent": tags[tag].parent}
                                for tag in list(tags)[self._tags_told:]}
            self._tags_told = len(tags)
        moves = []
        for tag in self.world.tags:
            where = self.world.location_of(tag, t)
            if self._positions.get(tag, AWAY) != where:
                moves.append([tag, where])
                self._positions[tag] = where
        if moves:
            line["moves"] = moves
        if motes:
            line["motes"] = motes
        faulty = sorted(r.receptor_id for r in self.scenario.readers if any(f.active(t) for f in r.faults))
        if faulty:
            line["faulty_readers"] = faulty
        new = self._world_events(t) + self.fire_events(t)
        if new:
            line["events"] = new
        return line

    def _world_events(self, t: int) -> list[dict[str, Any]]:
        """The world's events that happened by `t`, each once. The world stages them in shipping
        order, not time order: they are held until they happen."""
        for number in range(self._events_seen, len(self.world.events)):
            heapq.heappush(self._staged, (self.world.events[number].t_ms, number))
        self._events_seen = len(self.world.events)
        new = []
        while self._staged and self._staged[0][0] <= t:
            new.append(asdict(self.world.events[heapq.heappop(self._staged)[1]]))
        return new

    def fire_events(self, t: int) -> list[dict[str, Any]]:
        """A fire in a room when it starts, and every person in that room while it burns (once)."""
        events: list[dict[str, Any]] = []
        for number, fire in enumerate(self.scenario.environment.fires):
            if not fire.start_ms <= t < fire.end_ms:
                continue
            if (number, "") not in self._told_fires:
                self._told_fires.add((number, ""))
                events.append({"kind": "fire", "t_ms": t, "tag_id": "", "location": fire.location,
                               "x": fire.x, "y": fire.y})
            for person in self.world.people_at(fire.location, t) if fire.location else ():
                if (number, person) not in self._told_fires:
                    self._told_fires.add((number, person))
                    events.append({"kind": "person-in-danger", "t_ms": t, "tag_id": person,
                                   "location": fire.location})
        return events
