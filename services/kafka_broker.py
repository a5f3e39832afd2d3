"""The embedded Apache Kafka broker: one KRaft node (broker and controller) on loopback.

Started by services.embedded when HIFI_KAFKA_BOOTSTRAP is not set, from the jars `make setup`
fetched (deploy/fetch-jars.sh into .venv/jars/kafka). Clients reach it over SASL_SSL with SCRAM
users only (its certificate from a CA made for the run); the controller's own listener takes the
broker alone (SASL PLAIN, its password made for the run). Every right is an ACL
(StandardAuthorizer, deny unless allowed): services.kafka_acls applies the topology's users and
ACLs, as compose's kafka-setup does. `admin` is its one super user; its SCRAM credential is
written at format time, so the broker needs no unauthenticated door to be set up.
"""

from __future__ import annotations

import base64
import contextlib
import glob
import os
import secrets
import socket
import subprocess
import sys
import time
from dataclasses import dataclass

from base.jar_sets import jar_dir
from services import certs
from services.kafka_acls import ADMIN_USER, MECHANISM
from wire.errors import HiFiError

KAFKA_VERSION = "4.4.0"     # deploy/jvm/kafka/pom.xml's; compose's image is the same version
HEAP = "-Xmx768m"           # beside a Spark driver and Redis on 2 cores and 24 GB
START_TIMEOUT_S = 60.0


class BrokerError(HiFiError, RuntimeError):
    """The embedded broker could not be started; the message says what to run or check."""


def kafka_classpath() -> str:
    jars = jar_dir("kafka")
    if not glob.glob(os.path.join(jars, f"kafka_2.13-{KAFKA_VERSION}.jar")):
        raise BrokerError(f"Apache Kafka {KAFKA_VERSION}'s jars are not in {jars}: run `make setup` "
                          "(it fetches them with Maven), or set HIFI_KAFKA_BOOTSTRAP to an existing broker")
    return os.path.join(jars, "*")


def cluster_id() -> str:
    """A new KRaft cluster id: 16 random bytes, URL-safe base64 without padding (Kafka's Uuid),
    never starting with "-" (the storage tool would read it as an option; Kafka's own Uuid draws
    again then too)."""
    while True:
        found = base64.urlsafe_b64encode(secrets.token_bytes(16)).decode().rstrip("=")
        if not found.startswith("-"):
            return found


@dataclass(frozen=True)
class Broker:
    """A running embedded broker: where clients connect and as whom."""

    bootstrap: str
    proc: subprocess.Popen
    admin_password: str
    ca_file: str

    def client_environment(self) -> dict[str, str]:
        """The HIFI_KAFKA_* settings that make this process's clients (wire.kafka.config.client_security)
        its admin over SASL_SSL."""
        return {"HIFI_KAFKA_USERNAME": ADMIN_USER, "HIFI_KAFKA_PASSWORD": self.admin_password,
                "HIFI_KAFKA_CA": self.ca_file}


def server_properties(data_dir: str, port: int, controller_port: int, keystore: str, keystore_password: str,
                      ca_file: str, admin_password: str) -> str:
    """The broker's server.properties: SASL_SSL/SCRAM for clients, SASL PLAIN for its controller."""
    scram = f'org.apache.kafka.common.security.scram.ScramLoginModule required username="{ADMIN_USER}" ' \
            f'password="{admin_password}";'
    plain = f'org.apache.kafka.common.security.plain.PlainLoginModule required username="{ADMIN_USER}" ' \
            f'password="{admin_password}" user_{ADMIN_USER}="{admin_password}";'
    settings = {
        "process.roles": "broker,controller", "node.id": "1",
        "controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
        "listeners": f"SASL_SSL://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"SASL_SSL://127.0.0.1:{port}",
        "listener.security.protocol.map": "SASL_SSL:SASL_SSL,CONTROLLER:SASL_PLAINTEXT",
        "inter.broker.listener.name": "SASL_SSL", "controller.listener.names": "CONTROLLER",
        "sasl.enabled.mechanisms": MECHANISM, "sasl.mechanism.inter.broker.protocol": MECHANISM,
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": scram,
        "sasl.mechanism.controller.protocol": "PLAIN",
        "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.controller.plain.sasl.jaas.config": plain,
        "ssl.keystore.type": "PKCS12", "ssl.keystore.location": keystore,
        "ssl.keystore.password": keystore_password, "ssl.key.password": keystore_password,
        "ssl.truststore.type": "PEM", "ssl.truststore.location": ca_file,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": f"User:{ADMIN_USER}", "allow.everyone.if.no.acl.found": "false",
        "log.dirs": data_dir, "num.partitions": "1", "auto.create.topics.enable": "true",
        "offsets.topic.replication.factor": "1", "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1", "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1", "group.initial.rebalance.delay.ms": "0",
        "num.network.threads": "2", "num.io.threads": "2", "background.threads": "2",
        "message.max.bytes": str(16 * 1024 * 1024), "log.retention.hours": "168",
    }
    return "".join(f"{key}={value}\n" for key, value in settings.items())


# Warnings and errors, and the line that says the broker is up, to the broker's log (its stdout)
LOG4J2 = """status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = warn
rootLogger.appenderRef.out.ref = out
logger.started.name = kafka.server.KafkaRaftServer
logger.started.level = info
"""


def class_archive() -> str:
    """The JVM's class-data archive of the broker's classes (`python -m services.kafka_broker
    --archive`, run by `make setup`): the broker answers ~2 s sooner with it (5.9 -> 4.0 s on the
    2-core machine). A JVM that cannot use it (other jars, another JDK) starts without it."""
    return jar_dir("kafka") + ".jsa"


