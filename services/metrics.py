"""Prometheus metrics of the HiFi services (DESIGN §9): each service serves its own registry at
http://<host>:<port>/metrics and records that address in the MDR (`endpoints`).

Counts that must survive a restart and count a replayed micro-batch once (readings in, rows out,
dead letters, per-receptor reads) are read from the MDR's fenced statistics when Prometheus
scrapes; what only the running process knows (micro-batch durations, result latency, gRPC calls,
MDR operations) is measured in-process and starts from zero with it, as Prometheus counters may.

Metric names (all labelled by `node` or `service`; docs/operating.md lists them, a test holds it
to this registry): counters end in `_total`, rates are left to PromQL (`rate(...)`):
  hifi_readings_in_total, hifi_rows_out_total, hifi_dead_lettered_total, hifi_triaged_records_total,
  hifi_late_rows_total, hifi_archive_bytes_total,
  hifi_input_lag_seconds, hifi_watermark_lag_seconds, hifi_running_queries, hifi_node_up,
  hifi_uplink_queued_bytes,
  hifi_receptor_reads_total / _cycles_total / _weak_reads_total {receptor},
  hifi_view_rows_total, hifi_microbatch_duration_seconds, hifi_result_latency_seconds
  ({query} too for an operator), hifi_grpc_calls_total {method, code},
  hifi_grpc_call_duration_seconds {method}, hifi_mdr_operations_total {operation}

Anyone may scrape /metrics (Prometheus does, without credentials): it carries no name of a view
or query, since a view's name is itself what its readers are told and others not. A scrape with an
operator's bearer token (`Authorization: Bearer ...`) gets the same series by part as well: the
`query` label is the part's id.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from urllib.parse import urlsplit

import grpc
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from dsp.status import BatchReport
from mdr.repository import MDR
from services.auth import Authenticator, bearer, non_blocking
from services.http_server import BoundedServer
from wire.identity import Identity

log = logging.getLogger("hifi.metrics")

BATCH_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
LATENCY_BUCKETS = (0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 45.0, 60.0, 120.0, 300.0)
GRPC_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0, 120.0)


class _MDROperations(Collector):
    def __init__(self, service: str, mdr: MDR) -> None:
        self.service, self.mdr = service, mdr

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily("hifi_mdr_operations", "MDR operations this service made, by operation",
                                     labels=["service", "operation"])
        with self.mdr._operations_lock:
            counted = dict(self.mdr.operations)
        for operation, count in sorted(counted.items()):
            family.add_metric([self.service, operation], count)
        yield family


class _NodeStatistics(Collector):
    """The node's statistics as the MDR holds them, read at scrape time."""

    def __init__(self, node_id: str, mdr: MDR) -> None:
        self.node_id, self.mdr = node_id, mdr

    def collect(self) -> Iterator[Metric]:
        stats = self.mdr.stats(self.node_id)
        record = self.mdr.node(self.node_id)
        labels = [self.node_id]
        for name, key, help_text in (
                ("hifi_readings_in", "rows_in", "readings (edge) or view rows (others) the node took in"),
                ("hifi_rows_out", "rows_out", "rows the node's queries and views emitted"),
                ("hifi_dead_lettered", "dead", "input records rejected to hifi.dead.<node>"),
                ("hifi_triaged_records", "triaged", "raw records Data Triage left out undecoded (edge)"),
                # counted by the running process (from zero when it starts again, as counters may)
                ("hifi_late_rows", "late_rows", "rows the node's parts dropped as late since they started"),
                ("hifi_archive_bytes", "archive_bytes", "bytes the node archived since it started")):
            yield _counter(name, help_text, ["node"], labels, stats.get(key, 0.0))
        for name, value, help_text in (
                ("hifi_input_lag_seconds", stats.get("input_lag_ms", 0.0) / 1000,
                 "how long the node's input waited for it: the oldest record of its last batches, by its Kafka time"),
                ("hifi_watermark_lag_seconds", stats.get("lag_ms", 0.0) / 1000,
                 "wall clock minus the newest event time the node has processed"),
                ("hifi_uplink_queued_bytes", stats.get("uplink_queued_bytes", 0.0),
                 "bytes waiting for the node's constrained uplink"),
                ("hifi_running_queries", stats.get("running_queries", 0.0), "queries and views running"),
                ("hifi_node_up", 1.0 if record is not None and record.alive else 0.0, "1 while the node heartbeats")):
            yield _gauge(name, help_text, ["node"], labels, value)
        receptors = self.mdr.receptor_stats(self.node_id)
        for name, key, help_text in (("hifi_receptor_reads", "reads", "valid readings per receptor"),
                                     ("hifi_receptor_cycles", "cycles", "valid read cycles per receptor"),
                                     ("hifi_receptor_weak_reads", "weak",
                                      "readings below the cleaning threshold (strength_T) per receptor")):
            family = CounterMetricFamily(name, help_text, labels=["node", "receptor"])
            for receptor, counts in sorted(receptors.items()):
                family.add_metric([self.node_id, receptor], counts[key])
            yield family


