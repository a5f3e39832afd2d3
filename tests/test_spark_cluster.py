"""Nodes on a real Spark standalone cluster (services.spark_cluster: a master and two workers of
two cores from the installed pyspark, every connection authenticated): the small topology's
three nodes as processes, each its own application holding one core (HIFI_SPARK_CORES_MAX), so
none starves; a query over both doors equals the reference; the executors ran the batches'
tasks (on a cluster the driver reads none itself); a door killed and restarted on the cluster
resumes from its checkpoints with nothing lost or doubled."""

from __future__ import annotations

import re
import time

import pytest

from glue.topology import load_topology
from services.hierarchy import Hierarchy
from services.judge import as_ms, rows_in_span, same_rows, topic_rows
from services.paths import SMALL_TOPOLOGY
from services.spark_cluster import local_cluster
from tests.conftest import wait_for
from tests.judge import assert_equal_to_reference

pytestmark = pytest.mark.e2e

QUERY = "SELECT receptor_id, count(*) AS reads FROM rfid_stream [range by '2 seconds'] GROUP BY receptor_id"
DOOR = "dock-a"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with local_cluster(str(tmp_path_factory.mktemp("spark-cluster")), workers=2, cores_per_worker=2) as running:
        yield running


@pytest.fixture()
def hierarchy_on_cluster(cluster, servers, monkeypatch, tmp_path):
    for name, value in cluster.driver_env(cores_max=1).items():
        monkeypatch.setenv(name, value)   # what the node processes inherit (services.supervisor)
    hierarchy = Hierarchy(load_topology(SMALL_TOPOLOGY), servers.redis_url, servers.bootstrap,
                          state_dir=str(tmp_path / "state"), processes=True)
    hierarchy.start()
    try:
        yield hierarchy
    finally:
        hierarchy.stop()


def executor_tasks(cluster) -> int:
    """Tasks the cluster's executors finished (their logs)."""
    finished = re.compile(r"Finished task .* in stage")
    return sum(len(finished.findall(open(path, errors="replace").read())) for path in cluster.executor_logs())


def test_nodes_run_on_a_standalone_cluster_and_resume_there(cluster, hierarchy_on_cluster):
    hierarchy = hierarchy_on_cluster
    def holding_cores() -> list[dict] | None:
        apps = [a for a in cluster.state().get("activeapps", []) if a.get("cores", 0) > 0]
        return apps if len(apps) >= len(hierarchy.topology.nodes) else None

    apps = wait_for(holding_cores, 120, "every node's application to hold a core")
    assert [a["cores"] for a in apps] == [1, 1, 1], apps   # spark.cores.max: one each, none waiting

    hierarchy.start_agents()
    plan = hierarchy.placement.submit(QUERY)
    assert assert_equal_to_reference(hierarchy, plan) > 0
    tasks = executor_tasks(cluster)
    assert tasks > 0, "no task ran on the cluster's executors"

    # a door killed (kill -9) comes back on its checkpoints, on the cluster again
    hierarchy.supervisor.kill(DOOR, down_s=3)
    killed_ms = int(time.time() * 1000)
    wait_for(lambda: hierarchy.supervisor.nodes[DOOR].exited_at is None and
             len(hierarchy.supervisor.nodes[DOOR].starts) >= 2, 60, f"{DOOR} to be started again")

    def span_past_the_restart() -> tuple[int, int] | None:
        ends = sorted({as_ms(r["window_start"]) for r in topic_rows(hierarchy.bootstrap, plan.result_topic)})
        later = [e for e in ends if e >= killed_ms + 10_000]
        return (max(hierarchy.agent.stats.started_ms, plan.start_ms or 0), later[0]) if later else None

    span = wait_for(span_past_the_restart, 240, "windows well after the restart")
    deadline = time.monotonic() + 120
    while True:
        got, want, early = rows_in_span(hierarchy, plan, span)
        if same_rows(got, want) or time.monotonic() > deadline:
            break
        time.sleep(5)
    assert not early
    assert same_rows(got, want), (f"lost or doubled across the restart: {sorted(set(want) - set(got))[:5]} "
                                  f"missing, {sorted(set(got) - set(want))[:5]} extra")
    assert executor_tasks(cluster) > tasks, "the restarted node's batches did not run on the executors"
