"""The metrics as Prometheus asks for them and as docs/operating.md lists them: a node's and a
service's registry (on a real MDR) collected, each counter exposed with `_total`, no precomputed
rate, and the page's list the registries' names exactly; and who may scrape what."""

from __future__ import annotations

import re
import urllib.error
import urllib.request
from pathlib import Path

from prometheus_client.openmetrics.exposition import generate_latest as openmetrics

from dsp.status import BatchReport
from services.auth import mint_token
from services.metrics import NodeMetrics, ServiceMetrics

OPERATING = Path(__file__).resolve().parent.parent / "docs" / "operating.md"


def exposed(registry) -> dict[str, str]:
    """Metric name as scraped (a counter's with `_total`) -> its type."""
    return {family.name + ("_total" if family.type == "counter" else ""): family.type
            for family in registry.collect()}


def test_every_metric_is_typed_as_prometheus_asks_and_listed_in_the_docs(mdr) -> None:
    node, service = NodeMetrics("door1", mdr), ServiceMetrics("placement", mdr)
    names = exposed(node.registry) | exposed(service.registry)
    assert {"hifi_readings_in_total", "hifi_triaged_records_total", "hifi_grpc_calls_total"} <= set(names)
    assert not [n for n, kind in names.items() if kind == "gauge" and (n.endswith("_total") or "rate" in n)]
    assert b"hifi_late_rows_total" in openmetrics(node.registry), "a counter scrapes with _total"
    page = OPERATING.read_text()
    paragraph = page[page.index("**Prometheus metrics.**"):]
    listed = set(re.findall(r"`(hifi_[a-z_]+)", paragraph[:paragraph.index("\n\n")]))
    assert listed == set(names), (f"in the registries, not the docs: {sorted(set(names) - listed)}; "
                                  f"in the docs, not the registries: {sorted(listed - set(names))}")


def _scrape(url: str, token: str = "") -> tuple[int, str]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read().decode()


def test_anyones_scrape_names_no_part_and_an_operators_has_each(mdr) -> None:
    """A view's name is what its readers are told and others not (issue 65: anonymous /metrics
    counted the rows of view.people_in_danger): anyone's scrape sums the parts, an operator's has
    each, a user's is anyone's, a token that is not one is refused."""
    node = NodeMetrics("door1", mdr)
    url = node.serve()
    try:
        node.observe_batch("view.people_in_danger", BatchReport(1, rows_out=3, max_event_ms=1, duration_s=0.2,
                                                                emitted_ms=2))
        node.observe_batch("q0123456789ab", BatchReport(1, rows_out=4, duration_s=0.1))
        status, anyones = _scrape(url)
        assert status == 200 and "people_in_danger" not in anyones and "q0123456789ab" not in anyones
        assert 'hifi_view_rows_total{node="door1"} 7.0' in anyones
        assert 'hifi_microbatch_duration_seconds_count{node="door1"} 2.0' in anyones
        assert "hifi_readings_in_total" in anyones
        assert _scrape(url, mint_token(mdr, "ann", ("user",)))[1].count("people_in_danger") == 0
        status, operators = _scrape(url, mint_token(mdr, "olga", ("operator",)))
        assert status == 200 and 'hifi_view_rows_total{node="door1",query="view.people_in_danger"} 3.0' in operators
        assert "hifi_readings_in_total" in operators and "hifi_grpc_calls_total" in exposed(node.by_part)
        assert _scrape(url, "hifi_not-a-token")[0] == 401
        node.forget("view.people_in_danger")
        assert "people_in_danger" not in _scrape(url, mint_token(mdr, "olga", ("operator",)))[1]
    finally:
        node.close()
