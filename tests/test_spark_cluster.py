"""Nodes on a real Spark standalone cluster (services.spark_cluster: a master and two workers of
two cores from the installed pyspark, every connection authenticated): a door and the core above
it as processes, each its own application holding one core (HIFI_SPARK_CORES_MAX), so neither
starves; the executors ran the batches' tasks, their records read by Spark's own Kafka source
in the executors (on a cluster the driver reads none itself) and only partials returned to the
driver — judged from Spark's event log (services.spark_event_log), the warm-up job left out; a
door killed and restarted on the cluster resumes from its checkpoints, and a query over its
readings equals the reference window by window across the restart: nothing lost or doubled. On a
cluster Spark computes every batch's partials (dsp.spark.partials): the answers are Spark's."""

from __future__ import annotations

import glob
import os
import time

import pytest

from dsp.spark.kafka_read import GROUP_PREFIX
from glue.topology import load_topology
from services.hierarchy import Hierarchy
from services.judge import as_ms, rows_in_span, same_rows, topic_rows
from services.spark_cluster import local_cluster
from services.spark_event_log import ApplicationWork, applications
from tests.conftest import wait_for

pytestmark = pytest.mark.e2e

QUERY = "SELECT receptor_id, count(*) AS reads FROM rfid_stream [range by '2 seconds'] GROUP BY receptor_id"
DOOR = "cl-door"
# two nodes, two applications: each Spark driver and executor is a JVM, and this machine has two
# cores (small.yaml's three nodes took 4 minutes here)
TOPOLOGY = """
name: cluster
nodes:
  - {id: cl-core, tier: core}
  - {id: cl-door, tier: edge, parent: cl-core}
receptors:
  - {id: cl-r1, kind: rfid, node: cl-door, location: inbound-dock, area: north, x: 0.0, y: 0.0}
  - {id: cl-r2, kind: rfid, node: cl-door, location: inbound-dock, area: north, x: 2.0, y: 0.0}
scenario:
  name: cluster
  seed: 5
  cycle: 200 ms
  world: {pallets: 3, arrival_gap: 6 seconds, dwell: 8 seconds, repeat: true}
  readers:
    - {id: cl-r1, node: cl-door, location: inbound-dock, antennas: 2, ghost_rate: 0.05}
    - {id: cl-r2, node: cl-door, location: inbound-dock, antennas: 2}
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with local_cluster(str(tmp_path_factory.mktemp("spark-cluster")), workers=2, cores_per_worker=2) as running:
        yield running


@pytest.fixture()
def hierarchy_on_cluster(cluster, servers, monkeypatch, tmp_path):
    for name, value in cluster.driver_env(cores_max=1).items():
        monkeypatch.setenv(name, value)   # what the node processes inherit (services.supervisor)
    monkeypatch.setenv("HIFI_SPARK_EVENT_LOG", str(tmp_path / "event-log"))
    # no warm spare: it would be one more application, its JVMs starting on the test's two cores
    path = tmp_path / "cluster.yaml"
    path.write_text(TOPOLOGY)
    hierarchy = Hierarchy(load_topology(str(path)), servers.redis_url, servers.bootstrap,
                          state_dir=str(tmp_path / "state"), processes=True, spare=False)
    hierarchy.start()
    try:
        yield hierarchy
    finally:
        hierarchy.stop()


def test_nodes_run_on_a_standalone_cluster_and_resume_there(cluster, hierarchy_on_cluster):
    hierarchy = hierarchy_on_cluster

    def holding_cores() -> list[dict] | None:
        apps = [a for a in cluster.state().get("activeapps", []) if a.get("cores", 0) > 0]
        return apps if len(apps) >= len(hierarchy.topology.nodes) else None

    apps = wait_for(holding_cores, 120, "every node's application to hold a core")
    assert all(a["cores"] == 1 for a in apps), apps   # spark.cores.max: one each, none waiting

    hierarchy.start_agents()
    plan = hierarchy.placement.submit(QUERY)
    wait_for(lambda: len({r["window_start"] for r in topic_rows(hierarchy.bootstrap, plan.result_topic)}) >= 2,
             120, "the query's first windows")
    first = _door_work(1)
    assert first.tasks > 0 and "driver" not in first.executors, \
        f"no task of {DOOR}'s batches ran on the cluster's executors: {first}"
    assert first.kafka_records > 0 and first.readings > first.kafka_records, \
        f"Spark's Kafka scans read none of {DOOR}'s records, or Spark decoded none of their readings: {first}"
    # only partials reach the driver: a window's count per receptor, not the readings
    assert first.rows_to_driver <= 0.05 * first.readings, f"more than partials came to the driver: {first}"
    # the batches' records were read by Spark's own Kafka source in the executors' JVMs (a consumer
    # of the door's group, dsp.spark.kafka_read.group_id), not in the driver: the warm-up job reads no topic
    assert cluster.executor_log_lines(f"hifi-{DOOR}", rf"group\.id = {GROUP_PREFIX}-{DOOR}-[0-9a-f]+") > 0, \
        f"Spark's Kafka source read none of {DOOR}'s batches on the executors"
    # on a cluster Spark computes the parts' partials and its tasks archive the batches (dsp.spark.partials)
    archived = glob.glob(os.path.join(hierarchy.state_dir, "**", "archive", "*", "*", "*.parquet"), recursive=True)
    assert any(os.path.isdir(path) for path in archived), "no batch was archived by Spark's tasks"

    # a door killed (kill -9) comes back on its checkpoints, an application on the cluster again
    hierarchy.supervisor.kill(DOOR, down_s=2)
    killed_ms = int(time.time() * 1000)

    def span_past_the_restart() -> tuple[int, int] | None:
        starts = sorted({as_ms(r["window_start"]) for r in topic_rows(hierarchy.bootstrap, plan.result_topic)})
        later = [s for s in starts if s >= killed_ms + 6_000]
        return (max(hierarchy.agent.stats.started_ms, plan.start_ms or 0), later[0]) if later else None

    span = wait_for(span_past_the_restart, 180, "windows after the restart")
    deadline = time.monotonic() + 60
    while True:   # the reference over every window from the query's start, across the restart
        got, want, early = rows_in_span(hierarchy, plan, span)
        if same_rows(got, want) or time.monotonic() > deadline:
            break
        time.sleep(3)
    assert not early and want
    assert same_rows(got, want), (f"lost or doubled across the restart: {sorted(set(want) - set(got))[:5]} "
                                  f"missing, {sorted(set(got) - set(want))[:5]} extra")
    again = _door_work(2)
    assert again.tasks > 0 and again.kafka_records > 0 and "driver" not in again.executors, \
        f"the restarted door's batches ran on no executor: {again}"
    assert again.rows_to_driver <= 0.05 * again.readings, f"more than partials came to the driver: {again}"


def _door_work(application: int) -> ApplicationWork:
    """The door's `application`-th application's batches (1: the first, 2: after the restart), as
    Spark's event log tells them (the warm-up job every session runs left out)."""
    found = applications(os.environ["HIFI_SPARK_EVENT_LOG"], f"hifi-{DOOR}")
    assert len(found) >= application, f"{len(found)} event logs of {DOOR}'s applications"
    return found[application - 1]
