"""The docker compose deployment: the committed docker-compose.yml is what the generator renders
for the default topology, it and the files rendered for every other topology validate with
Debian's `docker-compose config`, and each agrees with its topology. (No Docker engine here: the
containers themselves run in tests/test_containers.py where one exists, and the services' exact
commands run as processes in tests/test_processes.py.)"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time

import pytest
import yaml

from glue.topology import load_topology
from services.cli import build_parser
from services.compose import CA_DIR, TLS_DIR, compose_model, render_compose, secret_variables
from services.deploy_names import node_service, secret_variable
from services.kafka_acls import password_variable
from services.kafka_acls import users as kafka_users
from services.paths import DEFAULT_TOPOLOGY, TOPOLOGIES
from services.tls_bundles import bundles as tls_bundles
from services.tls_bundles import volume as tls_volume

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOPOLOGY_FILES = sorted(os.path.join(TOPOLOGIES, f) for f in os.listdir(TOPOLOGIES) if f.endswith(".yaml"))
HIFI_SERVICES = {"placement", "agents", "dashboard"}


def _validated(text: str, tmp_path) -> dict:
    """`docker-compose config` of the file, as docker-compose resolved it (defaults filled in)."""
    path = tmp_path / "docker-compose.yml"
    path.write_text(text)
    done = _compose_config(path, {name: f"secret-{i}" for i, name in enumerate(ALL_SECRETS)})
    assert done.returncode == 0, done.stderr
    return yaml.safe_load(done.stdout)


def _compose_config(path, passwords: dict[str, str]) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HIFI_REDIS_PASSWORD", "HIFI_GRAFANA_PASSWORD",
                                                                      "HIFI_KAFKA_PASSWORD", "HIFI_SPARK_SECRET"))}
    return subprocess.run(["docker-compose", "-f", str(path), "--project-directory", REPO, "config"],
                          capture_output=True, text=True, timeout=120, env={**env, **passwords})


# every secret any topology's compose file needs (a variable compose does not use is ignored)
ALL_SECRETS = sorted({name for f in TOPOLOGY_FILES for name in secret_variables(load_topology(f))})


@pytest.mark.parametrize("missing", ["HIFI_REDIS_PASSWORD_NODE_DOOR1", "HIFI_GRAFANA_PASSWORD",
                                     "HIFI_KAFKA_PASSWORD_NODE_DOOR1"])
def test_compose_refuses_to_start_without_each_password(missing, tmp_path):
    path = tmp_path / "docker-compose.yml"
    path.write_text(render_compose(load_topology(DEFAULT_TOPOLOGY), DEFAULT_TOPOLOGY))
    given = {**{name: "a-secret" for name in ALL_SECRETS}, missing: ""}
    done = _compose_config(path, given)
    assert done.returncode != 0 and f"set {missing}" in done.stderr, done.stderr


def test_docker_compose_is_installed_by_the_project():
    assert shutil.which("docker-compose"), "deploy/install-system-deps.sh installs Debian's docker-compose"


def test_the_committed_compose_file_is_the_default_topology_rendered():
    with open(os.path.join(REPO, "docker-compose.yml")) as fh:
        committed = fh.read()
    assert committed == render_compose(load_topology(DEFAULT_TOPOLOGY), DEFAULT_TOPOLOGY), \
        "regenerate it: hifi deploy compose --output docker-compose.yml"


@pytest.mark.parametrize("topology_file", TOPOLOGY_FILES, ids=os.path.basename)
def test_the_compose_file_of_every_topology_validates_and_matches_it(topology_file, tmp_path):
    topology = load_topology(topology_file)
    resolved = _validated(render_compose(topology, topology_file), tmp_path)
    services = resolved["services"]

    # every node, with its own id, and after its children
    for node_id, spec in topology.nodes.items():
        service = services[node_service(node_id)]
        env = service["environment"]
        assert service["command"] == ["node"] and env["HIFI_NODE_ID"] == node_id
        assert env["HIFI_ADVERTISE_HOST"] == node_service(node_id)
        assert env["HIFI_TOPOLOGY"] == "/app/" + os.path.relpath(topology_file, REPO)
        waits_for = set(service["depends_on"])
        assert {node_service(c) for c in topology.children(node_id)} <= waits_for
        assert {"kafka", "redis", "placement"} <= waits_for
        if spec.parent:
            assert node_service(node_id) in services[node_service(spec.parent)]["depends_on"]
    assert len([s for s in services if s.startswith("node-")]) == len(topology.nodes)
    assert {"kafka", "redis", "prometheus", "grafana", *HIFI_SERVICES} <= set(services)

    # the certificates: made once per `up` before any HiFi service, which all wait for it to end;
    # the CA's volume is the certs service's alone, each container mounts only its own bundle
    certs = services.pop("certs")
    made = _certs_command(certs)
    assert made.directory == CA_DIR and certs["restart"] == "no" and certs["user"] == "0"
    assert {s.partition(":")[0] for s in made.service} == {"placement", *topology.nodes, "dashboard", "kafka"}
    assert made.keystore == ["kafka"]
    assert _copied(certs) == {name: set(bundle.files) for name, bundle in tls_bundles(topology).items()}
    for name, service in services.items():
        mounted = [v for v in service.get("volumes", []) if _volume_source(v).startswith(("tls-", "hifi-ca"))]
        expected = [tls_volume(name)] if name in tls_bundles(topology) else []
        assert [_volume_source(v) for v in mounted] == expected, name
        assert all(_read_only(v) for v in mounted), name
    # the Kafka users and ACLs: made on the broker's own loopback listener, before any HiFi service
    setup = services.pop("kafka-setup")
    assert setup["network_mode"] == "service:kafka" and setup["restart"] == "no"
    assert setup["image"].startswith("hifi:")   # the code that sets up the embedded broker: hifi kafka-setup
    assert setup["command"] == ["kafka-setup", "--bootstrap", "127.0.0.1:9094"]
    assert set(setup["environment"]) == {"HIFI_TOPOLOGY", *(password_variable(u) for u in kafka_users(topology))}
    assert "HIFI_KAFKA_BOOTSTRAP" not in setup["environment"] and "HIFI_KAFKA_USERNAME" not in setup["environment"]
    assert "SASL_SSL://:9092" in services["kafka"]["environment"]["KAFKA_LISTENERS"]
    assert "PLAINTEXT://:" not in services["kafka"]["environment"]["KAFKA_LISTENERS"].replace("SASL_SSL", "")
    assert services["kafka"]["environment"]["KAFKA_ALLOW_EVERYONE_IF_NO_ACL_FOUND"] == "false"
    for name, service in services.items():
        assert service.get("healthcheck", {}).get("test"), f"{name} has no health check"
        assert service["restart"] == "unless-stopped"
        waits = {k: c["condition"] for k, c in service.get("depends_on", {}).items()}
        assert all(c == "service_healthy" for k, c in waits.items() if k not in ("certs", "kafka-setup"))
        if service.get("image", "").startswith("hifi:"):
            assert waits["certs"] == waits["kafka-setup"] == "service_completed_successfully"
            assert service["environment"]["HIFI_KAFKA_USERNAME"] in kafka_users(topology)
            assert service["environment"]["HIFI_TLS_DIR"] == TLS_DIR
            env = service["environment"]
            assert env["HIFI_KAFKA_BOOTSTRAP"] == "kafka:9092" and env["HIFI_KAFKA_CA"] == f"{TLS_DIR}/ca.pem"
            if name == "agents":   # it publishes readings only: no MDR user
                assert "HIFI_REDIS_URL" not in env
                continue
            # each service its own MDR user, whose password the redis service knows
            user = env["HIFI_KAFKA_USERNAME"]
            assert env["HIFI_REDIS_URL"].startswith(f"redis://{user}:") and "@redis:6379/" in env["HIFI_REDIS_URL"]
            assert f'"user {user} on >$${secret_variable("REDIS", user)} ' in services["redis"]["command"][-1]

    # only the dashboard and Grafana are published, on the host's loopback; every volume named
    # and declared (bind mounts only for config files)
    published = {name: [p if isinstance(p, dict) else dict(zip(("host_ip", "published"), str(p).split(":")[:2],
                                                               strict=True))
                        for p in s.get("ports", [])] for name, s in services.items() if s.get("ports")}
    assert set(published) == {"dashboard", "grafana"}
    assert all(p["host_ip"] == "127.0.0.1" for ports in published.values() for p in ports), published
    declared = set(resolved["volumes"])
    for name, service in services.items():
        for volume in service.get("volumes", []):
            source = volume["source"] if isinstance(volume, dict) else str(volume).split(":")[0]
            kind = volume.get("type") if isinstance(volume, dict) else ("bind" if source.startswith(("/", ".")) else
                                                                           "volume")
            if kind == "volume":
                assert source in declared, f"{name}: volume {source} is not declared"
            else:
                assert os.path.relpath(source, REPO).startswith("deploy"), f"{name}: bind mount {source}"
    for node_id in topology.nodes:
        assert f"{node_service(node_id)}-state" in declared
    assert {"kafka-data", "redis-data", "hifi-archive"} <= declared


def _certs_command(certs: dict):
    """The `hifi certs` line of the certs service's script, as the CLI parses it."""
    line = next(line for line in certs["entrypoint"][-1].splitlines() if line.startswith("hifi certs "))
    return build_parser().parse_args(shlex.split(line.removesuffix("> /dev/null"))[1:])


