"""`hifi up` stopped as `docker stop`, systemd or `timeout` stop it: SIGTERM to its process group.
It stops every node, then Spark, then its servers: HiFi's own lines only (Spark's go to its log
file), no traceback, exit code 0, and no process of the run left behind. (Ctrl-C, SIGINT to the
group, ends tests/test_make_run.py's run of the default topology, checked alike.)"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import wait_for

pytestmark = pytest.mark.e2e

HIFI = os.path.join(os.path.dirname(sys.executable), "hifi")
SMALL = Path(__file__).resolve().parent.parent / "deploy" / "topologies" / "small.yaml"
# how each run is stopped: (signal, to the whole process group?): what `docker stop`, systemd,
# Kubernetes and `timeout` send (SIGTERM to the process alone takes the same handler, without the
# JVM's risk: not run; a terminal's Ctrl-C: tests/test_make_run.py)
STOPS = {"sigterm-group": (signal.SIGTERM, True)}
HIFI_LINE = re.compile(r"^(\[hifi\] |\d\d:\d\d:\d\d  hifi\.)")   # progress, or a result row


def processes_of(home: str) -> list[int]:
    """Live processes started for the run whose HIFI_HOME is `home` (they inherit it)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and f"HIFI_HOME={home}".encode() in (entry / "environ").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def test_hifi_up_stops_cleanly_on_every_signal_to_it_or_its_group(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HIFI_REDIS", "HIFI_KAFKA", "SPARK_MASTER"))}
    runs = {}
    for name in STOPS:
        home = tmp_path / name
        home.mkdir()
        out = open(home / "out.log", "w")   # noqa: SIM115 (closed below)
        process = subprocess.Popen([HIFI, "up", "--topology", str(SMALL), "--state-dir", str(home / "state"),
                                    "--dashboard", "127.0.0.1:0"], env={**env, "HIFI_HOME": str(home)},
                                   stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        runs[name] = (home, process, out)

    def up(home: Path) -> bool:
        return "is up" in (home / "out.log").read_text()

    for name, (home, process, _) in runs.items():
        wait_for(lambda h=home, p=process: up(h) or p.poll() is not None, 240, f"{name}: hifi up")
        assert process.poll() is None, (home / "out.log").read_text()
    time.sleep(3)   # micro-batches in flight
    for name, (_, process, _) in runs.items():
        stop, group = STOPS[name]
        os.killpg(process.pid, stop) if group else process.send_signal(stop)
    for name, (home, process, out) in runs.items():
        code = process.wait(timeout=120)
        out.close()
        printed = (home / "out.log").read_text().splitlines()
        assert code == 0, f"{name}: exit {code}\n" + "\n".join(printed[-30:])
        foreign = [line for line in printed if not HIFI_LINE.match(line)]
        assert not foreign, f"{name}: lines not HiFi's:\n" + "\n".join(foreign[:20])
        assert printed[-2:] == ["[hifi] stopping", "[hifi] stopped"], printed[-5:]
        assert (home / "logs" / "spark.log").read_text().strip(), "Spark's own lines went to its log"
        wait_for(lambda h=str(home): not processes_of(h), 30, f"{name}: every process of the run to exit")
