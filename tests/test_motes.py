"""Synthetic motes (pure): noise, calibration, drift, faults and fires, statistically with fixed seeds."""

import random
import statistics

import pytest

from edge.motes import HOUR_MS, Environment, Fire, MoteFault, MoteModel, calibrated_motes

CALM = Environment()


def _readings(mote, env=CALM, samples=2000, started=0, seed=1):
    rng = random.Random(seed)
    return [mote.sample(env, started + i * mote.period_ms, started, rng) for i in range(samples)]


def test_noise_and_calibration_offset_match_the_configuration():
    mote = MoteModel("m1", "lab", 1.0, 2.0, noise={"temperature": 0.5}, offset={"temperature": 1.5})
    errors = [r.values["temperature"] - r.truth["temperature"] for r in _readings(mote)]
    assert statistics.mean(errors) == pytest.approx(1.5, abs=0.05)
    assert statistics.stdev(errors) == pytest.approx(0.5, rel=0.08)


def test_drift_grows_with_time_since_start():
    mote = MoteModel("m1", "lab", 0, 0, period_ms=HOUR_MS // 10, noise={}, drift_per_hour={"humidity": 0.3})
    readings = _readings(mote, samples=31)
    assert readings[-1].values["humidity"] - readings[-1].truth["humidity"] == pytest.approx(0.9, abs=1e-3)


def test_fail_stop_is_silence_and_battery_death_runs_hot_with_voltage_sagging():
    stop = MoteModel("m1", "lab", 0, 0, fault=MoteFault("fail-stop", 5000))
    readings = _readings(stop, samples=10)
    assert all(r is not None for r in readings[:5]) and all(r is None for r in readings[5:])
    battery = MoteModel("m2", "lab", 0, 0, fault=MoteFault("battery", 0), battery_life_ms=60_000)
    last = _readings(battery, samples=61)[-1]
    assert last.fault == "battery" and last.values["temperature"] > 100 and last.values["voltage"] < 2.1
    stuck = MoteModel("m3", "lab", 0, 0, fault=MoteFault("stuck", 0))
    assert len({r.values["temperature"] for r in _readings(stuck, samples=50)}) == 1
    with pytest.raises(ValueError, match="unknown fault kind 'melted'"):
        MoteFault("melted", 0)


def test_a_fire_heats_only_the_motes_near_it_while_it_burns():
    env = Environment((Fire(0.0, 0.0, 10_000, 20_000, radius_m=5.0, peak_c=80.0),))
    near, far = MoteModel("near", "lab", 1.0, 0.0, noise={}), MoteModel("far", "lab", 30.0, 0.0, noise={})
    rng = random.Random(0)
    assert near.sample(env, 15_000, 0, rng).truth["temperature"] > 80
    assert near.sample(env, 25_000, 0, rng).truth["temperature"] < 30
    assert far.sample(env, 15_000, 0, rng).truth["temperature"] < 30


def test_calibrated_motes_are_deterministic_and_distinct():
    motes = calibrated_motes(9, "lab", seed=4)
    assert motes == calibrated_motes(9, "lab", seed=4)
    assert len({m.offset["temperature"] for m in motes}) == 9 and len({(m.x, m.y) for m in motes}) == 9