def _java(classpath: str, main: str, *args: str, home: str, archive_at_exit: str = "") -> list[str]:
    if archive_at_exit:
        sharing = [f"-XX:ArchiveClassesAtExit={archive_at_exit}"]
    elif os.path.exists(class_archive()):
        sharing = [f"-XX:SharedArchiveFile={class_archive()}", "-Xlog:cds=off", "-Xlog:cds+dynamic=off"]
    else:
        sharing = []
    return ["java", HEAP, "-XX:+UseSerialGC", "-Djava.awt.headless=true", *sharing,
            f"-Dlog4j2.configurationFile={os.path.join(home, 'log4j2.properties')}", "-cp", classpath, main, *args]


def start_kafka(workdir: str, port: int, controller_port: int, archive_at_exit: str = "") -> Broker:
    """Format a new KRaft log in `workdir`/kafka and start the broker on loopback, clients on
    `port`; return once it answers its admin over SASL_SSL. `archive_at_exit`: the broker's JVM
    writes its class-data archive there when it stops."""
    classpath = kafka_classpath()
    home = os.path.join(workdir, "kafka")
    tls = os.path.join(home, "tls")
    certs.make_certificates(tls, services=["kafka"], deployment="embedded")
    keystore = certs.write_keystore(tls, "kafka")
    with open(f"{keystore}.password") as fh:
        keystore_password = fh.read().strip()
    ca_file = os.path.join(tls, "ca.pem")
    admin_password = secrets.token_urlsafe(24)
    config = os.path.join(home, "server.properties")
    fd = os.open(config, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(server_properties(os.path.join(home, "data"), port, controller_port, keystore, keystore_password,
                                   ca_file, admin_password))
    with open(os.path.join(home, "log4j2.properties"), "w") as fh:
        fh.write(LOG4J2)
    log = os.path.join(workdir, "broker.log")
    formatted = subprocess.run(
        _java(classpath, "kafka.tools.StorageTool", "format", "-t", cluster_id(), "-c", config, "--add-scram",
              f"{MECHANISM}=[name={ADMIN_USER},password={admin_password}]", home=home),
        capture_output=True, text=True, timeout=120)
    if formatted.returncode != 0:
        raise BrokerError(f"kafka-storage format failed: {(formatted.stderr or formatted.stdout).strip()[-400:]}")
    with open(log, "wb") as out:
        command = _java(classpath, "kafka.Kafka", config, home=home, archive_at_exit=archive_at_exit)
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, cwd=home)
    broker = Broker(f"127.0.0.1:{port}", proc, admin_password, ca_file)
    try:
        _wait_ready(broker, log)
    except BaseException:
        stop(proc)
        raise
    return broker


def _wait_ready(broker: Broker, log: str) -> None:
    """Until the broker lists its topics to its admin (its listeners open before it serves)."""
    from confluent_kafka.admin import AdminClient

    config = {"bootstrap.servers": broker.bootstrap, "security.protocol": "SASL_SSL", "sasl.mechanism": MECHANISM,
              "sasl.username": ADMIN_USER, "sasl.password": broker.admin_password,
              "ssl.ca.location": broker.ca_file, "log.connection.close": False}
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if broker.proc.poll() is not None:
            raise BrokerError(f"the Kafka broker exited with code {broker.proc.returncode} during start-up: "
                              f"{_tail(log)}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", int(broker.bootstrap.split(":")[1])),
                                                                     timeout=0.5):
            with contextlib.suppress(Exception):
                AdminClient(config).list_topics(timeout=5)
                return
        time.sleep(0.2)
    raise BrokerError(f"the Kafka broker did not answer on {broker.bootstrap} within {START_TIMEOUT_S:.0f} s: "
                      f"{_tail(log)}")


def _tail(path: str, chars: int = 400) -> str:
    with contextlib.suppress(OSError), open(path, errors="replace") as fh:
        return fh.read()[-chars:].strip()
    return ""


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM (Kafka's controlled shutdown), then SIGKILL after 15 s."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)


def write_class_archive() -> None:
    """Run a broker once through what a node's clients do (a topic made, written and read over
    SASL_SSL), and stop it: its JVM writes the class-data archive (`class_archive`)."""
    import tempfile

    from confluent_kafka import Consumer, Producer, TopicPartition

    from services.ports import free_port

    target = class_archive()
    with tempfile.TemporaryDirectory(prefix="hifi-kafka-archive-") as workdir:
        broker = start_kafka(workdir, free_port(), free_port(), archive_at_exit=target + ".tmp")
        try:
            client = {"bootstrap.servers": broker.bootstrap, "security.protocol": "SASL_SSL",
                      "sasl.mechanism": MECHANISM, "sasl.username": ADMIN_USER,
                      "sasl.password": broker.admin_password, "ssl.ca.location": broker.ca_file}
            producer = Producer(client)
            producer.produce("hifi.archive.warm-up", b"x")
            producer.flush(30)
            consumer = Consumer({**client, "group.id": "hifi-archive"})
            consumer.assign([TopicPartition("hifi.archive.warm-up", 0, 0)])
            consumer.poll(10)
            consumer.close()
            del producer   # its threads go before the broker does (else they log its absence)
        finally:
            stop(broker.proc)
    if os.path.exists(target + ".tmp"):
        os.replace(target + ".tmp", target)
        print(f"class-data archive of the broker's classes: {target}")


if __name__ == "__main__":
    if sys.argv[1:] != ["--archive"]:
        raise SystemExit("usage: python -m services.kafka_broker --archive")
    write_class_archive()