def _copied(certs: dict) -> dict[str, set[str]]:
    """What the certs service's script copies into each container's bundle: container -> file names."""
    found: dict[str, set[str]] = {}
    for line in certs["entrypoint"][-1].splitlines():
        if " && cp " in line:
            *sources, target = line.split(" && cp ")[1].split()
            found[target.rstrip("/").rpartition("/")[2]] = {os.path.basename(f) for f in sources}
    return found


def _volume_source(volume) -> str:
    return volume["source"] if isinstance(volume, dict) else str(volume).split(":")[0]


def _read_only(volume) -> bool:
    return volume.get("read_only", False) if isinstance(volume, dict) else str(volume).endswith(":ro")


def test_each_container_holds_what_the_security_page_says_and_no_more():
    """docs/security.md's table of what each container holds, against the rendered compose file:
    its TLS files (the certs service's copies into its own volume), its Redis user, its Kafka user."""
    topology = load_topology(DEFAULT_TOPOLOGY)
    services = compose_model(topology, DEFAULT_TOPOLOGY)["services"]
    with open(os.path.join(REPO, "docs", "security.md")) as fh:
        rows = [line.strip().split("|")[1:-1] for line in fh if line.strip().startswith("| `")]
    table = {cells[0].strip().strip("`"): [c.strip() for c in cells[1:]] for cells in rows if len(cells) == 4}
    copied = _copied(services["certs"])
    assert set(table) == {"placement", "node-<id>", "dashboard", "agents", "kafka", "prometheus"}
    for name, (files, redis_user, _) in table.items():
        said = set(re.findall(r"`([^`]+)`", files))
        for node in topology.nodes if name == "node-<id>" else [None]:
            service = name.replace("<id>", node) if node else name
            assert copied[service] == {f.replace("<id>", node) if node else f for f in said}, service
            env = services[service].get("environment", {})
            has_user = "HIFI_REDIS_URL" in env if isinstance(env, dict) else False
            assert has_user == (redis_user != "none"), service


