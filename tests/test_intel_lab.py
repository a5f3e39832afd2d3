"""The Intel Lab replay (pure over the real files kept in deploy/data/intel-lab)."""

import gzip
import os

import pytest

from edge.intel_lab import INTEL_LAB_DATA, STEP_MS, IntelLabError, load_intel_lab, plan_faults, replay

DATA = INTEL_LAB_DATA


def _first_row(name: str) -> list[float]:
    with gzip.open(os.path.join(DATA, name), "rt") as fh:
        return [float(v) for v in fh.readline().split(",")]


def test_all_fifty_motes_load_with_positions_and_both_periods():
    motes = load_intel_lab(DATA)
    assert len(motes) == 50 and {m.steps for m in motes} == {240}
    first = motes[0]
    assert (first.mote_id, first.x, first.y) == (1, 21.5, 23.0)
    assert list(first.temperature) == _first_row("intelTemperatureTrain.csv.gz") + _first_row(
        "intelTemperatureTest.csv.gz")


def test_replay_reproduces_the_real_values_where_no_fault_is_injected():
    motes = load_intel_lab(DATA)
    faults = plan_faults(motes, seed=3)
    faulty = {f.mote_id for f in faults}
    samples = list(replay(motes, faults, start_ms=1_000_000, speed=1800))
    by_mote = {m.mote_id: m for m in motes}
    clean = [s for s in samples if not s.fault]
    assert all(s.values["temperature"] == by_mote[s.mote_id].temperature[s.step] and
               s.values["humidity"] == by_mote[s.mote_id].humidity[s.step] for s in clean)
    assert {s.mote_id for s in clean if s.step == 239} >= {m.mote_id for m in motes} - faulty
    assert samples[-1].t_ms == 1_000_000 + 239 * STEP_MS // 1800   # 30 minutes -> 1 s


def test_every_fault_kind_shows_and_is_recorded():
    motes = load_intel_lab(DATA)
    faults = plan_faults(motes, seed=3, share=0.2)
    assert len(faults) == 10 and {f.kind for f in faults} == {"fail-stop", "stuck", "spike", "battery"}
    assert plan_faults(motes, seed=3, share=0.2) == faults, "deterministic for a seed"
    samples = list(replay(motes, faults, 0, 1800))
    for fault in faults:
        mine = [s for s in samples if s.mote_id == fault.mote_id and fault.start_step <= s.step < fault.end_step]
        if fault.kind == "fail-stop":
            assert not mine
            continue
        assert mine and all(s.fault == fault.kind for s in mine)
        if fault.kind == "stuck":
            assert len({s.values["temperature"] for s in mine}) == 1
        elif fault.kind == "spike":
            assert all(abs(s.values["temperature"] - s.true_values["temperature"]) >= 15 for s in mine)
        else:
            assert mine[-1].values["temperature"] > 100 and mine[-1].values["voltage"] < 2.2


def test_unreadable_data_is_refused_naming_the_file(tmp_path):
    with pytest.raises(IntelLabError, match="intelTemperatureTrain.csv.gz: cannot be read"):
        load_intel_lab(str(tmp_path))
    for name in ("intelTemperatureTrain.csv.gz", "intelTemperatureTest.csv.gz"):
        with gzip.open(tmp_path / name, "wt") as fh:
            fh.write("1.0,2.0\n1.0,oops\n")
    with pytest.raises(IntelLabError, match="line 2: not a comma-separated list of numbers"):
        load_intel_lab(str(tmp_path))
    with pytest.raises(ValueError, match="outside"):
        plan_faults(load_intel_lab(DATA), seed=1, share=1.5)
