"""A Spark standalone cluster on this machine: a master and workers started from the installed
pyspark (`spark-class org.apache.spark.deploy.master.Master` / `...worker.Worker`), on loopback,
every connection authenticated with one shared secret (spark.authenticate). The suite runs nodes
on it (tests/test_spark_cluster.py); an operator can run one to try `SPARK_MASTER` before a real
cluster. Workers may declare more cores than the machine has: a core is a task slot.

Each daemon's log (and each executor's, under its worker's work directory) lands in `workdir`.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from services.ports import free_port


def spark_home() -> str:
    import pyspark

    return os.path.dirname(os.path.abspath(pyspark.__file__))


@dataclass
class LocalCluster:
    workdir: str
    workers: int = 2
    cores_per_worker: int = 2
    memory_per_worker: str = "2g"
    secret: str = field(default_factory=lambda: secrets.token_hex(16))
    port: int = field(default_factory=free_port)
    webui_port: int = field(default_factory=free_port)
    processes: list[subprocess.Popen] = field(default_factory=list)

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def driver_env(self, cores_max: int | None = None) -> dict[str, str]:
        """What a node process needs in its environment to run on this cluster."""
        env = {"SPARK_MASTER": self.master_url, "HIFI_SPARK_SECRET": self.secret}
        if cores_max is not None:
            env["HIFI_SPARK_CORES_MAX"] = str(cores_max)
        return env

    def state(self) -> dict:
        """The master's view (its web UI's JSON): workers, applications, cores granted."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.webui_port}/json/", timeout=5) as reply:
            return json.load(reply)

    def start(self, timeout_s: float = 90.0) -> None:
        os.makedirs(self.workdir, exist_ok=True)
        self._daemon("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                     "--port", str(self.port), "--webui-port", str(self.webui_port))
        for n in range(self.workers):
            work = os.path.join(self.workdir, f"worker-{n}")
            self._daemon(f"worker-{n}", "org.apache.spark.deploy.worker.Worker", self.master_url,
                         "--host", "127.0.0.1", "--cores", str(self.cores_per_worker),
                         "--memory", self.memory_per_worker, "--webui-port", str(free_port()), "--work-dir", work)
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                if self.state().get("aliveworkers", 0) >= self.workers:
                    return
            except (OSError, ValueError):   # not listening yet, or a master still starting answers an empty page
                pass
            if time.monotonic() > deadline or any(p.poll() is not None for p in self.processes):
                self.stop()
                raise RuntimeError(f"the Spark cluster did not come up within {timeout_s:.0f} s "
                                   f"(its logs: {self.workdir})")
            time.sleep(0.5)

    def _daemon(self, name: str, main: str, *args: str) -> None:
        # the secret through the daemons' Java options, not their command line (`ps` shows that)
        env = {**os.environ, "SPARK_HOME": spark_home(), "SPARK_LOG_DIR": self.workdir,
               "SPARK_DAEMON_JAVA_OPTS": f"-Dspark.authenticate=true -Dspark.authenticate.secret={self.secret}",
               "SPARK_WORKER_DIR": self.workdir}
        with open(os.path.join(self.workdir, f"{name}.log"), "ab") as out:
            self.processes.append(subprocess.Popen([os.path.join(spark_home(), "bin", "spark-class"), main, *args],
                                                   env=env, stdout=out, stderr=subprocess.STDOUT,
                                                   start_new_session=True))

    def executor_log_lines(self, app_name: str, pattern: str) -> int:
        """Lines matching `pattern` in the logs of the executors of the applications named `app_name`."""
        found = re.compile(pattern)
        state = self.state()
        ids = {a["id"] for a in state.get("activeapps", []) + state.get("completedapps", []) if a["name"] == app_name}
        total = 0
        for path in self.executor_logs():
            if any(f"/{app}/" in path for app in ids):
                with open(path, errors="replace") as log:
                    total += len(found.findall(log.read()))
        return total

    def executor_logs(self) -> Iterator[str]:
        """Paths of every executor's stderr the workers have written (work-dir/app-*/<id>/stderr)."""
        for root, _, files in os.walk(self.workdir):
            if "stderr" in files and os.path.basename(os.path.dirname(root)).startswith("app-"):
                yield os.path.join(root, "stderr")

    def stop(self) -> None:
        for process in reversed(self.processes):
            process.terminate()
        for process in self.processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
        self.processes.clear()


@contextmanager
def local_cluster(workdir: str, workers: int = 2, cores_per_worker: int = 2) -> Iterator[LocalCluster]:
    cluster = LocalCluster(workdir, workers, cores_per_worker)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()
