"""Scenario files (pure): the shipped ones load, groups expand, errors name the entry."""

import os

import pytest

from edge.scenario import ScenarioError, load_scenario, parse_scenario

SCENARIOS = os.path.join(os.path.dirname(__file__), "..", "deploy", "scenarios")


def test_the_shipped_scenarios_load():
    default = load_scenario(os.path.join(SCENARIOS, "supply-chain.yaml"), start_ms=1_000)
    assert [r.receptor_id for r in default.readers] == ["door1-r1", "door1-r2", "door2-r1", "door2-r2"]
    assert default.readers[1].faults[0].start_ms == 61_000 and len(default.readers[0].antennas) == 2
    assert default.motes[2].fault is not None and default.motes[2].fault.kind == "battery"
    assert default.world.missing_pallets == 1 and default.world.dwell_ms == 8_000 and default.world.repeat
    fan_in = load_scenario(os.path.join(SCENARIOS, "fan-in.yaml"))
    assert fan_in.receptors >= 1000 and len({r.receptor_id for r in fan_in.readers}) == 1000
    replay = load_scenario(os.path.join(SCENARIOS, "intel-lab.yaml"))
    assert replay.replay is not None and replay.replay.speed == 1800


def test_a_fire_repeats_every_so_often_as_many_times_as_it_says():
    fires = parse_scenario("fires: [{location: inbound-dock, x: 1, y: 2, start: 10 s, end: 15 s, every: 1 minute, "
                           "count: 3}]", start_ms=1000).environment.fires
    assert [(f.start_ms, f.end_ms, f.location) for f in fires] == [
        (11_000, 16_000, "inbound-dock"), (71_000, 76_000, "inbound-dock"), (131_000, 136_000, "inbound-dock")]


@pytest.mark.parametrize("text, message", [
    ("nonsense: 1", "unknown key(s): nonsense"),
    ('readers: [{id: "r{n}", count: 2, node: e, location: moon}]', "readers[0]: location 'moon' is not one of"),
    ("readers: [{id: r, count: 2, node: e, location: truck}]", "readers[0] (r): a group of 2 needs '{n}'"),
    ("readers: [{id: r, node: e, location: truck, read_rate: 2}]", "readers[0]: reader r: read_rate 2.0 is outside"),
    ("reader_faults: [{reader: ghost, kind: stop}]", "reader_faults name unknown readers: ghost"),
    ("motes: [{id: m, node: e}]\nmote_faults: [{mote: m, kind: melted}]", "mote_faults[0]: unknown fault kind"),
    ("world: {pallets: 0}", "world: pallets must be positive"),
    ("world: {colour: red}", "world:"),
    ("cycle: soon", "cycle:"),
    ("replay: {node: lab, fault_share: 1.5}", "replay: fault_share 1.5 is outside [0, 1]"),
    ("fires: [{location: attic, x: 0, y: 0, start: 1 s, end: 2 s}]", "fires[0]: location 'attic' is not one of"),
    ("fires: [{x: 0, y: 0, start: 1 s, end: 10 s, every: 5 s, count: 3}]",
     "fires[0]: count must be positive, and every at least a fire's length"),
    ("fires: [{x: 0, start: 1 s, end: 2 s}]", "fires[0]: needs 'y'"),
    # what would exhaust memory is one line too
    ('readers: [{id: "r{n}", count: 100000000, node: e, location: truck}]',
     "readers[0] (r{n}): count is a whole number from 1 to 100,000 (got '100000000')"),
    ("readers: [{id: r, node: e, location: truck, antennas: many}]", "readers[0]: antennas is a whole number from 1"),
    ("world: {pallets: 100000, items_per_case: 1000}", "make 200,300,000 tags a round, more than 1,000,000"),
    ("fires: [{x: 0, y: 0, start: 1 s, end: 2 s, every: 1 min, count: 1000000000}]",
     "fires[0]: count is a whole number from 1 to 10,000"),
    ("a: &a [x, x]\nb: [*a, *a]", "no YAML aliases"),
    ("a: " + "[" * 100 + "]" * 100, "nested more than 64 deep"),
])
def test_bad_scenarios_name_the_entry_and_the_problem(text, message):
    with pytest.raises(ScenarioError) as error:
        parse_scenario(text)
    assert message in str(error.value)


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(ScenarioError, match="nowhere.yaml: No such file"):
        load_scenario(str(tmp_path / "nowhere.yaml"))


def test_a_file_that_is_not_utf8_or_too_big_is_one_line(tmp_path):
    (tmp_path / "latin.yaml").write_bytes(b"name: caf\xe9\n")
    with pytest.raises(ScenarioError, match=r"latin.yaml: not UTF-8 text \(byte 0xe9 at offset 9\)"):
        load_scenario(str(tmp_path / "latin.yaml"))
    (tmp_path / "huge.yaml").write_text("# " + "x" * (4 << 20) + "\n")
    with pytest.raises(ScenarioError, match="huge.yaml: more than 4,194,304 bytes"):
        load_scenario(str(tmp_path / "huge.yaml"))


def test_every_shipped_topology_runs_a_scenario_that_agrees_with_its_receptors():
    from glue.topology import load_topology
    from services.emulation import receptors_for, scenario_of
    from services.paths import TOPOLOGIES

    for name in ("supply-chain.yaml", "deep.yaml", "regional.yaml"):
        topology = load_topology(os.path.join(TOPOLOGIES, name))
        scenario = scenario_of(topology, 0)
        receptors = {r.id: r for r in receptors_for(topology, scenario)}
        assert {r.receptor_id for r in scenario.readers} <= set(receptors), name
        assert all(receptors[r.receptor_id].location == r.location for r in scenario.readers), name
    default = load_topology(os.path.join(TOPOLOGIES, "supply-chain.yaml"))
    motes = [r for r in receptors_for(default, scenario_of(default, 0)) if r.kind == "mote"]
    assert [m.id for m in motes] == ["dock-m1", "dock-m2", "dock-m3", "dock-m4"] and motes[0].node == "door1"


@pytest.mark.parametrize("reader, message", [
    ("{id: door1-r1, node: door1, location: truck}", "receptor 'door1-r1': the scenario puts it on door1/truck, "
                                                     "the topology on door1/inbound-dock"),
    ("{id: x1, node: warehouse, location: truck}", "receptor 'x1' publishes to 'warehouse', which is not an edge"),
])
def test_a_scenario_that_contradicts_its_topology_is_refused(reader, message):
    from glue.topology import load_topology
    from services.emulation import receptors_for
    from services.paths import DEFAULT_TOPOLOGY

    topology = load_topology(DEFAULT_TOPOLOGY)
    with pytest.raises(ScenarioError) as error:
        receptors_for(topology, parse_scenario(f"readers: [{reader}]"))
    assert message in str(error.value)
