"""A topology's emulated world: the scenario it names, and the receptors the MDR registers for it
(the topology's own, plus every reader and mote the scenario emulates)."""

from __future__ import annotations

import os

from edge.scenario import Scenario, ScenarioError, load_scenario, scenario_from_spec
from glue.operators import CALIBRATED
from glue.topology import ReceptorSpec, RelationSpec, Topology, load_topology


def scenario_of(topology: Topology, start_ms: int, seed: int | None = None) -> Scenario:
    """The scenario a topology names: a file (relative to the topology's) or an inline mapping."""
    spec = topology.scenario
    if isinstance(spec, str):
        return load_scenario(os.path.join(os.path.dirname(topology.source), spec), start_ms, seed)
    try:
        return scenario_from_spec(spec, start_ms, seed, os.path.dirname(topology.source))
    except ScenarioError as exc:
        raise ScenarioError(f"{topology.source}, scenario: {exc}") from None


def agent_scenario(scenario_file: str | None, topology_file: str | None, start_ms: int,
                   seed: int | None = None) -> Scenario:
    """What an agent runs: the scenario file if given, else the topology's scenario."""
    if scenario_file:
        return load_scenario(scenario_file, start_ms, seed)
    return scenario_of(load_topology(topology_file), start_ms, seed)


def receptors_for(topology: Topology, scenario: Scenario) -> list[ReceptorSpec]:
    """The receptors the MDR knows: the topology's (with their areas and positions), plus every
    emulated reader and mote the topology does not list (Intel Lab replay motes are not listed:
    their ids come from the data). An emulated receptor on a node that is not an edge node, or on
    another node or location than the topology says, is an error."""
    listed = {r.id: r for r in topology.receptors}
    emulated = [(r.receptor_id, "rfid", r.edge_node, r.location, 0.0, 0.0) for r in scenario.readers]
    emulated += [(m.receptor_id, "mote", m.edge_node, m.location, m.x, m.y) for m in scenario.motes]
    edge = set(topology.edge_nodes())
    receptors = list(topology.receptors)
    for rid, kind, node, location, x, y in emulated:
        if node not in edge:
            raise ScenarioError(f"receptor {rid!r} publishes to {node!r}, which is not an edge node of "
                                f"topology {topology.name!r}")
        known = listed.get(rid)
        if known is None:
            receptors.append(ReceptorSpec(rid, kind, node, location or node, "", x, y, {}))
        elif known.node != node or (location and known.location != location):
            raise ScenarioError(f"receptor {rid!r}: the scenario puts it on {node}/{location or '-'}, "
                                f"the topology on {known.node}/{known.location}")
    return receptors


def relation_rows(relation: RelationSpec, receptors: list[ReceptorSpec], scenario: Scenario) -> list[tuple]:
    """A static relation's rows: those the topology lists, plus those derived from the emulated
    world (receptor_locations from every receptor, a mote's location its room or else its node's
    name; mote_positions and mote_calibration from the motes)."""
    rows = list(relation.rows)
    if relation.name == "receptor_locations":
        rows += [(r.id, r.location) for r in receptors]
    if relation.name == "mote_positions":
        rows += [(r.id, float(r.x), float(r.y)) for r in receptors if r.kind == "mote"]
    if relation.name == "mote_calibration":   # the emulated motes' calibration offsets, as a survey found them
        rows += [(m.receptor_id, *(float(m.offset.get(q, 0.0)) for q in CALIBRATED)) for m in scenario.motes]
    return rows
