"""HiFi's Kafka and Redis code against the compose deployment's own images, in containers
(testcontainers): Apache Kafka in KRaft mode and Redis behind a password. These run where a
Docker engine answers and are skipped, saying why, where none does (as on the machine the suite
was written on): the embedded broker and Redis cover the same code paths in the rest of the suite.
"""

from __future__ import annotations

import threading
import time

import pytest

from services.compose import KAFKA_IMAGE, REDIS_IMAGE, compose_model
from services.ports import free_port


def _engine_problem() -> str | None:
    try:
        import docker

        docker.from_env(timeout=5).ping()
        return None
    except Exception as exc:  # noqa: BLE001 - whatever stops us from reaching an engine
        return f"no Docker engine to run containers in ({type(exc).__name__}: {str(exc)[:120]})"


ENGINE_PROBLEM = _engine_problem()
pytestmark = pytest.mark.skipif(ENGINE_PROBLEM is not None, reason=ENGINE_PROBLEM or "")
PASSWORD = "container-test-secret"


@pytest.fixture(scope="module")
def kafka_bootstrap():
    from testcontainers.core.container import DockerContainer
    from testcontainers.core.waiting_utils import wait_for_logs

    port = free_port()
    env = dict(compose_model(_topology(), _topology_file())["services"]["kafka"]["environment"])
    env.update(KAFKA_LISTENERS="PLAINTEXT://:9092,CONTROLLER://:9093",
               KAFKA_ADVERTISED_LISTENERS=f"PLAINTEXT://localhost:{port}",
               KAFKA_LISTENER_SECURITY_PROTOCOL_MAP="CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
               KAFKA_CONTROLLER_QUORUM_VOTERS="1@localhost:9093")
    container = DockerContainer(KAFKA_IMAGE).with_bind_ports(9092, port)
    for name, value in env.items():
        container = container.with_env(name, value)
    container.start()
    try:
        wait_for_logs(container, "Kafka Server started", timeout=180)
        yield f"localhost:{port}"
    finally:
        container.stop()


@pytest.fixture(scope="module")
def redis_url():
    from testcontainers.community.redis import RedisContainer

    with RedisContainer(REDIS_IMAGE, password=PASSWORD) as container:
        host, port = container.get_container_host_ip(), container.get_exposed_port(6379)
        yield f"redis://:{PASSWORD}@{host}:{port}/0"


def _topology_file() -> str:
    from services.paths import DEFAULT_TOPOLOGY

    return DEFAULT_TOPOLOGY


def _topology():
    from glue.topology import load_topology

    return load_topology(_topology_file())


def test_the_mdr_works_on_redis_behind_a_password(redis_url):
    from mdr.repository import MDR

    mdr = MDR.connect(redis_url)
    mdr.clear()
    mdr.register_node("door1", "edge", "warehouse", (), "node-door1:50051")
    mdr.heartbeat("door1", 5000)
    assert [(n.id, n.alive) for n in mdr.nodes()] == [("door1", True)]
    assert mdr.add_range_counts("door1", "hifi.raw.door1", 0, 0, 10, 1000, {"rows_in": 7}, {"r1:reads": 7})
    assert not mdr.add_range_counts("door1", "hifi.raw.door1", 0, 0, 10, 1000, {"rows_in": 7}, {"r1:reads": 7})
    assert mdr.stats("door1")["rows_in"] == 7 and mdr.receptor_stats("door1")["r1"]["reads"] == 7


def test_read_cycles_round_trip_through_apache_kafka(kafka_bootstrap):
    from wire.codec import TagObservation, decode_read_cycle, encode_read_cycle
    from wire.kafka import admin, consumers, producers
    from wire.topics import raw_topic

    topic = raw_topic("door1")
    admin.ensure_topics(kafka_bootstrap, [topic])
    producer = producers.make_producer(kafka_bootstrap)
    now = int(time.time() * 1000)
    for cycle in range(20):
        key, value = encode_read_cycle("door1-r1", cycle, now + cycle, [TagObservation(f"tag{cycle}", 1, 0.5)])
        producer.send(topic, key=key, value=value)
    producer.flush()
    stop = threading.Event()
    seen = []
    for record in consumers.tail(kafka_bootstrap, [topic], stop):
        seen.extend(decode_read_cycle(record.value, record.partition, record.offset, now))
        if len(seen) >= 20:
            stop.set()
    assert sorted(row[1] for row in seen) == sorted(f"tag{c}" for c in range(20))
