"""The receptor agent against the real broker: what it logs is exactly what it published, sample
batches travel beside read cycles, faults and the world's moves are in the ground truth, and a
seed makes a run repeatable."""

from __future__ import annotations

import pytest

from edge.agent import ReceptorAgent, read_jsonl, tag_locations
from edge.intel_lab import INTEL_LAB_DATA
from edge.scenario import parse_scenario
from edge.supply_chain import SupplyChainWorld
from tests.conftest import topic_records
from wire.codec import decode_read_cycle, decode_sensor_batch, is_sensor_batch
from wire.topics import raw_topic

START_MS = 1_800_000_000_000   # a fixed anchor: runs with one seed are then byte-for-byte equal

SCENARIO = """
name: agent-test
seed: 4
cycle: 200 ms
world: {pallets: 2, arrival_gap: 2 seconds, dwell: 2 seconds, repeat: true, people: 6, people_dwell: 1 second,
        shelf: 2 seconds, shoplifting_share: 0.5, missing_pallets: 1}
fires:
  - {location: inbound-dock, x: 0, y: 0, start: 1 second, end: 4 seconds}
readers:
  - {id: "t{run}-in{n}", count: 2, node: "t{run}-a", location: inbound-dock, ghost_rate: 0.2, overlap: 0.3,
     neighbours: [warehouse-shelf]}
  - {id: "t{run}-shelf1", node: "t{run}-b", location: warehouse-shelf}
reader_faults:
  - {reader: "t{run}-shelf1", kind: stop, start: 1 second, end: 3 seconds}
motes:
  - {id: "t{run}-m{n}", count: 3, node: "t{run}-a", period: 500 ms}
mote_faults:
  - {mote: "t{run}-m2", kind: fail-stop, start: 2 seconds}
  - {mote: "t{run}-m3", kind: battery, start: 1 second}
"""


def _run(bootstrap: str, out_dir: str, run: str, seconds: float = 16.0) -> ReceptorAgent:
    scenario = parse_scenario(SCENARIO.replace("{run}", run), START_MS)
    agent = ReceptorAgent(scenario, bootstrap, out_dir, speed=0)
    agent.run(seconds)
    return agent


@pytest.fixture(scope="module")
def published(servers, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("agent"))
    agent = _run(servers.bootstrap, out, "1")
    return agent, read_jsonl(agent.readings_path), read_jsonl(agent.truth_path)


def test_the_readings_log_is_exactly_what_was_published(servers, published):
    agent, logged, _ = published
    records = {(topic, record.key.decode()): record
               for topic in (raw_topic("t1-a"), raw_topic("t1-b"))
               for record in topic_records(servers.bootstrap, topic)}
    assert len(records) == len(logged) == agent.stats.messages
    for line in logged:
        record = records[(line["topic"], line["key"])]
        if "reads" in line:
            assert not is_sensor_batch(record.headers)
            rows = decode_read_cycle(record.value, 0, 0, line["t"])   # as fast as possible: arrival is its time
            assert [[r[1], r[2], r[3]] for r in rows] == line["reads"]
            assert all(r[0] == line["receptor"] and int(r[4].timestamp() * 1000) == line["t"] for r in rows)
        else:
            assert is_sensor_batch(record.headers)
            assert [s.__dict__ for s in decode_sensor_batch(record.value)] == line["samples"]


def test_readers_see_the_world_and_faults_silence_what_they_should(published):
    agent, logged, _ = published
    cycles = [line for line in logged if "reads" in line]
    world = SupplyChainWorld(agent.scenario.world)
    for line in cycles:
        assert line["present"] == world.tags_at(line["location"], line["t"])
        kinds = dict(zip((r[0] for r in line["reads"]), line["kinds"], strict=True))
        assert all(kinds[tag] == "" for tag in kinds if tag in line["present"])
    assert {line["kinds"][i] for line in cycles for i in range(len(line["reads"]))} >= {"", "ghost", "overlap"}
    people = {tag for tag, info in world.tags.items() if info.kind == "person"}
    assert len(people) == 6 and people & {r[0] for line in cycles for r in line["reads"]}, "badges are read too"
    stopped = {line["t"] - START_MS for line in cycles if line["receptor"] == "t1-shelf1"}
    assert stopped and not any(1000 <= t < 3000 for t in stopped)
    samples = [s for line in logged if "samples" in line for s in line["samples"]]
    m2 = [s["timestamp_ms"] - START_MS for s in samples if s["receptor_id"] == "t1-m2"]
    assert m2 and max(m2) < 2000, "a fail-stop mote falls silent"
    m3 = {s["timestamp_ms"] - START_MS: s["values"] for s in samples if s["receptor_id"] == "t1-m3"}
    assert m3[4500]["temperature"] > m3[500]["temperature"] + 3 and m3[4500]["voltage"] < m3[500]["voltage"], \
        "a dying battery: voltage sags while the temperature climbs"


