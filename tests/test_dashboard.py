"""The operations dashboard in a real browser (Debian's headless Chromium, driven over WebDriver),
and the services' Prometheus metrics, on a running small hierarchy (deploy/topologies/small.yaml:
core over dock-a and dock-b; dock-b-r2 stops after 40 s).

The tests run in file order on one hierarchy: the browser's query, then a node crash, then the
metrics, which stop the agents to compare settled counters with what they published."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
from collections import Counter

import pytest

from glue.topology import load_topology
from protos import hifi_pb2
from services.paths import SMALL_TOPOLOGY
from tests.conftest import chromium, metric, running_hierarchy, scrape_metrics, topic_rows, wait_for
from wire.kafka import producers
from wire.topics import raw_topic, view_topic

ARTIFACTS = os.environ.get("HIFI_TEST_ARTIFACTS",
                           os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "test-artifacts"))
QUERY = "SELECT receptor_id, count(*) AS reads FROM rfid_stream [range by '2 seconds'] GROUP BY receptor_id"


@pytest.fixture(scope="module")
def hierarchy(servers, spark, tmp_path_factory):
    topology = load_topology(SMALL_TOPOLOGY)
    for running in running_hierarchy(topology, servers, str(tmp_path_factory.mktemp("state"))):
        running.start_dashboard("127.0.0.1:0")
        yield running


@pytest.fixture(scope="module")
def browser(hierarchy):
    driver = chromium()
    driver.get(f"{hierarchy.dashboard.url}#token={hierarchy.admin_token}")   # as `hifi up` prints it
    yield driver
    driver.quit()


def _answer(url: str, method: str, origin: str | None = None, host: str | None = None):
    """(status, headers) of a request with these `Origin` and `Host` headers."""
    import urllib.error
    import urllib.request

    body = b'{"sql": "SELECT count(*) AS n FROM rfid_stream [range by \'2 seconds\']"}'
    headers = {"Content-Type": "application/json", **({"Origin": origin} if origin else {}),
               **({"Host": host} if host else {})}
    request = urllib.request.Request(url, data=body if method == "POST" else None, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status, reply.headers
    except urllib.error.HTTPError as refused:
        return refused.code, refused.headers


def _status(url: str, method: str, origin: str) -> int:
    return _answer(url, method, origin)[0]


def test_only_requests_of_the_dashboards_own_origin_may_change_anything():
    from services.dashboard_http import same_origin

    assert same_origin(None, "127.0.0.1:8470")                                   # no browser: hifi, curl
    assert same_origin("http://127.0.0.1:8470", "127.0.0.1:8470", "same-origin")  # its own page
    assert not same_origin("http://evil.example", "127.0.0.1:8470")
    assert not same_origin("http://127.0.0.1:3000", "127.0.0.1:8470")          # Grafana's port: another origin
    assert not same_origin(None, "127.0.0.1:8470", "cross-site")
    assert not same_origin("null", "127.0.0.1:8470")                           # a sandboxed or file page


def test_every_answer_forbids_framing_sniffing_and_foreign_scripts_and_a_foreign_host_name_is_refused(hierarchy):
    from services.dashboard_http import SECURITY_HEADERS

    for path in ("/", "/static/app.js", "/api/snapshot", "/no-such-page"):
        status, headers = _answer(hierarchy.dashboard.url + path.lstrip("/"), "GET")
        assert status in (200, 401, 404) and all(headers[k] == v for k, v in SECURITY_HEADERS.items()), (path, status)
    assert "frame-ancestors 'none'" in SECURITY_HEADERS["Content-Security-Policy"]
    # a page of evil.example whose name resolves to this dashboard (DNS rebinding) is same-origin to
    # the browser; the Host it asks for gives it away
    port = hierarchy.dashboard.url.rstrip("/").rpartition(":")[2]
    for method, path in (("GET", "/api/snapshot"), ("POST", "/api/queries"), ("DELETE", "/api/queries/q-1")):
        status, _ = _answer(hierarchy.dashboard.url + path.lstrip("/"), method, origin=f"http://evil.example:{port}",
                            host=f"evil.example:{port}")
        assert status == 421, (method, path, status)
    assert _answer(hierarchy.dashboard.url, "GET", host=f"localhost:{port}")[0] == 200
    assert not hierarchy.mdr.queries()


def test_beyond_loopback_the_dashboard_speaks_only_tls_and_its_session_cookie_is_secure(hierarchy):
    """Listening on every interface (as in a container), the dashboard serves HTTPS with the
    deployment's certificates; plain HTTP gets no answer; a session cookie is `Secure`."""
    import http.client
    import json
    import ssl

    from mdr.repository import MDR
    from services import certs
    from services.auth import Security
    from services.dashboard import Dashboard
    from services.dashboard_access import SESSION_COOKIE

    tls_dir = hierarchy.security.tls_dir
    registered = hierarchy.mdr.endpoints()["dashboard"]   # the module's dashboard's, given back after
    dashboard = Dashboard(MDR.connect(hierarchy.mdr_url_for("dashboard")), hierarchy.bootstrap, Security(tls_dir),
                          hierarchy.topology)
    url = dashboard.serve("0.0.0.0:0")
    port = int(url.rstrip("/").rpartition(":")[2])
    try:
        assert url.startswith("https://")
        plain = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        with pytest.raises((ConnectionError, http.client.HTTPException, OSError)):
            plain.request("GET", "/")
            plain.getresponse()
        untrusted = http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=ssl.create_default_context())
        with pytest.raises(ssl.SSLCertVerificationError):
            untrusted.request("GET", "/")
        secure = http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=certs.client_context(tls_dir))
        secure.request("GET", "/")
        page = secure.getresponse()
        assert page.status == 200 and b"<html" in page.read().lower()
        secure.request("POST", "/api/login", json.dumps({"token": hierarchy.admin_token}),
                       {"Content-Type": "application/json", "Origin": f"https://127.0.0.1:{port}"})
        answer = secure.getresponse()
        answer.read()
        cookie = answer.headers["Set-Cookie"]
        assert answer.status == 200 and cookie.startswith(f"{SESSION_COOKIE}=") and "; Secure" in cookie, cookie
    finally:
        dashboard.close()
        hierarchy.mdr.put_endpoints("dashboard", registered)


