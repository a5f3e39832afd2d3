"""`make run`'s first four minutes, as a new user sees them, then Ctrl-C: `hifi up` on the
default topology prints each event the scenario stages once as it starts and once as it ends —
the dying mote, the degrading reader, the fire, the people in danger while it burns — and nothing
else repeats window after window (headquarters' trends, one row a location per long window, are
the analysis the chain ends with); then it stops cleanly. Judged against the scenario file and
the agents' ground truth, not against what the views compute. The store's events (shoplifting,
the missing pallet) are staged at locations the default topology has no readers at: `store.yaml`
watches those."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass

import pytest

from glue.topology import load_topology
from services.paths import DEFAULT_TOPOLOGY
from tests.conftest import wait_for
from tests.test_signals import processes_of

pytestmark = pytest.mark.e2e

HIFI = os.path.join(os.path.dirname(sys.executable), "hifi")
RUN_S = 240
LINE = re.compile(r"^\d\d:\d\d:\d\d  hifi\.view\.(?P<node>[\w-]+)\.(?P<view>\w+)  (?P<what>STARTED|ended|window|at)"
                  r"\b(?P<rest>.*)$")
TRENDS = "location_trends"
ENDS_WITHIN_S = 40   # a condition's end is printed within this of its cause's end (its windows close)


def _fields(rest: str) -> dict[str, str]:
    return dict(pair.split("=", 1) for pair in rest.split("  ") if "=" in pair)


@dataclass
class Run:
    lines: list[str]      # what it printed: the result lines (stdout)
    progress: list[str]   # its own lines (stderr)
    truth: list[dict]     # the agents' ground truth
    code: int
    home: str


@pytest.fixture(scope="module")
def first_minutes(tmp_path_factory) -> Run:
    """`make run` as a user runs it: `hifi up`, RUN_S seconds from "is up", then Ctrl-C (SIGINT to
    the terminal's process group)."""
    home = tmp_path_factory.mktemp("make-run")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HIFI_REDIS", "HIFI_KAFKA", "SPARK_MASTER"))}
    process = subprocess.Popen([HIFI, "up", "--dashboard", "127.0.0.1:0", "--receptor-dir", str(home / "receptors")],
                               env={**env, "HIFI_HOME": str(home)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, start_new_session=True)
    lines, progress = [], []
    readers = [threading.Thread(target=lambda f=f, into=into: into.extend(line.rstrip("\n") for line in f), daemon=True)
               for f, into in ((process.stdout, lines), (process.stderr, progress))]
    for reader in readers:
        reader.start()
    try:
        wait_for(lambda: any(" is up: " in line for line in progress) or process.poll() is not None, 300, "hifi up")
        time.sleep(RUN_S)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGINT)
    code = process.wait(timeout=180)
    for reader in readers:
        reader.join(timeout=30)
    truth = [json.loads(line) for line in (home / "receptors" / "truth.jsonl").read_text().splitlines()]
    return Run(lines, progress, truth, code, str(home))


def test_ctrl_c_stops_every_node_then_spark_then_the_servers_and_leaves_nothing_running(first_minutes):
    run = first_minutes
    assert run.code == 0, "\n".join(run.progress[-20:])
    assert run.progress[-2:] == ["[hifi] stopping", "[hifi] stopped"], run.progress[-5:]
    assert not [line for line in run.progress if "Traceback" in line], run.progress[-20:]
    wait_for(lambda: not processes_of(run.home), 30, "every process of the run to exit")


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
    lines, truth = first_minutes.lines, first_minutes.truth
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
    lines, truth = first_minutes.lines, first_minutes.truth
    plan = truth[0]["plan"]
    changes = _changes(lines)
    fire = plan["fires"][0]
    fired = [line for what, _, line in changes[("fires", f"location={fire['location']}")]]
    assert 0 < _after(fired[0], fire["start_ms"]) <= 10 and 0 < _after(fired[1], fire["end_ms"]) <= 15, fired
    fault = plan["reader_faults"][0]
    faded = next(seen for (view, _), seen in changes.items() if view == "weak_readers")
    # its door's 10 s windows: the first one mostly faded closes up to 20 s after the fault begins (ends)
    assert 0 < _after(faded[0][2], fault["start_ms"]) <= 30 and 0 < _after(faded[1][2], fault["end_ms"]) <= 30