def test_redis_keeps_an_append_only_file_with_a_user_per_service_and_kafka_runs_kraft():
    services = compose_model(load_topology(DEFAULT_TOPOLOGY), DEFAULT_TOPOLOGY)["services"]
    redis_command = " ".join(services["redis"]["command"])
    assert "--appendonly yes" in redis_command and '"user default off"' in redis_command
    assert "--aclfile /data/users.acl" in redis_command and "PASSWORD" not in redis_command.split("exec")[-1]
    kafka = services["kafka"]
    assert kafka["image"].startswith("apache/kafka:")
    assert kafka["environment"]["KAFKA_PROCESS_ROLES"] == "broker,controller"


def test_every_hifi_service_runs_a_hifi_command_the_cli_accepts():
    """The image's entrypoint is `hifi`; commands and health checks must be its subcommands."""
    services = compose_model(load_topology(DEFAULT_TOPOLOGY), DEFAULT_TOPOLOGY)["services"]
    parser = build_parser()
    commands = {_certs_command(services["certs"]).command}
    for name, service in services.items():
        if not service["image"].startswith("hifi:") or name == "certs":   # certs: a script (above)
            continue
        args = parser.parse_args(service["command"])
        commands.add(args.command)
        if name == "kafka-setup":   # runs once, to completion (the others wait for it)
            assert service["restart"] == "no" and "healthcheck" not in service
            continue
        check = service["healthcheck"]["test"]
        assert check[:2] == ["CMD", "hifi"], name
        assert parser.parse_args(check[2:]).command == "health"
    assert commands == {"certs", "kafka-setup", "node", "placement", "agents", "dashboard"}


