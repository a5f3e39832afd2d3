"""The compose deployment's services as separate processes: each runs exactly the command,
environment and health check docker-compose.yml gives its container (services.compose), with
only the addresses moved onto this machine (the embedded Redis and broker for `redis` and
`kafka`, free loopback ports for the published ones). Small topology: core over dock-a, dock-b,
each node in its own process with its own Spark."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from pathlib import Path

import pytest

from glue.topology import load_topology
from protos import hifi_pb2, hifi_pb2_grpc
from services.auth import Security, open_channel
from services.certs import client_context
from services.compose import BUNDLES_DIR, CA_DIR, TLS_DIR, compose_model
from services.deploy_names import node_service
from services.paths import SMALL_TOPOLOGY
from services.ports import free_port
from tests.conftest import topic_rows, wait_for
from wire.codec import datetime_ms

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
pytestmark = pytest.mark.e2e   # the hierarchy as the separate processes docker compose runs

HIFI = os.path.join(os.path.dirname(sys.executable), "hifi")
SMALL = SMALL_TOPOLOGY
QUERY = "SELECT receptor_id, count(*) AS reads FROM rfid_stream [range by '2 seconds'] GROUP BY receptor_id"


class Deployment:
    """The compose file's HiFi services, run here in dependency order."""

    def __init__(self, servers, workdir) -> None:
        self.servers, self.workdir = servers, workdir
        self.model = compose_model(load_topology(SMALL), SMALL)["services"]
        # each service is its compose Kafka user on the embedded broker, with compose's ACLs
        self.kafka_passwords = servers.authorize(load_topology(SMALL))
        self.ports: dict[str, int] = {}          # container port -> the local port standing in for it
        self.processes: dict[str, subprocess.Popen] = {}
        self.envs: dict[str, dict[str, str]] = {}

    def local(self, value: str, service: str) -> str:
        """A compose value with this machine's addresses and paths (each container's TLS bundle,
        the certs service's CA and bundles: directories of the work directory). The dashboard
        listens on every interface, as in its container (so it speaks TLS); the rest on loopback."""
        value = (value.replace("/app/", REPO + "/").replace(TLS_DIR, str(self.workdir / "bundles" / service))
                 .replace(CA_DIR, str(self.workdir / "ca")).replace(BUNDLES_DIR, str(self.workdir / "bundles")))
        for port in ("50050", "50051", "8470", "9464"):
            if value.endswith(f":{port}") or f":{port}/" in value:
                key = f"{service}:{port}"
                self.ports.setdefault(key, free_port())
                value = value.replace(f":{port}", f":{self.ports[key]}")
                if service != "dashboard":
                    value = value.replace("0.0.0.0", "127.0.0.1")
        return value

    def start(self, service: str) -> None:
        spec = self.model[service]
        env = {name: self.local(str(value), service) for name, value in spec.get("environment", {}).items()}
        env.update(HIFI_REDIS_URL=self.servers.redis_url, HIFI_KAFKA_BOOTSTRAP=self.servers.bootstrap,
                   HIFI_HOME=str(self.workdir / "home"))
        if "HIFI_KAFKA_USERNAME" in env:   # compose's user, its password and CA the embedded broker's
            env.update(HIFI_KAFKA_PASSWORD=self.kafka_passwords[env["HIFI_KAFKA_USERNAME"]],
                       HIFI_KAFKA_CA=self.servers.broker.ca_file)
        if "HIFI_ADVERTISE_HOST" in env:
            env["HIFI_ADVERTISE_HOST"] = "127.0.0.1"
        if "HIFI_METRICS_PORT" in env:   # any free port, bound by the service itself: a port picked here
            env["HIFI_METRICS_PORT"] = "0"   # was once taken meanwhile (a client's ephemeral port: CI, 2026-11-28)
        for name in ("HIFI_STATE_DIR", "HIFI_RECEPTOR_DIR"):
            if name in env:
                env[name] = str(self.workdir / service / name.lower())
        self.envs[service] = {**os.environ, **env}
        log = open(self.workdir / f"{service}.log", "wb")  # noqa: SIM115 - closed with the process
        command = [self.local(part, service) for part in spec["command"]]
        self.processes[service] = subprocess.Popen([HIFI, *command], env=self.envs[service], stdout=log,
                                                   stderr=subprocess.STDOUT, cwd=self.workdir)

    def make_certificates(self, timeout_s: float) -> None:
        """The certs service's script, to its successful end: the CA and every container's bundle
        (each bundle's directory made first, as compose makes its volume; no `chown`: one user here)."""
        for volume in self.model["certs"]["volumes"]:
            os.makedirs(self.local(volume.split(":")[1], "certs"), exist_ok=True)
        script = "\n".join(line for line in self.model["certs"]["entrypoint"][-1].splitlines()
                           if not line.startswith("chown "))
        script = self.local(script, "certs").replace("hifi certs ", f"{HIFI} certs ")
        with open(self.workdir / "certs.log", "wb") as log:
            done = subprocess.run(["sh", "-c", script], stdout=log, stderr=subprocess.STDOUT, timeout=timeout_s)
        assert done.returncode == 0, self.log("certs")

    def healthy(self, service: str) -> bool:
        process = self.processes[service]
        if process.poll() is not None:
            pytest.fail(f"{service} exited with {process.returncode}:\n{self.log(service)}")
        check = [self.local(part, service) for part in self.model[service]["healthcheck"]["test"][2:]]
        if service == "agents":   # the container's archive path, here the service's own directory
            check = [c.replace("/var/lib/hifi/archive", self.envs[service]["HIFI_RECEPTOR_DIR"]) for c in check]
        return subprocess.run([HIFI, *check], env=self.envs[service], capture_output=True, timeout=60).returncode == 0

    def start_healthy(self, *services: str, timeout_s: float = 60) -> None:
        """Start `services` together (none depends on another) and wait until each is healthy."""
        for service in services:
            self.start(service)
        for service in services:
            wait_for(lambda s=service: self.healthy(s), timeout_s, f"{service} healthy:\n{self.log(service)}",
                     interval_s=2)

    def log(self, service: str, lines: int = 30) -> str:
        path = self.workdir / f"{service}.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""

    def trouble(self) -> str:
        """What went wrong in the node services, from their logs (for a failing assertion)."""
        marks = ("restart", "died", "Error", "Exception", "Traceback", "WARN")
        return "\n".join(f"{service}: {line}" for service in self.processes if service.startswith("node-")
                         for line in self.log(service, 400).splitlines() if any(m in line for m in marks))

    def stop(self) -> dict[str, int]:
        codes = {}
        for service, process in reversed(list(self.processes.items())):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
            try:
                codes[service] = process.wait(timeout=90)
            except subprocess.TimeoutExpired:
                process.kill()
                codes[service] = process.wait()
        return codes


