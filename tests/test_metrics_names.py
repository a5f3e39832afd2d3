"""The metrics as Prometheus asks for them and as docs/operating.md lists them: a node's and a
service's registry (on a real MDR) collected, each counter exposed with `_total`, no precomputed
rate, and the page's list the registries' names exactly."""

from __future__ import annotations

import re
from pathlib import Path

from prometheus_client.openmetrics.exposition import generate_latest as openmetrics

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