def test_a_topology_outside_the_repository_is_mounted_into_the_containers(tmp_path):
    outside = tmp_path / "site.yaml"
    shutil.copy(os.path.join(TOPOLOGIES, "small.yaml"), outside)
    model = compose_model(load_topology(str(outside)), str(outside))
    node = model["services"][node_service("dock-a")]
    assert node["environment"]["HIFI_TOPOLOGY"] == "/etc/hifi/topology/site.yaml"
    assert f"{tmp_path}:/etc/hifi/topology:ro" in node["volumes"]


def test_spark_cluster_renders_the_nodes_on_a_standalone_cluster_that_validates(tmp_path):
    topology = load_topology(DEFAULT_TOPOLOGY)
    local = compose_model(topology, DEFAULT_TOPOLOGY)["services"]
    assert not any(name.startswith("spark-") for name in local)
    assert all("SPARK_MASTER" not in local[node_service(n)]["environment"] for n in topology.nodes)
    path = tmp_path / "docker-compose.yml"
    path.write_text(render_compose(topology, DEFAULT_TOPOLOGY, spark_cluster=True))
    secrets = secret_variables(topology, spark_cluster=True)
    done = _compose_config(path, {name: f"secret-{i}" for i, name in enumerate(secrets)})
    assert done.returncode == 0, done.stderr
    services = yaml.safe_load(done.stdout)["services"]
    assert {"spark-master", "spark-worker-1", "spark-worker-2"} <= set(services)
    for node in topology.nodes:
        env = services[node_service(node)]["environment"]
        assert env["SPARK_MASTER"] == "spark://spark-master:7077" and env["HIFI_SPARK_CORES_MAX"] == "1"
        assert env["HIFI_SPARK_SECRET"] == f"secret-{secrets.index('HIFI_SPARK_SECRET')}"
    worker = services["spark-worker-1"]["environment"]["SPARK_DAEMON_JAVA_OPTS"]
    assert "-Dspark.authenticate=true" in worker and "spark.authenticate.secret=secret-" in worker
    # the executors reach what their tasks read and write: the nodes' state where the drivers keep
    # it (a batch's archive, checkpoints), the CA their Kafka clients check the broker with, and the
    # credentials each driver passes on
    def mounts(service: dict) -> dict[str, tuple[str, str]]:   # target -> (source, mode), as compose writes them
        return {parts[1]: (parts[0], parts[2] if len(parts) > 2 else "rw")
                for parts in (v.split(":") for v in service["volumes"])}

    states = {node_service(n): services[node_service(n)] for n in topology.nodes}
    for name, node in states.items():
        assert mounts(node)["/var/lib/hifi/state"][0] == "hifi-state", (name, node["volumes"])
        assert node["environment"]["HIFI_STATE_DIR"].startswith("/var/lib/hifi/state/")
    assert len({node["environment"]["HIFI_STATE_DIR"] for node in states.values()}) == len(states)
    for worker_name in ("spark-worker-1", "spark-worker-2"):
        found = mounts(services[worker_name])
        assert found["/var/lib/hifi/state"][0] == "hifi-state"
        assert found["/var/lib/hifi/tls"] == ("tls-spark-workers", "ro")
        assert any(node["environment"]["HIFI_KAFKA_CA"] == "/var/lib/hifi/tls/ca.pem" for node in states.values())
    model = compose_model(topology, DEFAULT_TOPOLOGY, spark_cluster=True)
    assert "ca.pem" in " ".join(model["services"]["certs"]["entrypoint"][2].split("\n")[1:]) and \
        "tls-spark-workers" in model["volumes"]
    from dsp.spark.session import executor_kafka_environment

    passed = executor_kafka_environment(services[node_service("door1")]["environment"])
    assert set(passed) == {f"spark.executorEnv.{v}" for v in ("HIFI_KAFKA_USERNAME", "HIFI_KAFKA_PASSWORD",
                                                              "HIFI_KAFKA_CA")}
    without = _compose_config(path, {name: f"secret-{i}" for i, name in enumerate(secrets)
                                     if name != "HIFI_SPARK_SECRET"})
    assert without.returncode != 0 and "HIFI_SPARK_SECRET" in without.stderr