def test_the_truth_holds_the_fault_plan_moves_and_mote_values(published):
    agent, _, truth = published
    plan = truth[0]["plan"]
    assert [f["reader"] for f in plan["reader_faults"]] == ["t1-shelf1"]
    assert {f["mote"]: f["kind"] for f in plan["mote_faults"]} == {"t1-m2": "fail-stop", "t1-m3": "battery"}
    world = SupplyChainWorld(agent.scenario.world)
    replayed = list(tag_locations(truth))
    assert len(replayed) == agent.stats.ticks
    for t, where in replayed:
        world.advance_to(t)
        assert where == {tag: loc for tag in world.tags if (loc := world.location_of(tag, t)) != "away"}
    m2 = [line["motes"]["t1-m2"] for line in truth if "t1-m2" in line.get("motes", {})]
    silent = len(range(2000, agent.stats.stopped_ms - START_MS, 500))
    assert [m["fault"] for m in m2].count("fail-stop") == silent, "silent samples are still in the truth"
    assert all(line.get("faulty_readers") == ["t1-shelf1"] for line in truth[1:]
               if 1000 <= line["t"] - START_MS < 3000)
    assert sum(len(line.get("new_tags", {})) for line in truth) == len(world.tags)


def test_each_staged_event_is_in_the_truth_once_when_it_happens(published):
    agent, _, truth = published
    told = [(e["kind"], e["tag_id"], e["t_ms"]) for line in truth for e in line.get("events", ())
            if e["kind"] in ("shoplifting", "pallet-missing")]
    world = SupplyChainWorld(agent.scenario.world)
    world.advance_to(agent.stats.stopped_ms)
    staged = [(e.kind, e.tag_id, e.t_ms) for e in world.events if e.t_ms < agent.stats.stopped_ms]
    assert {kind for kind, _, _ in staged} == {"shoplifting", "pallet-missing"}
    assert len(told) == len(set(told)) and sorted(told, key=str) == sorted(staged, key=str)


def test_a_fire_puts_the_people_in_its_room_in_danger(published):
    agent, _, truth = published
    events = [e for line in truth for e in line.get("events", ())]
    assert [(e["t_ms"] - START_MS, e["location"]) for e in events if e["kind"] == "fire"] == [(1000, "inbound-dock")]
    world = SupplyChainWorld(agent.scenario.world)
    ticks = range(START_MS + 1000, START_MS + 4000, agent.tick_ms)
    in_room = {p for t in ticks for p in world.people_at("inbound-dock", t)}
    in_danger = [e["tag_id"] for e in events if e["kind"] == "person-in-danger"]
    assert in_room and sorted(in_danger) == sorted(in_room)
    heated = [line["motes"]["t1-m1"]["true"]["temperature"] for line in truth
              if "t1-m1" in line.get("motes", {}) and 1000 <= line["t"] - START_MS < 4000]
    assert heated and min(heated) > 60, "the mote at the fire reads its heat as the truth"


def test_one_seed_one_run(servers, published, tmp_path):
    agent, logged, truth = published
    again = _run(servers.bootstrap, str(tmp_path), "1")
    assert read_jsonl(again.readings_path) == logged
    assert read_jsonl(again.truth_path) == truth


def test_the_intel_lab_replay_is_published_with_its_faults_in_the_truth(servers, tmp_path):
    scenario = parse_scenario(f"name: lab\nseed: 3\nreplay: {{data: {INTEL_LAB_DATA}, node: t3-lab, speed: 1800, "
                              f"fault_share: 0.2}}", START_MS)
    agent = ReceptorAgent(scenario, servers.bootstrap, str(tmp_path), speed=0)
    agent.run(3.0)   # three 30-minute steps
    batches = [line for line in read_jsonl(agent.readings_path) if "samples" in line]
    assert [line["t"] - START_MS for line in batches] == [0, 1000, 2000]
    assert all(line["topic"] == raw_topic("t3-lab") for line in batches)
    truth = read_jsonl(agent.truth_path)
    assert len(truth[0]["plan"]["replay_faults"]) == 10
    sampled = {mote for line in truth[1:] for mote in line.get("motes", {})}
    assert len(sampled) == 50 and all(m.startswith("lab-m") for m in sampled)
    published = {s["receptor_id"] for line in batches for s in line["samples"]}
    assert published <= sampled and len(published) >= 40


