"""Shared fixtures: one real Redis, one real Apache Kafka broker and one Spark session for the
whole run (started by the project's own embedded default, or the HIFI_* endpoints if set)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator

import pytest

os.environ.setdefault("HIFI_HOME", os.path.join(os.path.dirname(__file__), "..", ".hifi", "test-home"))


@pytest.fixture(scope="session")
def servers() -> Iterator:
    from services.embedded import embedded_or_external

    with embedded_or_external() as endpoints:
        yield endpoints


@pytest.fixture(scope="session")
def spark(servers):
    """The session's Spark, started after the broker: its workers inherit the broker's credentials."""
    from dsp.spark.session import spark_session

    session = spark_session("hifi-tests")
    yield session
    from dsp.spark.progress import detach_markers

    for query in session.streams.active:
        query.stop()
    detach_markers(session)
    session.stop()


@pytest.fixture(autouse=True, scope="module")
def no_queries_left_running() -> Iterator[None]:
    """A module leaves no streaming query running in the shared Spark session: one left behind
    keeps firing micro-batches through every later module and starves the tests that time."""
    yield
    from pyspark.sql import SparkSession

    session = SparkSession._instantiatedSession  # the shared session if a test started it; never start one
    left = list(session.streams.active) if session is not None else []
    for query in left:
        query.stop()
    assert not left, f"queries left running by this module: {[query.name for query in left]}"


@pytest.fixture()
def mdr(servers):
    from mdr.repository import MDR

    repository = MDR.connect(servers.redis_url)
    repository.clear()
    yield repository
    repository.clear()


def running_hierarchy(topology, servers, state_dir: str) -> Iterator:
    """A started hierarchy of `topology` with its agents publishing; stopped when done."""
    from services.hierarchy import Hierarchy

    running = Hierarchy(topology, servers.redis_url, servers.bootstrap, state_dir=state_dir)
    running.start()
    running.start_agents()
    yield running
    running.stop()


def restart_node(hierarchy, node_id: str, while_down: Callable[[], None] = lambda: None):
    """Stop the node and start a new one on the same state directory, as its supervisor would."""
    from services.node import HiFiNode

    old = hierarchy.nodes[node_id]
    old.stop()
    while_down()
    node = HiFiNode(node_id, hierarchy.topology, old.mdr, old.dsp.spark, hierarchy.bootstrap, hierarchy.state_dir,
                    hierarchy.trigger_ms, security=old.security)
    node.start()
    hierarchy.nodes[node_id] = node
    return node


def windows_after(hierarchy, plan, since_ms: int) -> int:
    """How many windows starting at or after `since_ms` the query has emitted."""
    from services.judge import as_ms

    return len({as_ms(r["window_start"]) for r in topic_rows(hierarchy.bootstrap, plan.result_topic)
                if as_ms(r["window_start"]) >= since_ms})


def wait_for(condition: Callable[[], object], timeout_s: float, what: str | Callable[[], str],
             interval_s: float = 0.5):
    """Poll until `condition()` is truthy; fail naming `what` after `timeout_s` (a callable: what
    it says then, e.g. the state that was seen)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s:.0f} s waiting for {what() if callable(what) else what}")
        time.sleep(interval_s)


def scrape_metrics(url: str, token: str = "") -> dict[tuple[str, tuple], float]:
    """A service's Prometheus /metrics, as `token`'s holder scrapes it (none: as anyone):
    (sample name, sorted labels) -> value."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=5) as answer:
        text = answer.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def metric(samples: dict, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


# ------------------------------------------------------------------ test groups

GROUPS = ("unit", "integration", "e2e")
_group_seconds: dict[str, float] = dict.fromkeys(GROUPS, 0.0)
_group_tests: dict[str, int] = dict.fromkeys(GROUPS, 0)
_file_seconds: dict[str, float] = {}
SLOWEST_FILES = 12


def _group(item: pytest.Item) -> str:
    """e2e: a live hierarchy (a `hierarchy` fixture, or a module marked e2e); integration: real
    Redis, broker or Spark; unit: pure logic. A test may also mark itself."""
    marked = [g for g in GROUPS if item.get_closest_marker(g)]
    if marked:
        return marked[0]
    used = set(getattr(item, "fixturenames", ()))
    if "hierarchy" in used:
        return "e2e"
    return "integration" if used & {"servers", "spark", "mdr"} else "unit"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        group = _group(item)
        if not item.get_closest_marker(group):
            item.add_marker(group)   # so `pytest -m unit` (or integration, e2e) selects a group


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    group = next((g for g in GROUPS if g in report.keywords), "unit")
    _group_seconds[group] += report.duration            # set-up (a module's hierarchy), call, teardown
    path = report.nodeid.split("::")[0]
    _file_seconds[path] = _file_seconds.get(path, 0.0) + report.duration
    if report.when == "call":
        _group_tests[group] += 1


def pytest_terminal_summary(terminalreporter) -> None:
    terminalreporter.section("time per test group")
    for group in GROUPS:
        terminalreporter.write_line(f"{group:<12} {_group_tests[group]:>4} tests  {_group_seconds[group]:8.1f} s")
    terminalreporter.section(f"the {SLOWEST_FILES} slowest test files (set-up, calls, teardown)")
    for path, seconds in sorted(_file_seconds.items(), key=lambda item: -item[1])[:SLOWEST_FILES]:
        terminalreporter.write_line(f"{seconds:8.1f} s  {path}")


# the tests read topics with the judge's helpers
from services.judge import topic_records, topic_rows  # noqa: E402,F401


def topic_names(bootstrap: str) -> set[str]:
    """The topics the broker has now (asked afresh: no client's cached metadata)."""
    from kafka import KafkaAdminClient

    from wire.kafka.config import client_security

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, **client_security())
    try:
        return set(admin.list_topics())
    finally:
        admin.close()


def chromium(window: str = "1500,1300"):
    """A headless Chromium under WebDriver, as the browser tests drive the dashboard: no network
    beyond loopback here, so Chromium's background connections are off (they would only fail)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 f"--window-size={window}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