def test_grafana_shows_only_metrics_the_services_expose():
    with open(os.path.join(REPO, "deploy", "grafana", "dashboards", "hifi.json")) as fh:
        dashboard = json.load(fh)
    with open(os.path.join(REPO, "services", "metrics.py")) as fh:
        exposed = fh.read()
    used = {re.sub(r"_(bucket|total)$", "", name) for panel in dashboard["panels"] for target in panel["targets"]
            for name in re.findall(r"hifi_[a-z_]+", target["expr"])}
    assert used and all(f'"{name}"' in exposed for name in used), used
    with open(os.path.join(REPO, "deploy", "prometheus", "prometheus.yml")) as fh:
        prometheus = yaml.safe_load(fh)
    sd = prometheus["scrape_configs"][0]["http_sd_configs"][0]["url"]
    assert sd == "https://dashboard:8470/api/prometheus-targets"
    assert prometheus["scrape_configs"][0]["tls_config"]["ca_file"] == "/etc/prometheus/tls/ca.pem"


def test_a_services_redis_user_runs_the_mdr_on_its_own_keys_and_nothing_else(tmp_path):
    """compose's Redis users, on a real redis-server started from the ACL file compose writes: a
    node's user does all the MDR does (scripts, streams, scans) on its own keys, reads every key,
    and is refused another node's records, a token and every administrative command; without
    credentials nothing. (What each service may write: tests/test_redis_acls.py.)"""
    import redis

    from mdr.repository import MDR, ViewRecord, now_ms
    from services.compose import redis_acl_lines
    from services.ports import free_port
    from wire.identity import TokenRecord

    port = free_port()
    acl = tmp_path / "users.acl"
    acl.write_text("\n".join(redis_acl_lines(load_topology(DEFAULT_TOPOLOGY), lambda u: f"pw-{u}")) + "\n")
    server = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                               "--dir", str(tmp_path), "--aclfile", str(acl)], stdout=subprocess.DEVNULL)
    try:
        mdr = MDR.connect(f"redis://node-door1:pw-node-door1@127.0.0.1:{port}/0")
        for _ in range(50):
            try:
                mdr.r.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.1)
        mdr.register_node("door1", "edge", "warehouse", [], "127.0.0.1:1")
        assert mdr.heartbeat("door1", 5000)
        mdr.export_view(ViewRecord("v", "door1", "t", "", "", "", (), ("*",), now_ms()))
        assert mdr.add_counts("door1", "q", 1, {"rows_in": 3}) and mdr.stats("door1")["rows_in"] == 3
        assert mdr.changes() and [n.id for n in mdr.nodes()] == ["door1"]
        for refused in (lambda: mdr.register_node("door2", "edge", "warehouse", [], "127.0.0.1:2"),
                        lambda: mdr.put_token("x" * 64, TokenRecord("mallory", ("admin",), 0)),
                        lambda: mdr.put_desired({"door2": {"q": "{}"}})):
            with pytest.raises(redis.exceptions.NoPermissionError):
                refused()
        for command in (("FLUSHALL",), ("CONFIG", "SET", "requirepass", "x"), ("KEYS", "*"), ("ACL", "LIST"),
                        ("SET", "elsewhere", "1")):
            with pytest.raises(redis.exceptions.NoPermissionError):
                mdr.r.execute_command(*command)
        anonymous = redis.Redis(port=port, socket_timeout=5)
        with pytest.raises(redis.exceptions.AuthenticationError):
            anonymous.get("hifi:nodes")
    finally:
        server.terminate()
        server.wait(timeout=10)


