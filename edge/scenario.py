"""Scenario files (deploy/scenarios/*.yaml): what the receptor agent emulates. Pure.

A scenario names a seed, the RFID read cycle, a supply-chain world (edge.supply_chain), groups
of RFID readers and sensor motes (a group with `count` expands `{n}` in its id to 1..count, so a
large fan-in is a few lines), reader and mote faults, staged fires, and optionally a replay of
the Intel Lab readings. Times are relative to the run's start ("30 seconds"). Schema:
deploy/scenarios/README.md. Errors name the entry and the problem.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Any

import yaml

from edge.intel_lab import INTEL_LAB_DATA
from edge.motes import GAS, QUANTITIES, Environment, Fire, GasRelease, MoteFault, MoteModel, calibrated_motes
from edge.rfid import Antenna, ReaderFault, RfidReader
from edge.supply_chain import CHAIN, ChainConfig
from wire.bounded_yaml import load_bounded
from wire.errors import HiFiError
from wire.windows import duration_ms


class ScenarioError(HiFiError):
    """A scenario that cannot be run; the message names the entry and the problem."""


@dataclass(frozen=True)
class Replay:
    data: str
    node: str
    speed: float
    fault_share: float


@dataclass
class Scenario:
    name: str
    seed: int
    cycle_ms: int
    world: ChainConfig
    readers: list[RfidReader] = field(default_factory=list)
    motes: list[MoteModel] = field(default_factory=list)
    environment: Environment = field(default_factory=Environment)
    replay: Replay | None = None

    @property
    def receptors(self) -> int:
        return len(self.readers) + len(self.motes)


MAX_GROUP = 100_000    # receptors of one group (the high fan-in bench emulates 10 000 in all)
MAX_ANTENNAS = 16      # a reader's antennas (commercial readers have 1-8)
MAX_FIRES = 10_000     # staged fires (gas releases) of one entry


def _count(value: Any, what: str, where: str, most: int) -> int:
    """A positive whole number of at most `most` (one clear line otherwise, never a memory error)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
        raise ScenarioError(f"{where}: {what} is a whole number from 1 to {most:,} (got {str(value)[:40]!r})")
    return value


def _expand(group: dict[str, Any], where: str) -> list[str]:
    ident = group.get("id")
    if not isinstance(ident, str) or not ident:
        raise ScenarioError(f"{where}: needs an id")
    count = _count(group.get("count", 1), "count", f"{where} ({ident})", MAX_GROUP)
    if count > 1 and "{n}" not in ident:
        raise ScenarioError(f"{where} ({ident}): a group of {count} needs '{{n}}' in its id")
    return [ident.replace("{n}", str(n)) for n in range(1, count + 1)]


def _ms(value: Any, where: str, start_ms: int) -> int:
    try:
        return start_ms + duration_ms(str(value))
    except (HiFiError, ValueError) as exc:
        raise ScenarioError(f"{where}: {exc}") from None


def _readers(groups: list[dict[str, Any]], faults: list[dict[str, Any]], start_ms: int) -> list[RfidReader]:
    by_reader: dict[str, list[ReaderFault]] = {}
    for i, fault in enumerate(faults):
        where = f"reader_faults[{i}]"
        try:
            by_reader.setdefault(str(fault["reader"]), []).append(ReaderFault(
                str(fault["kind"]), _ms(fault.get("start", "0 s"), where, start_ms),
                _ms(fault["end"], where, start_ms) if "end" in fault else None,
                float(fault.get("factor", 0.3)), duration_ms(str(fault.get("period", "2 seconds")))))
        except (HiFiError, KeyError, ValueError) as exc:
            raise ScenarioError(f"{where}: {exc}") from None
    readers = []
    for i, group in enumerate(groups):
        where = f"readers[{i}]"
        location = _location(group, where, required=True)
        if not group.get("node"):
            raise ScenarioError(f"{where}: needs the edge node it publishes to")
        antennas = tuple(Antenna(x=2.5 * a) for a in range(_count(group.get("antennas", 1), "antennas", where,
                                                                  MAX_ANTENNAS)))
        for ident in _expand(group, where):
            try:
                readers.append(RfidReader(
                    ident, location, str(group["node"]), antennas, float(group.get("read_rate", 0.9)),
                    float(group.get("ghost_rate", 0.0)), float(group.get("overlap", 0.0)),
                    tuple(group.get("neighbours", ())), faults=tuple(by_reader.pop(ident, ()))))
            except (HiFiError, ValueError) as exc:
                raise ScenarioError(f"{where}: {exc}") from None
    if by_reader:
        raise ScenarioError(f"reader_faults name unknown readers: {', '.join(sorted(by_reader))}")
    return readers


