"""Tools that are not HiFi's read HiFi's topics: Debian's kcat and Kafka's own console consumer
(from the jars `make setup` fetched) authenticate with a user's SCRAM credentials (the client
files `hifi up` writes), read the rows of a view that user may read, decoded by `protoc --decode`
against protos/hifi.proto, and are refused a view it may not read (docs/other-tools.md)."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from base.jar_sets import jar_dir
from services.kafka_client_files import write_client_files
from tests.test_kafka_acls import _topology
from wire.codec import encode_row_batch
from wire.kafka import producers
from wire.topics import view_topic

pytestmark = pytest.mark.integration

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
READABLE, REFUSED = view_topic("region", "location_counts"), view_topic("region", "stock_alerts")


@pytest.fixture(scope="module")
def analyst(servers, tmp_path_factory):
    """The analyst's client files, and where a batch of rows stands on a view it may read and one it
    may not (earlier tests' hierarchies may have written those topics before)."""
    passwords = servers.authorize(_topology())
    directory = str(tmp_path_factory.mktemp("kafka-clients"))
    write_client_files(directory, servers.bootstrap, servers.broker.ca_file, {"analyst": passwords["analyst"]})
    producer = producers.make_producer(servers.bootstrap)
    rows = {topic: encode_row_batch("region", topic.rsplit(".", 1)[1], ["location", "tags"], [("dock-7", 42)],
                                    batch_id=1, emitted_ms=1) for topic in (READABLE, REFUSED)}
    producers.deliver(producer, [producer.send(topic, b"an earlier hierarchy's record") for topic in rows])
    sent = {topic: producer.send(topic, value) for topic, value in rows.items()}
    producers.deliver(producer, list(sent.values()))
    producer.close()
    return servers.bootstrap, directory, {topic: future.get().offset for topic, future in sent.items()}


def decoded(value: bytes) -> str:
    done = subprocess.run(["protoc", "--decode=hifi.RowBatch", f"--proto_path={REPO}", "protos/hifi.proto"],
                          input=value, capture_output=True, cwd=REPO, timeout=30)
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode()


def kcat(directory: str, topic: str, offset: int) -> subprocess.CompletedProcess:
    """Debian's kcat on confluent-kafka's librdkafka (services.kafka_client_files: Debian's is too old
    for Kafka 4's SCRAM)."""
    return subprocess.run(["kcat", "-F", os.path.join(directory, "analyst.conf"), "-C", "-t", topic, "-p", "0",
                           "-o", str(offset), "-c", "1", "-e", "-q", "-f", "%s"], capture_output=True, timeout=60,
                          env={**os.environ, "LD_LIBRARY_PATH": os.path.join(directory, "lib")})


LOG4J2 = "rootLogger.level = warn\nrootLogger.appenderRef.err.ref = err\nappender.err.type = Console\n" \
         "appender.err.name = err\nappender.err.target = SYSTEM_ERR\nappender.err.layout.type = PatternLayout\n" \
         "appender.err.layout.pattern = %p %m%n\n"


def console_consumer(bootstrap: str, directory: str, topic: str, offset: int) -> subprocess.CompletedProcess:
    """Kafka's console consumer, its warnings (a refusal) on stderr."""
    logging = os.path.join(directory, "log4j2.properties")
    with open(logging, "w") as fh:
        fh.write(LOG4J2)
    return subprocess.run(
        ["java", f"-Dlog4j2.configurationFile={logging}", "-cp", os.path.join(jar_dir("kafka"), "*"),
         "org.apache.kafka.tools.consumer.ConsoleConsumer",
         "--bootstrap-server", bootstrap, "--command-config", os.path.join(directory, "analyst.properties"),
         "--topic", topic, "--partition", "0", "--offset", str(offset), "--max-messages", "1",
         "--timeout-ms", "20000"], capture_output=True, timeout=120)


def test_kcat_reads_a_view_the_user_may_read_and_is_refused_one_it_may_not(analyst):
    assert shutil.which("kcat"), "deploy/install-system-deps.sh installs kcat (make setup)"
    _, directory, offsets = analyst
    done = kcat(directory, READABLE, offsets[READABLE])
    assert done.returncode == 0, done.stderr.decode()
    text = decoded(done.stdout)
    assert 'columns: "location"' in text and 's: "dock-7"' in text and "i: 42" in text
    refused = kcat(directory, REFUSED, offsets[REFUSED])
    assert refused.stdout == b"" and b"authorization failed" in refused.stderr.lower(), refused.stderr.decode()


def test_kafkas_console_consumer_reads_a_view_the_user_may_read_and_is_refused_one_it_may_not(analyst):
    bootstrap, directory, offsets = analyst
    done = console_consumer(bootstrap, directory, READABLE, offsets[READABLE])
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    text = decoded(done.stdout.rstrip(b"\n"))
    assert 's: "dock-7"' in text and "i: 42" in text
    refused = console_consumer(bootstrap, directory, REFUSED, offsets[REFUSED])
    assert b"dock-7" not in refused.stdout
    assert b"TopicAuthorizationException" in refused.stderr or b"Not authorized" in refused.stderr, \
        refused.stderr.decode()[-2000:]
