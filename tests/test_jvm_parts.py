"""The JVM parts set-up fetches (deploy/fetch-jars.sh) and the embedded broker's settings."""

from __future__ import annotations

import os
import subprocess

import pytest

from services import kafka_broker

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_an_unreachable_registry_is_one_line_not_a_maven_trace(tmp_path):
    settings = tmp_path / "settings.xml"   # every artifact from a port nothing listens on
    settings.write_text("<settings><mirrors><mirror><id>none</id><mirrorOf>*</mirrorOf>"
                        "<url>http://127.0.0.1:9/</url></mirror></mirrors></settings>")
    done = subprocess.run(["bash", "deploy/fetch-jars.sh", str(tmp_path / "jars")], cwd=REPO, capture_output=True,
                          text=True, timeout=300,
                          env={**os.environ, "HIFI_MAVEN_ARGS": f"-s {settings} -Dmaven.repo.local={tmp_path / 'm2'}"})
    assert done.returncode == 1
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert lines[-1].startswith("could not fetch the kafka jars: "), done.stderr
    assert "ERROR" not in done.stderr and "at org." not in done.stderr
    assert not (tmp_path / "jars" / "kafka").exists()


def test_missing_jars_say_what_to_run(tmp_path, monkeypatch):
    monkeypatch.setenv("HIFI_JARS", str(tmp_path))
    with pytest.raises(kafka_broker.BrokerError, match="run `make setup`"):
        kafka_broker.kafka_classpath()


def test_the_broker_takes_clients_over_sasl_ssl_only_and_denies_what_no_acl_allows():
    text = kafka_broker.server_properties("/d", 9092, 9093, "/k.p12", "kp", "/ca.pem", "secret")
    settings = dict(line.split("=", 1) for line in text.splitlines())
    assert settings["listeners"] == "SASL_SSL://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093"
    assert settings["listener.security.protocol.map"] == "SASL_SSL:SASL_SSL,CONTROLLER:SASL_PLAINTEXT"
    assert settings["sasl.enabled.mechanisms"] == "SCRAM-SHA-512"
    assert settings["super.users"] == "User:admin" and settings["allow.everyone.if.no.acl.found"] == "false"
    assert "PLAINTEXT://" not in settings["listeners"].replace("SASL_SSL://", "")


def test_a_cluster_id_is_never_read_as_an_option():
    """One id in 64 would start with "-" (URL-safe base64): the storage tool then failed to format."""
    ids = [kafka_broker.cluster_id() for _ in range(2_000)]
    assert all(len(i) == 22 and not i.startswith("-") for i in ids) and len(set(ids)) == len(ids)


def test_the_spark_connector_is_the_version_of_the_pinned_pyspark():
    """Spark's Kafka connector is built against one Spark: another pyspark fails at its first read."""
    import re
    import tomllib

    with open(os.path.join(REPO, "pyproject.toml"), "rb") as fh:
        pinned = next(d for d in tomllib.load(fh)["project"]["dependencies"] if d.startswith("pyspark=="))
    with open(os.path.join(REPO, "deploy", "jvm", "spark", "pom.xml"), encoding="utf-8") as fh:
        connector = re.search(r"<spark.version>(.+?)</spark.version>", fh.read()).group(1)
    import pyspark

    assert pinned == f"pyspark=={connector}" and pyspark.__version__ == connector


def test_the_spark_set_brings_only_what_pysparks_jars_lack():
    from base.jar_sets import jars_of

    names = [os.path.basename(jar) for jar in jars_of("spark")]
    assert any(n.startswith("spark-sql-kafka-0-10_2.13-") for n in names), names
    assert any(n.startswith("kafka-clients-") for n in names)
    clashing = [n for n in names if n.startswith(("hadoop-", "scala-", "slf4j-", "spark-tags", "snappy", "lz4"))]
    assert clashing == []


def test_a_missing_connector_says_what_to_run(tmp_path, monkeypatch):
    from dsp.spark.session import SparkConnectorMissing, connector_jars

    monkeypatch.setenv("HIFI_JARS", str(tmp_path))
    with pytest.raises(SparkConnectorMissing, match="run `make setup`"):
        connector_jars()
