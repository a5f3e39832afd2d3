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
  hifi_view_rows_total {query}, hifi_microbatch_duration_seconds {query},
  hifi_result_latency_seconds {query}, hifi_grpc_calls_total {method, code},
  hifi_grpc_call_duration_seconds {method}, hifi_mdr_operations_total {operation}
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator

import grpc
from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from dsp.status import BatchReport
from mdr.repository import MDR
from services.auth import non_blocking

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
    """One service's registry (gRPC calls, MDR operations), served over HTTP by `serve`."""

    def __init__(self, service: str, mdr: MDR) -> None:
        self.service = service
        self.registry = CollectorRegistry()
        self.grpc_calls = Counter("hifi_grpc_calls", "gRPC calls served, by method and status code",
                                  ["service", "method", "code"], registry=self.registry)
        self.grpc_seconds = Histogram("hifi_grpc_call_duration_seconds", "time to serve a gRPC call",
                                      ["service", "method"], buckets=GRPC_BUCKETS, registry=self.registry)
        self.registry.register(_MDROperations(service, mdr))
        self.url = ""
        self._http = None

    def serve(self, host: str = "127.0.0.1", port: int = 0, advertise_host: str = "") -> str:
        """Serve /metrics on host:port (0: any free port); returns the URL others scrape, on
        `advertise_host` when given (the service listens on all interfaces)."""
        self._http, _ = start_http_server(port, host, registry=self.registry)
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


class NodeMetrics(ServiceMetrics):
    """A node's registry: its MDR statistics plus what its micro-batches measured."""

    def __init__(self, node_id: str, mdr: MDR) -> None:
        super().__init__(f"node:{node_id}", mdr)
        self.node_id = node_id
        self.view_rows = Counter("hifi_view_rows", "rows a query or view emitted (this process)", ["node", "query"],
                                 registry=self.registry)
        self.batch_seconds = Histogram("hifi_microbatch_duration_seconds",
                                       "time to run a micro-batch's plan and write its rows", ["node", "query"],
                                       buckets=BATCH_BUCKETS, registry=self.registry)
        self.result_latency = Histogram("hifi_result_latency_seconds",
                                        "wall clock when a micro-batch's rows were written minus their newest "
                                        "event time (window start for windowed views)", ["node", "query"],
                                        buckets=LATENCY_BUCKETS, registry=self.registry)
        self.registry.register(_NodeStatistics(node_id, mdr))

    def forget(self, query_id: str) -> None:
        """Drop a cancelled part's series (a label per query would otherwise pile up for ever)."""
        for metric in (self.view_rows, self.batch_seconds, self.result_latency):
            with contextlib.suppress(KeyError):
                metric.remove(self.node_id, query_id)

    def observe_batch(self, query_id: str, report: BatchReport) -> None:
        self.view_rows.labels(self.node_id, query_id).inc(report.rows_out)
        self.batch_seconds.labels(self.node_id, query_id).observe(report.duration_s)
        if report.max_event_ms is not None and report.emitted_ms:
            self.result_latency.labels(self.node_id, query_id).observe(
                max(0.0, (report.emitted_ms - report.max_event_ms) / 1000))


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