@pytest.fixture()
def deployment(servers, mdr, tmp_path):
    running = Deployment(servers, tmp_path)
    yield running
    running.stop()


def window_rows(deployment, topic: str) -> list[tuple[int, str, int]]:
    """(window start ms, receptor, count) of every row in a result topic, as readers take them."""
    return [(datetime_ms(r["window_start"]), r["receptor_id"], r["n"])
            for r in topic_rows(deployment.servers.bootstrap, topic)]


def test_the_compose_services_run_as_processes_and_answer_a_query(deployment, mdr):
    topology = load_topology(SMALL)
    deployment.make_certificates(60)
    deployment.start_healthy("placement")
    assert mdr.streams() and mdr.receptors(), "placement loads the topology's metadata"
    started: set[str] = set()
    while len(started) < len(topology.nodes):   # compose starts a parent once its children are healthy
        ready = [n for n in topology.nodes if n not in started and set(topology.children(n)) <= started]
        deployment.start_healthy(*(node_service(n) for n in ready), timeout_s=300)
        started.update(ready)
    deployment.start_healthy("agents", "dashboard")
    assert {n.id: n.alive for n in mdr.nodes()} == {"core": True, "dock-a": True, "dock-b": True}
    # every node registered where the others reach it (its advertised host), not 0.0.0.0
    assert all(n.address.startswith("127.0.0.1:") for n in mdr.nodes())

    # a user's token, made as an operator makes one in compose (`docker compose exec placement hifi users add`)
    made = subprocess.run([HIFI, "users", "add", "tester"], env=deployment.envs["placement"], capture_output=True,
                          text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    env = {**deployment.envs["dashboard"], "HIFI_TOKEN": made.stdout.strip(),
           "HIFI_PLACEMENT": f"127.0.0.1:{deployment.ports['placement:50050']}"}
    done = subprocess.run([HIFI, "query", QUERY, "--limit", "6", "--timeout", "240", "--format", "json"], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(rows) == 6, f"{len(rows)} rows in 240 s; the nodes said:\n{deployment.trouble()}\n{done.stderr}"

    # docs/deploying.md's query, as it says to run it: in the placement container, with the token
    documented = re.search(r'placement hifi query "([^"]+)"', (Path(REPO) / "docs" / "deploying.md").read_text())
    assert documented, "docs/deploying.md shows a query to run in the placement container"
    asked = subprocess.run([HIFI, "query", " ".join(documented.group(1).split()), "--limit", "2", "--timeout", "120",
                            "--format", "json"], env={**deployment.envs["placement"], "HIFI_TOKEN": env["HIFI_TOKEN"]},
                           capture_output=True, text=True, timeout=180)
    assert asked.returncode == 0, asked.stderr
    answered = [json.loads(line) for line in asked.stdout.splitlines()]
    assert len(answered) == 2 and all(r["tags"] > 0 and r["location"] for r in answered), answered

    # kill -9 of an edge node mid-stream, started again on its state directory (compose's
    # restart policy): a query running through it goes on, its windows all equal to the log's
    placement = hifi_pb2_grpc.PlacementStub(open_channel(env["HIFI_PLACEMENT"],
                                                         Security(env["HIFI_TLS_DIR"], env["HIFI_TOKEN"])))
    running = placement.Submit(hifi_pb2.SubmitRequest(sql=QUERY.replace("AS reads", "AS n")), timeout=60)
    wait_for(lambda: len(window_rows(deployment, running.result_topic)) >= 2, 120, "the running query's windows")
    deployment.processes["node-dock-a"].kill()
    killed_ms = int(time.time() * 1000)
    deployment.processes["node-dock-a"].wait(timeout=30)
    deployment.start("node-dock-a")
    wait_for(lambda: any(start >= killed_ms + 2000 for start, _, _ in window_rows(deployment, running.result_topic)),
             180, f"windows after dock-a's restart:\n{deployment.log('node-dock-a')}")

    # each window's count equals the agents' log of what they published (complete once they stop)
    agents = deployment.processes["agents"]
    agents.send_signal(signal.SIGTERM)
    assert agents.wait(timeout=60) == 0, deployment.log("agents")
    readings = deployment.envs["agents"]["HIFI_RECEPTOR_DIR"] + "/readings.jsonl"
    with open(readings) as fh:
        logged = [json.loads(line) for line in fh]
    central = Counter()
    for cycle in logged:
        if "reads" in cycle:
            central[(cycle["t"] // 2000 * 2000, cycle["receptor"])] += len(cycle["reads"])
    for row in rows:
        start = datetime_ms(dt.datetime.fromisoformat(row["window_start"]))
        assert row["reads"] == central[(start, row["receptor_id"])], row
    # across the kill: every window of the running query, none missing, none twice
    emitted = window_rows(deployment, running.result_topic)
    first, last = min(s for s, _, _ in emitted), max(s for s, _, _ in emitted)
    want = [(start, receptor, n) for (start, receptor), n in central.items() if first <= start <= last and n]
    missing, extra = Counter(want) - Counter(emitted), Counter(emitted) - Counter(want)
    assert not missing and not extra, f"across dock-a's restart: missing {list(missing)}, not in the log {list(extra)}"

    # Prometheus finds every service through the dashboard, labelled with its tier
    dashboard = f"https://127.0.0.1:{deployment.ports['dashboard:8470']}"
    with urllib.request.urlopen(f"{dashboard}/api/prometheus-targets", timeout=10,
                                context=client_context(env["HIFI_TLS_DIR"])) as answer:
        targets = json.load(answer)
    labels = {t["labels"]["service"]: t["labels"] for t in targets}
    assert set(labels) == {"node:core", "node:dock-a", "node:dock-b", "placement", "dashboard"}
    assert labels["node:dock-a"]["tier"] == "edge" and labels["node:core"]["tier"] == "core"
    dock_a = next(t for t in targets if t["labels"]["service"] == "node:dock-a")
    with urllib.request.urlopen(f"http://{dock_a['targets'][0]}/metrics", timeout=10) as answer:
        assert 'hifi_readings_in_total{node="dock-a"}' in answer.read().decode()

    codes = deployment.stop()
    assert all(code == 0 for code in codes.values()), {s: (c, deployment.log(s, 10)) for s, c in codes.items()}