def test_a_paced_agent_never_publishes_a_reading_before_its_time(servers, tmp_path):
    import time

    start_ms = (int(time.time() * 1000) // 1000 + 1) * 1000
    run = f"p{start_ms}"   # topics of their own: keys repeat from run to run
    scenario = parse_scenario(SCENARIO.replace("{run}", run), start_ms)
    agent = ReceptorAgent(scenario, servers.bootstrap, str(tmp_path), speed=1.0)
    agent.run(1.5)
    records = topic_records(servers.bootstrap, raw_topic(f"t{run}-a"))
    stamped = {record.key.decode(): record.timestamp for record in records}
    logged = [line for line in read_jsonl(agent.readings_path) if line["node"] == f"t{run}-a"]
    assert len(logged) == len(stamped) > 10
    assert all(stamped[line["key"]] >= line["t"] for line in logged), "published ahead of its timestamp"


def test_the_motes_obey_their_proxys_newest_settings_within_two_cycles_and_refuse_malformed_ones(servers, tmp_path):
    import threading
    import time

    from wire.kafka import producers
    from wire.receptor_settings import ALWAYS, NEVER, ReceptorSettings
    from wire.topics import control_topic

    start_ms = (int(time.time() * 1000) // 1000 + 1) * 1000
    run = f"c{start_ms}"
    node = f"t{run}-a"
    scenario = parse_scenario(SCENARIO.replace("{run}", run), start_ms)
    agent = ReceptorAgent(scenario, servers.bootstrap, str(tmp_path), speed=1.0)
    running = threading.Thread(target=agent.run, args=(4.0,))
    running.start()
    time.sleep(max(0.0, start_ms / 1000 + 1.5 - time.time()))
    told = ReceptorSettings(node, 5, int(time.time() * 1000), {
        f"t{run}-m1": ((("temperature", ">", 1000.0),),), f"t{run}-m2": NEVER, f"t{run}-m3": ALWAYS},
        {f"t{run}-m3": ("humidity",)})
    producer = producers.make_producer(servers.bootstrap)
    topic = control_topic(node)
    sent = [producer.send(topic, key=b"x", value=b"\xff\xff not settings"),                         # refused
            producer.send(topic, *reversed(ReceptorSettings("other", 9, 0, {}).encode())),       # not its node's
            producer.send(topic, key=told.encode()[0], value=told.encode()[1])]
    producers.deliver(producer, sent)
    published_ms = int(time.time() * 1000)
    producer.close()
    running.join()
    batches = [line for line in read_jsonl(agent.readings_path) if "samples" in line and line["node"] == node]
    obeyed = [line for line in batches if line.get("settings_version") == 5]
    cycles = 2 * scenario.cycle_ms   # the bound: within two (read) cycles
    late = [line["t"] for line in batches if line["t"] >= published_ms + cycles and line not in obeyed]
    assert obeyed and not late, f"every sample batch from two cycles after the settings obeys them; not {late}"
    before = [line for line in batches if "settings_version" not in line]
    assert before and all("held" not in line for line in before)
    sent_by = {s["receptor_id"] for line in obeyed for s in line["samples"]}
    held_by = {s["receptor_id"] for line in obeyed for s in line.get("held", ())}
    assert sent_by <= {f"t{run}-m3"} and held_by >= {f"t{run}-m1"}, (sent_by, held_by)
    assert {q for line in obeyed for s in line["samples"] for q in s["values"]} == {"humidity"}, "only its field"
    assert all(len(s["values"]) == 5 for line in obeyed for s in line.get("held", ())), "held samples are logged whole"
    assert all(line["samples"] or line["held"] for line in obeyed), "a batch goes out even when all is held"
    assert agent.stats.held == sum(len(line.get("held", ())) for line in batches) > 0
    assert agent.stats.settings_refused == 2


def test_a_growing_log_is_read_on_where_the_last_read_stopped_and_from_the_top_when_written_anew(tmp_path):
    import json

    from edge.agent import JsonlLog, read_jsonl

    path = tmp_path / "readings.jsonl"
    path.write_text("".join(json.dumps({"t": t}) + "\n" for t in range(10)) + '{"t": 10')   # a line half written
    log = JsonlLog(str(path))
    assert log.until(5) == read_jsonl(str(path), 5) and len(log.until(100)) == 10
    with open(path, "a") as fh:
        fh.write('}\n{"t": 11}\n')
    assert [line["t"] for line in log.until(100)] == list(range(12))
    path.write_text('{"t": 1}\n')
    assert log.until(100) == [{"t": 1}]