def _js(browser, script: str):
    return browser.execute_script(script)


def _node_states(browser) -> dict[str, str]:
    return _js(browser, "return Object.fromEntries([...document.querySelectorAll('#tree g.node')]"
                        ".map(g => [g.dataset.node, g.dataset.state]))")


def _receptor_states(browser, state: str) -> list[str]:
    return _js(browser, "return [...document.querySelectorAll('#receptors tbody tr')]"
                        f".filter(r => r.lastChild.textContent === '{state}').map(r => r.dataset.receptor)")


def _script_errors(browser) -> list[str]:
    """Uncaught exceptions in the page's script (a refused query's HTTP 400 is logged too, as network)."""
    return [e["message"] for e in browser.get_log("browser") if e["level"] == "SEVERE" and e["source"] == "javascript"]


def test_the_page_shows_the_tree_and_runs_a_query_submitted_from_it(hierarchy, browser):
    from selenium.webdriver.common.by import By

    states = wait_for(lambda: (s := _node_states(browser)) and set(s) == set(hierarchy.topology.nodes) and
                      all(v == "alive" for v in s.values()) and s, 60, "every node alive on the page")
    assert states == {"core": "alive", "dock-a": "alive", "dock-b": "alive"}
    # receptors with their live read rates, per edge
    wait_for(lambda: {"dock-a-r1", "dock-b-r1"} <= set(_receptor_states(browser, "reading")), 60,
             "the readers reading")

    sql = browser.find_element(By.ID, "query-sql")
    sql.send_keys("SELECT receptor_id FROM rfid_stream WHERE")
    browser.find_element(By.ID, "submit").click()
    error = wait_for(lambda: browser.find_element(By.ID, "query-error").text, 30, "the error of a bad query")
    assert error.startswith("line 1, column") and "Traceback" not in error

    sql.clear()
    sql.send_keys(QUERY)
    since = browser.find_element(By.ID, "query-since")   # `--since` on the page: a time it cannot read, refused
    since.send_keys("yesterday")
    browser.find_element(By.ID, "submit").click()
    wait_for(lambda: "'yesterday' is neither a time" in browser.find_element(By.ID, "query-error").text, 30,
             "the error of a bad since")
    assert not hierarchy.mdr.queries()
    since.clear()
    browser.find_element(By.ID, "explain").click()
    plan = wait_for(lambda: browser.find_element(By.ID, "plan").text, 30, "the explained plan")
    assert "root core" in plan and "dock-a" in plan and "dock-b" in plan
    assert not hierarchy.mdr.queries(), "explaining runs nothing"
    # a page of another origin cannot start or cancel queries through a browser that reaches the dashboard
    for method, path in (("POST", "/api/queries"), ("DELETE", "/api/queries/q-1")):
        assert _status(hierarchy.dashboard.url + path, method, origin="http://evil.example") == 403
    assert not hierarchy.mdr.queries()

    browser.find_element(By.ID, "submit").click()
    query_id = wait_for(lambda: _js(browser, "const li = document.querySelector('#queries li[data-query]');"
                                             "return li && li.dataset.query"), 120, "the submitted query listed")
    assert [q.id for q in hierarchy.mdr.queries()] == [query_id]
    # its placement drawn on the tree: a task at the root and at both doors
    placed = wait_for(lambda: _js(browser, "return [...document.querySelectorAll('#tree g.node.placed')]"
                                           ".map(g => g.dataset.node).sort()"), 10, "the placement on the tree")
    assert placed == ["core", "dock-a", "dock-b"]
    rows = wait_for(lambda: _js(browser, "return [...document.querySelectorAll('#results-table tbody tr')]"
                                         ".map(r => [...r.cells].map(c => c.textContent))"), 120,
                    "result rows on the page")
    headers = _js(browser, "return [...document.querySelectorAll('#results-table thead th')].map(c => c.textContent)")
    assert headers == ["window_start", "window_end", "receptor_id", "reads"]
    assert {r[2] for r in rows} <= {"dock-a-r1", "dock-b-r1", "dock-b-r2"} and all(int(r[3]) > 0 for r in rows)
    assert _js(browser, "return document.querySelectorAll('#results-chart polyline').length") >= 1

    # the planner's own views (the query's producers) listed only when asked for
    def listed() -> list[str]:
        return _js(browser, "return [...document.querySelectorAll('#views li')].map(li => li.dataset.view)")

    assert listed() and not [v for v in listed() if ".producer_" in v]
    _js(browser, "document.getElementById('show-internal').click()")
    wait_for(lambda: [v for v in listed() if ".producer_" in v], 10, "the producers' views listed when asked")
    _js(browser, "document.getElementById('show-internal').click()")
    # numbers to their meaning, not to the float's last digit
    assert _js(browser, "return [40.613899999999994, 12345.678, 0.000123456, 7].map(number)") == \
        ["40.61", "12346", "0.0001235", "7"]

    # dock-b-r2 stops 40 s into the scenario
    wait_for(lambda: _receptor_states(browser, "silent") == ["dock-b-r2"], 90, "the stopped reader silent")

    os.makedirs(ARTIFACTS, exist_ok=True)
    browser.save_screenshot(os.path.join(ARTIFACTS, "dashboard.png"))

    # one step in the page: the list is redrawn every second, so a found element can go stale
    _js(browser, f"document.querySelector('#queries button.cancel[data-query=\"{query_id}\"]').click()")
    wait_for(lambda: not _js(browser, "return document.querySelector('#queries li[data-query]')"), 60,
             "the cancelled query gone from the page")
    assert hierarchy.mdr.queries() == []
    assert _script_errors(browser) == []


