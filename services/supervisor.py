"""Nodes as processes under a supervisor: each node of a topology is a `hifi node` process (what a
compose container runs), and one that dies (a crash, `kill -9`) is started again on its state
directory after RESTART_DELAY_S, as compose's `restart: unless-stopped` does for containers.
Used by `hifi up --processes` and `hifi bench chaos`; the node takes back what it ran from its
checkpoints and the MDR's desired state (services.node).

With `spare`, one warm process waits beside the nodes (`hifi node --standby`: its Python modules
loaded, its Spark session and Python worker started) and the next node that dies becomes it: a
restart then skips the ~5 s a node process spends before it can register (imports, the JVM,
Spark). A new spare starts SPARE_AFTER_S after a spare was used or a node started cold, so its
start does not take the CPU from the node coming back."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from services.deploy_names import node_service

log = logging.getLogger("hifi.supervisor")

RESTART_DELAY_S = 0.25
SPARE_AFTER_S = 15.0
HIFI = os.path.join(os.path.dirname(sys.executable), "hifi")


@dataclass
class NodeProcess:
    node_id: str
    env: dict[str, str]
    log_path: str
    process: subprocess.Popen | None = None
    starts: list[float] = field(default_factory=list)   # wall-clock times it was started
    exits: list[int] = field(default_factory=list)      # the exit codes of the processes that ended
    exited_at: float | None = None                      # when the last one was found ended
    held_until: float = 0.0                             # not started again before this (a node kept down)


class Supervisor:
    """Starts a topology's nodes as processes and restarts those that die until stopped."""

    def __init__(self, topology_path: str, mdr_url_for: Callable[[str], str], bootstrap: str, workdir: str,
                 progress: Callable[[str], None] = lambda _: None, trigger_ms: int = 1000,
                 command: list[str] | None = None, spare: bool = False, tls_dir: str = "") -> None:
        """`command`: what runs a node (default `hifi node` on the topology; its id and state
        directory are in its environment); `spare`: keep a warm spare process (the module's doc);
        `tls_dir`: the deployment's certificates (services.certs), HIFI_TLS_DIR of every node;
        `mdr_url_for`: the MDR's URL for a Redis user (services.redis_acls), a node's own made once."""
        self.mdr_url_for, self.bootstrap, self.workdir, self.tls_dir = mdr_url_for, bootstrap, workdir, tls_dir
        self.command = command or [HIFI, "node", "--topology", topology_path, "--trigger-ms", str(trigger_ms)]
        self.progress = progress
        self.nodes: dict[str, NodeProcess] = {}
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._watcher = threading.Thread(target=self._watch, name="supervisor", daemon=True)
        self.spare = spare
        self._spare: subprocess.Popen | None = None
        self._spare_due = time.time() + SPARE_AFTER_S   # after the nodes' own start
        self.spares_used = 0

    def start(self, node_id: str, extra_env: dict[str, str] | None = None) -> NodeProcess:
        state_dir = os.path.join(self.workdir, node_id)
        os.makedirs(state_dir, exist_ok=True)
        with self._lock:
            known = self.nodes.get(node_id)
            url = known.env["HIFI_REDIS_URL"] if known else self.mdr_url_for(node_service(node_id))
            env = self._env({"HIFI_NODE_ID": node_id, "HIFI_STATE_DIR": state_dir, "HIFI_METRICS_PORT": "0",
                             "HIFI_LISTEN": "127.0.0.1:0", "HIFI_REDIS_URL": url, **(extra_env or {})})
            node = known or NodeProcess(node_id, env, os.path.join(self.workdir, f"{node_id}.log"))
            node.env = env
            self.nodes[node_id] = node
            self._launch(node)
        if not self._watcher.is_alive():
            self._watcher.start()
        return node

    def _launch(self, node: NodeProcess) -> None:
        if self._become_spare(node):
            return
        with open(node.log_path, "ab") as out:
            node.process = subprocess.Popen(self.command, env=node.env, stdout=out, stderr=subprocess.STDOUT,
                                            start_new_session=True)
        node.starts.append(time.time())
        # a node starting cold takes the CPU for seconds: the spare's own start waits until after
        self._spare_due = max(self._spare_due, time.time() + SPARE_AFTER_S)

    def _become_spare(self, node: NodeProcess) -> bool:
        """Hand the node to the warm spare, if one waits (its environment, its log)."""
        spare, self._spare = self._spare, None
        if spare is None or spare.poll() is not None or spare.stdin is None:
            return False
        try:
            spare.stdin.write((json.dumps({"env": node.env, "log": node.log_path}) + "\n").encode())
            spare.stdin.close()
        except OSError:
            return False
        node.process = spare
        node.starts.append(time.time())
        self.spares_used += 1
        self._spare_due = time.time() + SPARE_AFTER_S
        return True

    def _env(self, extra: dict[str, str]) -> dict[str, str]:
        """A node process's environment (a spare's lacks the node's own part, MDR user included, given
        when it becomes one). Its Spark's own lines go to its log with the rest (not HIFI_SPARK_LOG's)."""
        inherited = {k: v for k, v in os.environ.items() if k not in ("HIFI_REDIS_URL", "HIFI_SPARK_LOG")}
        return {**inherited, "HIFI_KAFKA_BOOTSTRAP": self.bootstrap, "HIFI_SPARK_DRIVER_MEMORY": "1g",
                **({"HIFI_TLS_DIR": self.tls_dir} if self.tls_dir else {}), **extra}

    def _start_spare(self) -> None:
        env = self._env({})
        with open(os.path.join(self.workdir, "spare.log"), "ab") as out:
            self._spare = subprocess.Popen([*self.command, "--standby"], env=env, stdin=subprocess.PIPE, stdout=out,
                                           stderr=subprocess.STDOUT, start_new_session=True)

    def kill(self, node_id: str, down_s: float = 0.0) -> None:
        """SIGKILL the node's process; the supervisor starts it again, after `down_s` (a node that
        stays dead that long: its parent's re-parenting, services.adoption)."""
        with self._lock:
            node = self.nodes[node_id]
            node.held_until = time.time() + down_s
            process = node.process
        if process is not None and process.poll() is None:
            process.kill()

    def replace(self, node_id: str, extra_env: dict[str, str]) -> NodeProcess:
        """Stop the node cleanly and start it with `extra_env` added (a fault to inject)."""
        with self._lock:
            node = self.nodes[node_id]
            process, node.process = node.process, None
        if process is not None:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=90)
        return self.start(node_id, extra_env)

    def _watch(self) -> None:
        while not self._stopping.wait(0.2):
            with self._lock:
                if self.spare and self._spare is None and time.time() >= self._spare_due:
                    self._start_spare()
                for node in self.nodes.values():
                    if node.process is None or node.process.poll() is None:
                        continue
                    if node.exited_at is None:
                        node.exited_at = time.time()
                        node.exits.append(node.process.returncode)
                        self.progress(f"node {node.node_id} exited with {node.process.returncode}")
                    elif time.time() >= max(node.exited_at + RESTART_DELAY_S, node.held_until):
                        self.progress(f"node {node.node_id}: starting it again")
                        node.exited_at = None
                        self._launch(node)

    def stop(self) -> None:
        self._stopping.set()
        with self._lock:
            processes = [n.process for n in self.nodes.values() if n.process is not None]
            spare, self._spare = self._spare, None
        if spare is not None and spare.stdin is not None:
            spare.stdin.close()   # no node for it: it ends
            processes.append(spare)
        for process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in processes:
            try:
                process.wait(timeout=90)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