def _location(spec: dict[str, Any], where: str, required: bool = False) -> str:
    """A group's `location`: one of the supply chain's ("" when optional and not given)."""
    location = spec.get("location")
    if (location is not None or required) and location not in CHAIN:
        raise ScenarioError(f"{where}: location {location!r} is not one of {', '.join(CHAIN)}")
    return str(location or "")


def _fires(spec: dict[str, Any], where: str, start_ms: int) -> list[Fire]:
    """A staged fire, or with `every` and `count` that many, one `every` after another."""
    location = _location(spec, where)
    count = _count(spec.get("count", 1), "count", where, MAX_FIRES)
    try:
        x, y = float(spec["x"]), float(spec["y"])
        start, end = _ms(spec["start"], where, start_ms), _ms(spec["end"], where, start_ms)
    except KeyError as exc:
        raise ScenarioError(f"{where}: needs {exc}") from None
    except (HiFiError, TypeError, ValueError) as exc:
        raise ScenarioError(f"{where}: {exc}") from None
    every = _ms(spec.get("every", "0 s"), where, 0)
    if count < 1 or (count > 1 and every < end - start):
        raise ScenarioError(f"{where}: count must be positive, and every at least a fire's length")
    return [Fire(x, y, start + n * every, end + n * every, location=location) for n in range(count)]


def _releases(spec: dict[str, Any], where: str, start_ms: int) -> list[GasRelease]:
    """A staged gas release, or with `every` and `count` that many, one `every` after another."""
    count = _count(spec.get("count", 1), "count", where, MAX_FIRES)
    try:
        x, y = float(spec["x"]), float(spec["y"])
        start, every = _ms(spec["start"], where, start_ms), _ms(spec.get("every", "0 s"), where, 0)
        release = GasRelease(x, y, start, float(spec.get("speed", 2.0)), float(spec.get("peak", 100.0)),
                             _ms(spec.get("duration", "10 seconds"), where, 0), float(spec.get("radius", 100.0)))
    except KeyError as exc:
        raise ScenarioError(f"{where}: needs {exc}") from None
    except (HiFiError, TypeError, ValueError) as exc:
        raise ScenarioError(f"{where}: {exc}") from None
    if count < 1 or (count > 1 and every <= 0) or release.speed_m_s <= 0 or release.radius_m <= 0:
        raise ScenarioError(f"{where}: count, every (with count > 1), speed and radius must be positive")
    return [replace(release, start_ms=start + n * every) for n in range(count)]


def _motes(groups: list[dict[str, Any]], faults: list[dict[str, Any]], seed: int, start_ms: int) -> list[MoteModel]:
    by_mote: dict[str, MoteFault] = {}
    for i, fault in enumerate(faults):
        where = f"mote_faults[{i}]"
        try:
            by_mote[str(fault["mote"])] = MoteFault(str(fault["kind"]), _ms(fault.get("start", "0 s"), where, start_ms),
                                                    _ms(fault["end"], where, start_ms) if "end" in fault else None)
        except (HiFiError, KeyError, ValueError) as exc:
            raise ScenarioError(f"{where}: {exc}") from None
    motes = []
    for i, group in enumerate(groups):
        where = f"motes[{i}]"
        idents = _expand(group, where)
        if not group.get("node"):
            raise ScenarioError(f"{where}: needs the edge node it publishes to")
        period = _ms(group.get("period", "1 second"), where, 0)
        location = _location(group, where)
        try:   # where the group's grid begins, and its step (metres)
            (x0, y0), spacing = (float(v) for v in group.get("origin", (0, 0))), float(group.get("spacing", 3.0))
        except (TypeError, ValueError):
            raise ScenarioError(f"{where}: origin is [x, y] and spacing a number of metres") from None
        quantities = (*QUANTITIES, GAS) if group.get("gas") else QUANTITIES
        for model, ident in zip(calibrated_motes(len(idents), str(group["node"]), seed + i, period, spacing,
                                                 offset_stddev=float(group.get("offset_stddev", 0.5))),
                                idents, strict=True):
            fault = by_mote.pop(ident, None)
            motes.append(MoteModel(ident, model.edge_node, x0 + model.x, y0 + model.y, model.period_ms, model.noise,
                                   model.offset, model.drift_per_hour, fault, location=location,
                                   quantities=quantities))
    if by_mote:
        raise ScenarioError(f"mote_faults name unknown motes: {', '.join(sorted(by_mote))}")
    return motes


