"""The topology's Kafka users and ACLs (services.kafka_acls) on the embedded Apache Kafka broker,
applied by services.kafka_setup as `hifi up` applies them: each principal reads and writes what
its rules allow and the broker refuses it the rest."""

from __future__ import annotations

import logging
import os
import time

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from glue.topology import parse_topology
from services.kafka_acls import users
from services.paths import DEFAULT_TOPOLOGY
from wire.kafka import admin, producers
from wire.topics import control_topic, raw_topic, results_topic, rqs_topic, view_topic

pytestmark = pytest.mark.integration


def _topology():
    """The default topology, with the region's location_counts also readable by `analyst`."""
    with open(DEFAULT_TOPOLOGY) as fh:
        text = fh.read()
    marked = "  - nodes: [region]\n    readers: [role:user]\n    sql: |\n      CREATE VIEW location_counts AS"
    assert marked in text
    return parse_topology(text.replace(marked, marked.replace("[role:user]", "[analyst, role:user]")),
                          DEFAULT_TOPOLOGY)


class Principal:
    """librdkafka clients (as kcat's) that authenticate as one SCRAM user of the embedded broker."""

    def __init__(self, bootstrap: str, user: str, password: str) -> None:
        self.config = {"bootstrap.servers": bootstrap, "security.protocol": "SASL_SSL",
                       "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": user, "sasl.password": password,
                       "ssl.ca.location": os.environ["HIFI_KAFKA_CA"], "log.connection.close": False,
                       "logger": logging.getLogger("acl-test")}
        self.group = f"{user}.acl-test"   # a group of its own (services.kafka_acls.groups)

    def reads(self, topic: str) -> bool:
        """True when it fetches the topic's record; False when the broker refuses it."""
        consumer = Consumer({**self.config, "group.id": self.group, "enable.auto.commit": False})
        try:
            described = consumer.list_topics(topic, timeout=10).topics[topic].error
            if described is not None:   # not even told of the topic
                assert described.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, described
                return False
            consumer.assign([TopicPartition(topic, 0, 0)])
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline:
                message = consumer.poll(0.5)
                if message is None:
                    continue
                if message.error() is None:
                    return True
                assert message.error().code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, message.error()
                return False
            raise AssertionError(f"{topic}: neither a record nor a refusal in 15 s")
        finally:
            consumer.close()

    def writes(self, topic: str) -> bool:
        producer = Producer({**self.config, "message.timeout.ms": 10_000, "allow.auto.create.topics": False})
        outcome: list = []
        producer.produce(topic, b"forged?", on_delivery=lambda error, _message: outcome.append(error))
        producer.flush(15)
        assert outcome, f"{topic}: no answer in 15 s"
        if outcome[0] is None:
            return True
        assert outcome[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, outcome[0]
        return False


@pytest.fixture(scope="module")
def principals(servers):
    topology = _topology()
    passwords = servers.authorize(topology)
    assert set(passwords) == set(users(topology)) - {"admin"}
    topics = [raw_topic("door1"), raw_topic("door2"), control_topic("door1"),
              view_topic("region", "location_counts"), view_topic("region", "stock_alerts"),
              view_topic("door1", "smoothed_rfid_stream"), view_topic("door2", "smoothed_rfid_stream"),
              rqs_topic("q-acl", "door2"), results_topic("q-acl", "region")]
    admin.ensure_topics(servers.bootstrap, topics)
    producer = producers.make_producer(servers.bootstrap)   # this process is the broker's admin
    producers.deliver(producer, [producer.send(topic, b"row") for topic in topics])
    producer.close()
    return lambda user: Principal(servers.bootstrap, user, passwords[user])


def test_a_principal_named_by_one_view_reads_its_topic_and_nothing_else(principals):
    analyst = principals("analyst")
    assert analyst.reads(view_topic("region", "location_counts"))
    refused = [view_topic("region", "stock_alerts"), view_topic("door1", "smoothed_rfid_stream"), raw_topic("door1"),
               rqs_topic("q-acl", "door2"), results_topic("q-acl", "region")]
    assert [topic for topic in refused if analyst.reads(topic)] == []
    assert not analyst.writes(view_topic("region", "location_counts"))
    assert not analyst.writes(view_topic("door1", "smoothed_rfid_stream"))


def test_a_node_writes_its_own_topics_and_not_a_siblings(principals):
    door1 = principals("node-door1")
    assert door1.writes(view_topic("door1", "smoothed_rfid_stream"))
    assert door1.reads(raw_topic("door1")) and not door1.reads(raw_topic("door2"))
    assert not door1.writes(view_topic("door2", "smoothed_rfid_stream"))
    assert not door1.writes(rqs_topic("q-acl", "door2"))
    assert not door1.writes(results_topic("q-acl", "region"))
    assert not door1.reads(view_topic("door2", "smoothed_rfid_stream"))
    warehouse = principals("node-warehouse")
    assert warehouse.reads(view_topic("door1", "smoothed_rfid_stream")) and warehouse.reads(rqs_topic("q-acl", "door2"))
    assert not warehouse.reads(raw_topic("door1"))
    assert not warehouse.reads(view_topic("region", "location_counts"))   # above it


def test_the_services_and_the_operator_have_their_own_rights(principals):
    agents, operator = principals("agents"), principals("operator")
    assert agents.writes(raw_topic("door2")) and not agents.reads(raw_topic("door2"))
    assert agents.reads(control_topic("door1")) and not agents.writes(control_topic("door1"))
    assert not agents.writes(view_topic("door1", "smoothed_rfid_stream"))
    assert principals("placement").reads(results_topic("q-acl", "region"))
    assert not principals("placement").reads(raw_topic("door1"))
    assert principals("dashboard").reads(view_topic("region", "stock_alerts"))
    assert operator.reads(raw_topic("door1")) and not operator.writes(raw_topic("door1"))