def _counter(name: str, help_text: str, label_names: list[str], labels: list[str], value: float) -> Metric:
    family = CounterMetricFamily(name, help_text, labels=label_names)
    family.add_metric(labels, value)
    return family


def _gauge(name: str, help_text: str, label_names: list[str], labels: list[str], value: float) -> Metric:
    family = GaugeMetricFamily(name, help_text, labels=label_names)
    family.add_metric(labels, value)
    return family


class ServiceMetrics:
    """One service's registries (gRPC calls, MDR operations), served over HTTP by `serve`:
    `registry` to anyone, `by_part` (the same series, and those of each part) to an operator."""

    def __init__(self, service: str, mdr: MDR) -> None:
        self.service = service
        self.registry = CollectorRegistry()
        self.by_part = CollectorRegistry()
        self.authenticator = Authenticator(mdr)
        self.grpc_calls = Counter("hifi_grpc_calls", "gRPC calls served, by method and status code",
                                  ["service", "method", "code"], registry=None)
        self.grpc_seconds = Histogram("hifi_grpc_call_duration_seconds", "time to serve a gRPC call",
                                      ["service", "method"], buckets=GRPC_BUCKETS, registry=None)
        self._share(self.grpc_calls, self.grpc_seconds, _MDROperations(service, mdr))
        self.url = ""
        self._http: BoundedServer | None = None

    def _share(self, *collectors: Collector) -> None:
        """Series anyone may scrape (an operator's scrape has them too)."""
        for collector in collectors:
            self.registry.register(collector)
            self.by_part.register(collector)

    def registry_for(self, caller: Identity | None) -> CollectorRegistry:
        return self.by_part if caller is not None and caller.has("operator") else self.registry

    def serve(self, host: str = "127.0.0.1", port: int = 0, advertise_host: str = "") -> str:
        """Serve /metrics on host:port (0: any free port); returns the URL others scrape, on
        `advertise_host` when given (the service listens on all interfaces)."""
        metrics = self

        class Handler(_MetricsHandler):
            owner = metrics

        self._http = BoundedServer((host, port), Handler)
        self._http.daemon_threads = True
        threading.Thread(target=self._http.serve_forever, name=f"metrics-{self.service}", daemon=True).start()
        self.url = f"http://{advertise_host or host}:{self._http.server_port}/metrics"
        return self.url

    def close(self) -> None:
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None

    def interceptor(self) -> grpc.ServerInterceptor:
        return _CallMetrics(self)

    def observe_call(self, method: str, code: grpc.StatusCode, seconds: float) -> None:
        self.grpc_calls.labels(self.service, method, code.name).inc()
        self.grpc_seconds.labels(self.service, method).observe(seconds)


class _BatchSeries:
    """A node's micro-batch series, by `labels` (["node"] for anyone, ["node", "query"] by part)."""

    def __init__(self, labels: list[str]) -> None:
        self.view_rows = Counter("hifi_view_rows", "rows the node's queries and views emitted (this process)",
                                 labels, registry=None)
        self.batch_seconds = Histogram("hifi_microbatch_duration_seconds",
                                       "time to run a micro-batch's plan and write its rows", labels,
                                       buckets=BATCH_BUCKETS, registry=None)
        self.result_latency = Histogram("hifi_result_latency_seconds",
                                        "wall clock when a micro-batch's rows were written minus their newest "
                                        "event time (window start for windowed views)", labels,
                                        buckets=LATENCY_BUCKETS, registry=None)

    def all(self) -> tuple[Counter, Histogram, Histogram]:
        return self.view_rows, self.batch_seconds, self.result_latency

    def observe(self, labels: tuple[str, ...], report: BatchReport) -> None:
        self.view_rows.labels(*labels).inc(report.rows_out)
        self.batch_seconds.labels(*labels).observe(report.duration_s)
        if report.max_event_ms is not None and report.emitted_ms:
            self.result_latency.labels(*labels).observe(max(0.0, (report.emitted_ms - report.max_event_ms) / 1000))


