"""The supervisor of node processes (services.supervisor), on real processes standing in for
`hifi node`: one killed is started again with the same environment; a clean stop is final."""

import os
import sys
import time

from services.supervisor import Supervisor
from tests.conftest import wait_for

SLEEPER = [sys.executable, "-c", "import os, time; print(os.environ['HIFI_NODE_ID'], flush=True); time.sleep(120)"]


def test_a_killed_node_process_is_started_again_and_a_stopped_one_is_not(tmp_path):
    supervisor = Supervisor("unused.yaml", lambda user: "redis://unused", "unused:9092", str(tmp_path), command=SLEEPER)
    try:
        node = supervisor.start("edge-1")
        first = node.process
        log = tmp_path / "edge-1.log"
        wait_for(lambda: log.exists() and "edge-1" in log.read_text(), 10, "the node process running")
        supervisor.kill("edge-1")
        wait_for(lambda: len(node.starts) == 2 and node.process is not first, 10, "the node started again")
        assert node.exits == [-9]
        assert node.process.poll() is None, "the new process runs"
        assert (tmp_path / "edge-1").is_dir(), "its state directory is the same one"
        wait_for(lambda: log.read_text().count("edge-1") == 2, 10, "the second process's output beside the first's")
        killed = time.time()
        supervisor.kill("edge-1", down_s=1.5)   # kept down: its parent's re-parenting
        wait_for(lambda: len(node.starts) == 3, 10, "the node started again after its time down")
        assert node.starts[-1] - killed >= 1.5
    finally:
        supervisor.stop()
    assert node.process.poll() is not None and len(node.starts) == 3, "stopped for good"


STANDBY = [sys.executable, "-c", (
    "import json, os, sys, time\n"
    "if '--standby' in sys.argv:\n"
    "    line = sys.stdin.readline()\n"
    "    if not line:\n"
    "        sys.exit(0)\n"
    "    given = json.loads(line)\n"
    "    os.environ.update(given['env'])\n"
    "    sys.stdout = open(given['log'], 'a')\n"
    "print(os.environ['HIFI_NODE_ID'], 'spare' if '--standby' in sys.argv else 'fresh', flush=True)\n"
    "time.sleep(120)\n")]


def test_a_node_that_dies_becomes_the_warm_spare_and_a_new_spare_follows(tmp_path, monkeypatch):
    import services.supervisor as supervision

    monkeypatch.setattr(supervision, "SPARE_AFTER_S", 0.5)
    supervisor = Supervisor("unused.yaml", lambda user: "redis://unused", "unused:9092", str(tmp_path), command=STANDBY,
                            spare=True)
    try:
        node = supervisor.start("agg")
        wait_for(lambda: supervisor._spare is not None, 10, "the spare to be started")
        spare = supervisor._spare
        supervisor.kill("agg")
        wait_for(lambda: len(node.starts) == 2, 10, "the node started again")
        assert node.process is spare and supervisor.spares_used == 1, "the spare became the node"
        log = tmp_path / "agg.log"
        wait_for(lambda: "agg spare" in log.read_text(), 10, "the spare writing to the node's log as the node")
        wait_for(lambda: supervisor._spare is not None and supervisor._spare is not spare, 10, "a new spare")
    finally:
        supervisor.stop()
    assert node.process.poll() is not None


def test_a_standby_node_process_becomes_the_node_its_supervisor_names(spark, monkeypatch):
    import io
    import json

    from dsp.runtime import faults
    from services.cli import standby_args

    monkeypatch.setenv("HIFI_NODE_ID", "")
    monkeypatch.delenv("HIFI_FAULT", raising=False)
    at = int(time.time() * 1000) + 60_000
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(
        {"env": {"HIFI_NODE_ID": "dock-a", "HIFI_FAULT": f"after-flush@{at}"}}) + "\n"))
    args = standby_args(["node", "--topology", "deploy/topologies/small.yaml", "--standby"])
    assert (args.id, args.standby, args.topology) == ("dock-a", False, "deploy/topologies/small.yaml")
    assert (faults._ENV_POINT, faults._ENV_AT_MS) == (faults.AFTER_FLUSH, at), "its fault, read as it became it"
    os.environ.pop("HIFI_FAULT")   # set by the spare's become (not monkeypatch: its undo would set it again)
    faults.from_environment()
