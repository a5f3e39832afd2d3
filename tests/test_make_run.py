"""`make run`'s first four minutes, as a new user sees them: `hifi up` on the default topology
prints each event the scenario stages once as it starts and once as it ends — the dying mote, the
degrading reader, the fire, the people in danger while it burns — and nothing else repeats window
after window (headquarters' trends, one row a location per long window, are the analysis the
chain ends with). Judged against the scenario file and the agents' ground truth, not against
what the views compute. The store's events (shoplifting, the missing pallet) are staged at
locations the default topology has no readers at: `store.yaml` watches those."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections import Counter, defaultdict

import pytest

from glue.topology import load_topology
from services.paths import DEFAULT_TOPOLOGY

pytestmark = pytest.mark.e2e

HIFI = os.path.join(os.path.dirname(sys.executable), "hifi")
RUN_S = 240
LINE = re.compile(r"^\d\d:\d\d:\d\d  hifi\.view\.(?P<node>[\w-]+)\.(?P<view>\w+)  (?P<what>STARTED|ended|window|at)"
                  r"\b(?P<rest>.*)$")
TRENDS = "location_trends"
ENDS_WITHIN_S = 40   # a condition's end is printed within this of its cause's end (its windows close)


def _fields(rest: str) -> dict[str, str]:
    return dict(pair.split("=", 1) for pair in rest.split("  ") if "=" in pair)


@pytest.fixture(scope="module")
def first_minutes(tmp_path_factory) -> tuple[list[str], list[dict], int]:
    """What `hifi up --duration 240` printed (its result lines), the agents' truth, and its exit code."""
    home = tmp_path_factory.mktemp("make-run")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HIFI_REDIS", "HIFI_KAFKA", "SPARK_MASTER"))}
    done = subprocess.run([HIFI, "up", "--duration", str(RUN_S), "--dashboard", "127.0.0.1:0",
                           "--receptor-dir", str(home / "receptors")], env={**env, "HIFI_HOME": str(home)},
                          capture_output=True, text=True, timeout=RUN_S + 180)
    truth = [json.loads(line) for line in (home / "receptors" / "truth.jsonl").read_text().splitlines()]
    return done.stdout.splitlines(), truth, done.returncode


def _changes(lines: list[str]) -> dict[tuple[str, str], list[tuple[str, dict, str]]]:
    """Per (view, key) its STARTED and ended lines in order, each with its fields: the key is the
    row's first field."""
    found: dict[tuple[str, str], list[tuple[str, dict, str]]] = defaultdict(list)
    for line in lines:
        match = LINE.match(line)
        if match and match["what"] in ("STARTED", "ended"):
            fields = _fields(match["rest"])
            name, value = next(iter(fields.items()))
            found[(match["view"], f"{name}={value}")].append((match["what"], fields, line))
    return found


def _printed_s(line: str) -> int:
    """When a line was printed: seconds into the local day (its HH:MM:SS)."""
    hours, minutes, seconds = (int(part) for part in line[:8].split(":"))
    return hours * 3600 + minutes * 60 + seconds


def _local_s(ms: int) -> int:
    moment = time.localtime(ms / 1000)
    return moment.tm_hour * 3600 + moment.tm_min * 60 + moment.tm_sec


def _after(line: str, ms: int) -> int:
    """How many seconds after the time `ms` the line was printed (across midnight too)."""
    return (_printed_s(line) - _local_s(ms)) % 86400


def test_each_staged_event_is_printed_once_as_it_starts_and_once_as_it_ends(first_minutes):
    lines, truth, code = first_minutes
    assert code == 0, "\n".join(lines[-20:])
    plan, last_ms = truth[0]["plan"], truth[-1]["t"]
    whats = {view_key: [what for what, _, _ in seen] for view_key, seen in _changes(lines).items()}

    # the dying mote: faulty once from its fault on, for good; no other mote
    dying = {f"receptor_id={fault['mote']}" for fault in plan["mote_faults"] if fault["end_ms"] is None}
    assert dying and {key for view, key in whats if view == "faulty_motes"} == dying, whats
    assert all(whats[("faulty_motes", key)] == ["STARTED"] for key in dying), whats

    # the degrading reader: its door weak once while it fades, well again after; the other door never
    locations = {r.id: r.location for r in load_topology(DEFAULT_TOPOLOGY).receptors}
    faded = {f"location={locations[fault['reader']]}" for fault in plan["reader_faults"] if fault["kind"] == "degrade"}
    weak = {key: seen for (view, key), seen in whats.items() if view == "weak_readers"}
    assert faded and weak == dict.fromkeys(faded, ["STARTED", "ended"]), whats

    # the fires that burned out in time: each once as it starts and once as it ends
    burned = [f for f in plan["fires"] if f["end_ms"] + ENDS_WITHIN_S * 1000 < last_ms]
    assert burned, "the run should see a whole fire"
    for location in {f["location"] for f in burned}:
        assert whats[("fires", f"location={location}")] == ["STARTED", "ended"] * len(burned), whats

    # the people in danger: each staged one once as the danger starts and once as it ends
    staged = {e["tag_id"] for line in truth for e in line.get("events", ()) if e["kind"] == "person-in-danger"
              and any(f["start_ms"] <= e["t_ms"] < f["end_ms"] for f in burned)}
    endangered = {key.split("=", 1)[1]: seen for (view, key), seen in whats.items() if view == "danger_alerts"}
    assert staged and set(endangered) == staged, (staged, endangered)
    assert all(seen == ["STARTED", "ended"] * len(burned) for seen in endangered.values()), endangered

    # nothing else: no stock alert (the scenario fits its docks), no row repeated window after window
    assert not [key for view, key in whats if view not in ("faulty_motes", "weak_readers", "fires", "danger_alerts")]
    rows = [m for m in map(LINE.match, lines) if m and m["what"] in ("window", "at")]
    assert {m["view"] for m in rows} <= {TRENDS}, [m.group(0) for m in rows if m["view"] != TRENDS][:5]
    per_window = Counter(re.search(r"window (\S+)", m.group(0))[1] for m in rows)
    assert per_window and max(per_window.values()) <= 2, per_window   # a row per dock per trend window


def test_each_start_and_end_is_printed_seconds_after_what_staged_it(first_minutes):
    lines, truth, _ = first_minutes
    plan = truth[0]["plan"]
    changes = _changes(lines)
    fire = plan["fires"][0]
    fired = [line for what, _, line in changes[("fires", f"location={fire['location']}")]]
    assert 0 < _after(fired[0], fire["start_ms"]) <= 10 and 0 < _after(fired[1], fire["end_ms"]) <= 15, fired
    fault = plan["reader_faults"][0]
    faded = next(seen for (view, _), seen in changes.items() if view == "weak_readers")
    # its door's 10 s windows: the first one mostly faded closes up to 20 s after the fault begins (ends)
    assert 0 < _after(faded[0][2], fault["start_ms"]) <= 30 and 0 < _after(faded[1][2], fault["end_ms"]) <= 30