class NodeMetrics(ServiceMetrics):
    """A node's registries: its MDR statistics plus what its micro-batches measured, summed over
    its parts for anyone and by part for an operator."""

    def __init__(self, node_id: str, mdr: MDR) -> None:
        super().__init__(f"node:{node_id}", mdr)
        self.node_id = node_id
        self._share(_NodeStatistics(node_id, mdr))
        self.node_series, self.part_series = _BatchSeries(["node"]), _BatchSeries(["node", "query"])
        for metric in self.node_series.all():
            self.registry.register(metric)
        for metric in self.part_series.all():
            self.by_part.register(metric)

    def forget(self, query_id: str) -> None:
        """Drop a cancelled part's series (a label per query would otherwise pile up for ever)."""
        for metric in self.part_series.all():
            with contextlib.suppress(KeyError):
                metric.remove(self.node_id, query_id)

    def observe_batch(self, query_id: str, report: BatchReport) -> None:
        self.node_series.observe((self.node_id,), report)
        self.part_series.observe((self.node_id, query_id), report)


class _MetricsHandler(BaseHTTPRequestHandler):
    """GET /metrics: the registry the caller may read (anonymous: no part's series); a token given
    that is not valid is answered 401, so a scraper set up wrongly fails rather than reads less."""

    owner: ServiceMetrics
    timeout = 10   # seconds a socket may stall
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:  # noqa: N802 - the base class's name
        if urlsplit(self.path).path not in ("/", "/metrics"):
            return self._answer(HTTPStatus.NOT_FOUND, b"no such page: /metrics is served here\n", "text/plain")
        token = bearer([("authorization", self.headers.get("Authorization") or "")])
        try:
            caller = self.owner.authenticator.identify(token)
        except Exception:  # noqa: BLE001 - the MDR unreachable: what anyone may read
            log.info("metrics: the MDR cannot be reached to check a token; answering without parts")
            caller = token = None
        if token and caller is None:
            return self._answer(HTTPStatus.UNAUTHORIZED, b"unknown or expired token\n", "text/plain")
        self._answer(HTTPStatus.OK, generate_latest(self.owner.registry_for(caller)), CONTENT_TYPE_LATEST)

    def _answer(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's signature
        log.debug("metrics: " + format, *args)


def batch_figures(url: str) -> dict[str, float]:
    """A node's micro-batch figures as anyone scrapes them from its /metrics (the dashboard shows
    them): batches run and their mean duration; {} when it does not answer."""
    if not url:
        return {}
    try:
        with urllib.request.urlopen(url, timeout=1.0) as answer:
            text = answer.read().decode()
    except OSError:
        return {}
    batches, seconds = 0.0, 0.0
    for family in text_string_to_metric_families(text):
        if family.name == "hifi_microbatch_duration_seconds":
            for sample in family.samples:
                if sample.name.endswith("_count"):
                    batches += sample.value
                elif sample.name.endswith("_sum"):
                    seconds += sample.value
    return {"batches": int(batches), "batch_mean_s": round(seconds / batches, 3) if batches else None}


class _CallMetrics(grpc.ServerInterceptor):
    """Counts and times every call a server serves (unary and server-streaming handlers, and the
    refusals of services.auth)."""

    def __init__(self, metrics: ServiceMetrics) -> None:
        self.metrics = metrics

    def intercept_service(self, continuation, handler_call_details):
        handler = continuation(handler_call_details)
        if handler is None:
            return None
        method = handler_call_details.method
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                self._unary(method, handler.unary_unary), handler.request_deserializer, handler.response_serializer)
        if handler.unary_stream is not None and not non_blocking(handler.unary_stream):   # (health's Watch: unmetered)
            return grpc.unary_stream_rpc_method_handler(
                self._streaming(method, handler.unary_stream), handler.request_deserializer,
                handler.response_serializer)
        if handler.stream_unary is not None:   # a call refused before it was given a worker (services.auth)
            return grpc.stream_unary_rpc_method_handler(
                self._unary(method, handler.stream_unary), handler.request_deserializer, handler.response_serializer)
        if handler.stream_stream is not None:   # reflection's, and refusals of streaming methods
            return grpc.stream_stream_rpc_method_handler(
                self._streaming(method, handler.stream_stream), handler.request_deserializer,
                handler.response_serializer)
        return handler

    def _finish(self, method: str, context, started: float, failed: bool) -> None:
        code = context.code() if hasattr(context, "code") else None
        if not isinstance(code, grpc.StatusCode):
            code = grpc.StatusCode.UNKNOWN if failed else grpc.StatusCode.OK
        self.metrics.observe_call(method, code, time.monotonic() - started)

    def _unary(self, method: str, behaviour: Callable):
        def served(request, context):
            started, failed = time.monotonic(), True
            try:
                answer = behaviour(request, context)
                failed = False
                return answer
            finally:
                self._finish(method, context, started, failed)
        return served

    def _streaming(self, method: str, behaviour: Callable):
        def served(request, context):
            started, failed = time.monotonic(), True
            try:
                yield from behaviour(request, context)
                failed = False
            finally:
                self._finish(method, context, started, failed)
        return served