def parse_scenario(text: str, start_ms: int = 0, seed: int | None = None, base_dir: str = "") -> Scenario:
    """A scenario from YAML text, its times anchored at `start_ms` (`seed` overrides its seed,
    relative data paths are taken from `base_dir`)."""
    try:
        spec = load_bounded(text)
    except yaml.YAMLError as exc:
        raise ScenarioError(f"not valid YAML: {exc}") from None
    return scenario_from_spec(spec, start_ms, seed, base_dir)


def scenario_from_spec(spec: Any, start_ms: int = 0, seed: int | None = None, base_dir: str = "") -> Scenario:
    """A scenario from its parsed YAML (a mapping), its times anchored at `start_ms`."""
    if isinstance(spec, dict) and seed is not None:
        spec = {**spec, "seed": seed}
    if not isinstance(spec, dict):
        raise ScenarioError("a scenario is a mapping (name, seed, cycle, world, readers, motes, ...)")
    unknown = set(spec) - {"name", "seed", "cycle", "world", "readers", "reader_faults", "motes", "mote_faults",
                           "fires", "gas_releases", "replay"}
    if unknown:
        raise ScenarioError(f"unknown key(s): {', '.join(sorted(unknown))}")
    seed = int(spec.get("seed", 1))
    world_spec = dict(spec.get("world") or {})
    durations = {"arrival_gap": "arrival_gap_ms", "dwell": "dwell_ms", "shelf": "shelf_ms",
                 "people_dwell": "people_dwell_ms"}
    try:
        options = {durations.get(k, k): (_ms(v, f"world.{k}", 0) if k in durations else v)
                   for k, v in world_spec.items()}
        world = ChainConfig(seed=seed, start_ms=start_ms, **options)
    except TypeError as exc:
        raise ScenarioError(f"world: {exc}") from None
    except (HiFiError, ValueError) as exc:
        raise ScenarioError(f"world: {exc}") from None
    fires = tuple(f for i, group in enumerate(spec.get("fires") or []) for f in _fires(group, f"fires[{i}]", start_ms))
    releases = tuple(r for i, group in enumerate(spec.get("gas_releases") or [])
                     for r in _releases(group, f"gas_releases[{i}]", start_ms))
    replay = None
    if spec.get("replay"):
        r = spec["replay"]
        replay = Replay(os.path.join(base_dir, str(r.get("data", INTEL_LAB_DATA))), str(r.get("node", "")),
                        float(r.get("speed", 1800)), float(r.get("fault_share", 0.2)))
        if not replay.node or replay.speed <= 0:
            raise ScenarioError("replay: needs a node and a positive speed")
        if not 0.0 <= replay.fault_share <= 1.0:
            raise ScenarioError(f"replay: fault_share {replay.fault_share} is outside [0, 1]")
    return Scenario(str(spec.get("name", "scenario")), seed, _ms(spec.get("cycle", "200 ms"), "cycle", 0), world,
                    _readers(list(spec.get("readers") or []), list(spec.get("reader_faults") or []), start_ms),
                    _motes(list(spec.get("motes") or []), list(spec.get("mote_faults") or []), seed, start_ms),
                    Environment(fires, releases), replay)


MAX_BYTES = 4 << 20   # a scenario of thousands of receptor groups is well under this


def load_scenario(path: str, start_ms: int = 0, seed: int | None = None) -> Scenario:
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_BYTES + 1)
    except OSError as exc:
        raise ScenarioError(f"{path}: {exc.strerror}") from None
    if len(data) > MAX_BYTES:
        raise ScenarioError(f"{path}: more than {MAX_BYTES:,} bytes; a scenario is at most that")
    try:
        text = data.decode()
    except UnicodeDecodeError as exc:
        raise ScenarioError(f"{path}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})") from None
    try:
        return parse_scenario(text, start_ms, seed, os.path.dirname(path))
    except ScenarioError as exc:
        raise ScenarioError(f"{path}: {exc}") from None
