"""The supervisor of node processes (services.supervisor), on real processes standing in for
`hifi node`: one killed is started again with the same environment; a clean stop is final."""

import sys
import time

from services.supervisor import Supervisor
from tests.conftest import wait_for

SLEEPER = [sys.executable, "-c", "import os, time; print(os.environ['HIFI_NODE_ID'], flush=True); time.sleep(120)"]


def test_a_killed_node_process_is_started_again_and_a_stopped_one_is_not(tmp_path):
    supervisor = Supervisor("unused.yaml", "redis://unused", "unused:9092", str(tmp_path), command=SLEEPER)
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