def test_a_crashed_node_turns_dead_on_the_page_within_the_heartbeat_ttl(hierarchy, browser):
    from services.cli.observe import status_report
    from services.node import HEARTBEAT_TTL_MS
    from services.tables import status_tables

    assert _node_states(browser)["dock-b"] == "alive"
    crashed = time.monotonic()
    hierarchy.nodes["dock-b"].crash()
    wait_for(lambda: _node_states(browser)["dock-b"] == "dead", 30, "dock-b dead on the page", interval_s=0.1)
    took = time.monotonic() - crashed
    # the heartbeat key expires after the TTL; the page is pushed a snapshot every second
    assert took <= HEARTBEAT_TTL_MS / 1000 + 2.0, f"dock-b turned dead after {took:.1f} s"
    assert _node_states(browser)["dock-a"] == "alive"
    report = status_report(status_tables(hierarchy.mdr))
    assert any(line.startswith("dock-b") and "DEAD" in line for line in report.splitlines())

    # the same live in a terminal: `hifi status --watch` redraws until Ctrl-C
    watch = subprocess.Popen([os.path.join(os.path.dirname(sys.executable), "hifi"), "status", "--watch",
                              "--interval", "1"], env={**os.environ, "HIFI_REDIS_URL": hierarchy.redis_url},
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(8)
    watch.send_signal(signal.SIGINT)
    out, err = watch.communicate(timeout=30)
    assert watch.returncode == 0, err
    assert "\x1b[" not in out, "a pipe gets each report after the last, no screen clears"
    screens = out.split("hifi status (Ctrl-C stops)")[1:]
    assert len(screens) >= 3
    last = screens[-1].splitlines()
    assert any(line.startswith("dock-b ") and "DEAD" in line for line in last)
    header = next(line.split() for line in last if line.startswith("receptor "))   # ..., reads/s, cycle ms, state
    values = next(line.split() for line in last if line.startswith("dock-a-r1"))
    row = dict(zip(header, values, strict=False))
    assert row["node"] == "dock-a" and float(row["reads/s"]) > 0 and values[-1] == "reading", last


def test_metrics_agree_with_what_the_run_produced(hierarchy, browser):
    from edge.agent import read_jsonl
    from wire.codec import encode_read_cycle

    node = "dock-a"
    endpoints = hierarchy.mdr.endpoints()
    node_metrics = endpoints[f"node:{node}"]["metrics"]
    # two records dock-a must reject, among the good ones
    producer = producers.make_producer(hierarchy.bootstrap)
    producer.send(raw_topic(node), key=b"bad:1", value=b"\xff not a read cycle")
    _, negative = encode_read_cycle("dock-a-r1", 10**9, int(time.time() * 1000), [])   # no cycle the agent sent
    cycle = hifi_pb2.RfidReadCycle.FromString(negative)
    cycle.reads.add(tag_id="urn:epc:id:sgtin:1.2.3", antenna=1, read_strength=-0.5)
    producer.send(raw_topic(node), key=b"bad:2", value=cycle.SerializeToString())
    producer.flush()
    hierarchy.agent.stop()

    logged = [c for c in read_jsonl(hierarchy.readings_path) if c.get("node") == node and "reads" in c]
    reads = Counter()
    for c in logged:
        reads[c["receptor"]] += len(c["reads"])
    cycles = Counter(c["receptor"] for c in logged)

    def settled():   # the two bad records may lie past the agent's last one: a range read after it
        samples = scrape_metrics(node_metrics)
        return samples if metric(samples, "hifi_readings_in_total", node=node) == sum(reads.values()) and \
            metric(samples, "hifi_dead_lettered_total", node=node) >= 2 else None

    samples = wait_for(settled, 90, "dock-a's readings-in counter to reach what the agent published, and its "
                                    "dead-letter counter the two bad records")
    assert metric(samples, "hifi_dead_lettered_total", node=node) == 2
    for receptor in reads:
        assert metric(samples, "hifi_receptor_reads_total", node=node, receptor=receptor) == reads[receptor]
        assert metric(samples, "hifi_receptor_cycles_total", node=node, receptor=receptor) == cycles[receptor]
    weak = sum(1 for c in logged for _, _, strength in c["reads"] if strength < 0.2)
    assert metric(samples, "hifi_receptor_weak_reads_total", node=node, receptor="dock-a-r1") == weak
    assert metric(samples, "hifi_node_up", node=node) == 1.0

    # rows per view, as an operator scrapes them: what this process emitted equals what the view's topic holds
    smoothed_topic = view_topic(node, "smoothed_rfid_stream")
    part = {"node": node, "query": "view.smoothed_rfid_stream"}
    by_part = lambda: scrape_metrics(node_metrics, hierarchy.admin_token)   # noqa: E731
    wait_for(lambda: metric(by_part(), "hifi_view_rows_total", **part)
             == len(topic_rows(hierarchy.bootstrap, smoothed_topic)), 30,
             "view rows counted = rows in the view's topic")
    operators = by_part()
    assert metric(operators, "hifi_microbatch_duration_seconds_count", **part) >= 1
    # anyone's scrape: the same rows summed over the node's parts, and no part's name
    parts_rows = sum(v for (name, labels), v in operators.items() if name == "hifi_view_rows_total")
    anyones = scrape_metrics(node_metrics)
    assert not [key for key in anyones if "query" in dict(key[1])], "a part's series in an anonymous scrape"
    assert metric(anyones, "hifi_view_rows_total", node=node) >= parts_rows > 0
    with pytest.raises(urllib.error.HTTPError) as refused:
        scrape_metrics(node_metrics, "hifi_not-a-token")
    assert refused.value.code == 401

    # the placement service counted the page's calls: a refused query, an explain and a submit, a cancel
    placement = scrape_metrics(endpoints["placement"]["metrics"])
    submit = "/hifi.Placement/Submit"
    assert metric(placement, "hifi_grpc_calls_total", service="placement", method=submit, code="OK") == 2
    assert metric(placement, "hifi_grpc_calls_total", service="placement", method=submit,
                   code="INVALID_ARGUMENT") == 1
    assert metric(placement, "hifi_grpc_calls_total", service="placement", method="/hifi.Placement/Cancel",
                   code="OK") == 1
    assert metric(placement, "hifi_mdr_operations_total", service="placement", operation="put_query") == 1

    # the dashboard's own metrics, and its events: the two dead letters with their reasons
    dashboard = scrape_metrics(endpoints["dashboard"]["metrics"])
    assert metric(dashboard, "hifi_mdr_operations_total", service="dashboard", operation="nodes") > 0
    # Only the raw topic's letters are the two bad records: a slow run can add others (a part that
    # failed and ran its batch again makes its reader dead-letter the repeated messages, reason
    # "duplicate batch"), which are right to be there too.
    def bad_records_shown() -> list[str]:
        events = hierarchy.dashboard.snapshot()["events"]
        return [e["text"] for e in events if e["kind"] == "dead" and e["text"].startswith(raw_topic(node) + ":")]

    reasons = wait_for(lambda: len(bad_records_shown()) >= 2 and bad_records_shown(), 30,
                       lambda: f"the two bad records among the dashboard's events; it shows "
                               f"{hierarchy.dashboard.snapshot()['events']}")
    assert any("negative read_strength" in r for r in reasons) and len(reasons) == 2, reasons


def test_a_user_sees_only_the_events_and_names_of_views_it_may_read():
    from services.dashboard_access import visible_to
    from wire.identity import Identity

    views = [{"node": "region", "name": "people_in_danger", "readers": ["role:operator"]},
             {"node": "region", "name": "stock_alerts", "readers": ["*"]}]
    events = [{"kind": "danger", "view": "region.people_in_danger", "text": "tag_id=urn:epc:id:gid:1.2.3"},
              {"kind": "stock", "view": "region.stock_alerts", "text": "location=dock n=0"},
              {"kind": "dead", "node": "door1", "text": "hifi.raw.door1:0@4: not a read cycle"},
              {"kind": "faulty", "view": "door1.mote_quality_gone", "text": "receptor_id=mote-3"}]
    nodes = [{"id": "region", "state": "alive", "views": ["people_in_danger", "stock_alerts"]}]
    snapshot = {"queries": [], "views": views, "events": events, "nodes": nodes}
    user = visible_to(snapshot, Identity("ann", frozenset({"user"})))
    assert [e["kind"] for e in user["events"]] == ["stock"], "an operator's alert rows reached a user"
    assert user["nodes"] == [{"id": "region", "state": "alive", "views": ["stock_alerts"]}], "a hidden view's name"
    operator = visible_to(snapshot, Identity("olga", frozenset({"operator"})))
    assert [e["kind"] for e in operator["events"]] == ["danger", "stock", "dead", "faulty"]
    assert operator["nodes"][0]["views"] == ["people_in_danger", "stock_alerts"]


def test_the_host_names_a_dashboard_answers_to():
    import doctest

    import services.dashboard

    assert doctest.testmod(services.dashboard).failed == 0
