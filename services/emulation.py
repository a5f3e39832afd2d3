"""A topology's emulated world: the scenario it names, and the receptors the MDR registers for it
(the topology's own, plus every reader and mote the scenario emulates)."""

from __future__ import annotations

import os

from edge.scenario import Scenario, ScenarioError, load_scenario, scenario_from_spec
from glue.topology import ReceptorSpec, Topology


def scenario_of(topology: Topology, start_ms: int, seed: int | None = None) -> Scenario:
    """The scenario a topology names: a file (relative to the topology's) or an inline mapping."""
    spec = topology.scenario
    if isinstance(spec, str):
        return load_scenario(os.path.join(os.path.dirname(topology.source), spec), start_ms, seed)
    try:
        return scenario_from_spec(spec, start_ms, seed, os.path.dirname(topology.source))
    except ScenarioError as exc:
        raise ScenarioError(f"{topology.source}, scenario: {exc}") from None


def receptors_for(topology: Topology, scenario: Scenario) -> list[ReceptorSpec]:
    """The receptors the MDR knows: the topology's (with their areas and positions), plus every
    emulated reader and mote the topology does not list (Intel Lab replay motes are not listed:
    their ids come from the data). An emulated receptor on a node that is not an edge node, or on
    another node or location than the topology says, is an error."""
    listed = {r.id: r for r in topology.receptors}
    emulated = [(r.receptor_id, "rfid", r.edge_node, r.location, 0.0, 0.0) for r in scenario.readers]
    emulated += [(m.receptor_id, "mote", m.edge_node, "", m.x, m.y) for m in scenario.motes]
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