def _certify_args(model: dict) -> list[str]:
    """The `hifi certs` arguments the compose file's certs service runs."""
    script = model["services"]["certs"]["entrypoint"][2]
    line = next(line for line in script.splitlines() if line.startswith("hifi certs"))
    return shlex.split(line.split(">")[0])[2:]


def test_each_certificate_is_valid_for_its_own_service_only(tmp_path):
    """door1's key must not pass a TLS check as the placement service (it would collect the tokens
    the dashboard forwards): one certificate per service, with its own host name and the local ones."""
    import socket
    import ssl
    import threading

    from cryptography import x509

    from services import certs

    topology = load_topology(DEFAULT_TOPOLOGY)
    args = _certify_args(compose_model(topology, DEFAULT_TOPOLOGY))
    services = [args[i + 1] for i, a in enumerate(args) if a == "--service"]
    assert "--host" not in args
    certs.make_certificates(str(tmp_path), services, (), "t")
    for given in services:
        name, own = certs.service_hosts(given)
        with open(tmp_path / f"{name}.pem", "rb") as fh:
            sans = x509.load_pem_x509_certificate(fh.read()).extensions.get_extension_for_class(
                x509.SubjectAlternativeName).value
        names = set(sans.get_values_for_type(x509.DNSName))
        assert names == {name, *own, *(n for n in certs.LOCAL_NAMES if not n[0].isdigit())}, (name, names)

    def handshake(presenting: str, as_host: str) -> None:
        server = certs.server_context(str(tmp_path), presenting)
        listener = socket.create_server(("127.0.0.1", 0))
        port = listener.getsockname()[1]

        def serve() -> None:
            conn, _ = listener.accept()
            try:
                server.wrap_socket(conn, server_side=True).close()
            except (ssl.SSLError, OSError):
                conn.close()

        thread = threading.Thread(target=serve)
        thread.start()
        try:
            client = certs.client_context(str(tmp_path))
            with socket.create_connection(("127.0.0.1", port)) as raw, client.wrap_socket(raw, server_hostname=as_host):
                pass
        finally:
            thread.join(5)
            listener.close()

    handshake("placement", "placement")
    with pytest.raises(ssl.SSLCertVerificationError):
        handshake("door1", "placement")


@pytest.mark.parametrize(("nodes", "said"), [
    ("  - {id: placement, tier: core}\n", "node id 'placement' is the name of HiFi's own placement service"),
    ("  - {id: hq, tier: core}\n  - {id: a-b, tier: edge, parent: hq}\n  - {id: a_b, tier: edge, parent: hq}\n",
     "users 'node-a-b' and 'node-a_b' would share one password variable"),
])
def test_names_a_deployment_cannot_give_each_their_own_are_one_line(tmp_path, nodes, said):
    path = tmp_path / "t.yaml"
    path.write_text(f"name: t\nnodes:\n{nodes}")
    done = subprocess.run([sys.executable, "-m", "services.cli", "deploy", "--topology", str(path), "compose"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and said in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert len([line for line in done.stderr.splitlines() if line.strip()]) == 1, done.stderr
