"""The operations dashboard: one web page of the whole hierarchy, pushed live over server-sent events.

It is a client of the rest of the system and keeps nothing that a restart would lose: health,
views, queries and history come from the MDR; throughput figures also from the services'
/metrics; queries are submitted, explained and cancelled through the placement service's gRPC
API, and their results streamed from it; alerts, faulty receptors and dead letters are re-read
from their Kafka topics (from the beginning, so a restarted dashboard shows the same events).

Every /api/ call but login needs a session (the cookie POST /api/login sets, from a token) or an
`Authorization: Bearer <token>` header: 401 without, 403 when the caller's roles do not reach
what it asks. A caller sees its own queries (an operator every query) and the views it may read;
its queries are submitted and cancelled with its own token. Changes (POST, DELETE) must also come
from the dashboard's own origin.

HTTP API (all JSON unless said):
  GET  /                      the page (assets under /static/, served from services/dashboard_assets)
  POST /api/login {token}     a session for the token's principal (cookie hifi_session; HttpOnly,
                              SameSite=Strict); {principal, roles}
  POST /api/logout            ends the session
  GET  /api/me                {principal, roles} of the caller
  GET  /api/snapshot          nodes with health, receptors with telemetry, views, queries with their
                              placement, per-tier rate and lag series, recent events
  GET  /api/stream            text/event-stream: a `snapshot` event every second
  GET  /api/results?query=ID  text/event-stream: `row` events ({columns, values, emitted_ms}) of a
      /api/results?view=NODE.VIEW   running query (through placement) or an exported view (its topic)
  POST /api/explain {sql}     the hierarchical plan without running it
  POST /api/queries {sql, since?, until?}  submit; {query_id, root, plan, columns}. `since`: answer
                              from then on, the past from the nodes' archives; `until`: windows
                              starting before it (a UTC time, or a duration: ago / from now)
  DELETE /api/queries/ID      cancel
  GET  /metrics               the dashboard's own Prometheus metrics (open, like every service's
                              /metrics: counters, no readings)
  GET  /api/prometheus-targets  every service's /metrics for Prometheus' http_sd_configs (open:
                              the endpoints Prometheus scrapes)
Errors answer {"error": "..."} with 400 (the query: position and reason), 401, 403, 404 or 503.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http import HTTPStatus
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import parse_qs, urlsplit

import grpc
from prometheus_client import generate_latest

from glue.catalog import internal_view
from glue.topology import Topology
from mdr.repository import MDR, now_ms
from protos import hifi_pb2, hifi_pb2_grpc
from services import certs
from services.auth import Authenticator, Security, open_channel
from services.dashboard_access import SESSION_COOKIE, SESSION_S, Sessions, visible_to
from services.dashboard_events import EventLog
from services.dashboard_http import (
    LOCAL_HOSTS,
    JsonExchange,
    allowed_hosts,
    host_name,
    loopback,
    same_origin,
)
from services.health import CountsSample, RateWindow, moves, node_health, query_states, tier_series
from services.http_server import BoundedServer, TLSServer
from services.metrics import ServiceMetrics, batch_figures
from services.quotas import StreamSlots, quota_of, streams_refusal
from wire.codec import from_value, readable_batches
from wire.identity import Identity
from wire.kafka import consumers
from wire.topics import dead_topic, view_topic
from wire.windows import DurationError, time_at

log = logging.getLogger("hifi.dashboard")

ASSETS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "dashboard_assets")
CONTENT_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
                 ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml"}
PUSH_INTERVAL_S = 1.0
CHART_SPAN_MS = 300_000      # the throughput and lag charts show the last five minutes
RATE_SPAN_MS = 5_000         # receptor rates over (at least) the last five seconds


def _json_cell(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return value.isoformat()
    if isinstance(value, list | tuple):
        return [_json_cell(v) for v in value]
    return value


class Dashboard:
    def __init__(self, mdr: MDR, bootstrap: str, security: Security, topology: Topology | None = None) -> None:
        """`security`: the certificates its placement calls trust (they carry each caller's token)."""
        self.mdr = mdr
        self.bootstrap = bootstrap
        self.security = security.with_token("")
        self.authenticator = Authenticator(mdr)
        self.sessions = Sessions()
        # open event streams per principal, each kind up to its quota (a query's is counted by placement)
        self.view_streams, self.snapshot_streams = StreamSlots(), StreamSlots()
        self.topology = topology
        self.metrics = ServiceMetrics("dashboard", mdr)
        self.url = ""
        self.stop_event = threading.Event()
        self._server: BoundedServer | None = None
        self._scrapers = ThreadPoolExecutor(max_workers=8, thread_name_prefix="dashboard-scrape")
        self._rates = RateWindow(RATE_SPAN_MS)   # stepped only under _snapshot_lock
        self._snapshot: tuple[float, dict] | None = None
        self._snapshot_lock = threading.Lock()
        self._placement_channel: grpc.Channel | None = None
        nodes = list(topology.nodes) if topology is not None else [n.id for n in mdr.nodes()]
        self.events = EventLog(bootstrap, self._alert_topics(), [dead_topic(n) for n in nodes])

    def _alert_topics(self) -> dict[str, str]:
        if self.topology is None:
            return {}
        return {view_topic(node, view.name): view.alert for node in self.topology.nodes
                for view in self.topology.views_at(node) if view.alert and view.materialize}

    # ------------------------------------------------------------ lifecycle

    def serve(self, listen: str = "127.0.0.1:0", advertise_host: str = "") -> str:
        """Serve on `listen`; returns the URL, on `advertise_host` when given (listening on all
        interfaces, e.g. in a container), as recorded in the MDR for others."""
        host, _, port = listen.rpartition(":")
        dashboard = self

        tls = not loopback(host)   # beyond loopback a session cookie must never cross the wire in clear

        class Handler(_Handler):
            owner = dashboard
            stopping = dashboard.stop_event
            hosts = allowed_hosts(host, advertise_host, os.environ.get("HIFI_DASHBOARD_HOSTS", ""))
            secure = tls

        if tls:
            self._server = TLSServer((host, int(port)), Handler)
            self._server.context = certs.server_context(self.security.tls_dir, "dashboard")
        else:
            self._server = BoundedServer((host, int(port)), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name="dashboard-http", daemon=True).start()
        self.url = f"{'https' if tls else 'http'}://{advertise_host or host}:{self._server.server_port}/"
        self.events.start()
        self.mdr.put_endpoints("dashboard", {"http": self.url, "metrics": f"{self.url}metrics"})
        return self.url

    def close(self) -> None:
        self.stop_event.set()
        self.events.stop()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._placement_channel is not None:
            self._placement_channel.close()
        self._scrapers.shutdown(wait=False)

    # ------------------------------------------------------------ the snapshot

    def snapshot(self) -> dict:
        """The page's whole state; computed at most once per push interval, whatever the number of
        open pages (they share it)."""
        with self._snapshot_lock:
            if self._snapshot is None or time.monotonic() - self._snapshot[0] >= 0.9 * PUSH_INTERVAL_S:
                self._snapshot = (time.monotonic(), self._build_snapshot())
            return self._snapshot[1]

    def _build_snapshot(self) -> dict:
        now = now_ms()
        records = self.mdr.nodes()
        views = self.mdr.views()
        endpoints = self.mdr.endpoints()
        metrics_urls = [endpoints.get(f"node:{r.id}", {}).get("metrics", "") if r.alive else "" for r in records]
        scraped = list(self._scrapers.map(batch_figures, metrics_urls))   # side by side: each waits on its node
        nodes = []
        moved = moves(self.mdr.adoptions(), lambda ms: time.strftime("%H:%M:%S", time.localtime(ms / 1000)))
        for record, url, figures in zip(records, metrics_urls, scraped, strict=True):
            health = node_health(record, self.mdr.stats(record.id),   # the users' views: the planner's shown apart
                                 [v.name for v in views if v.node == record.id and not internal_view(v.name)], now)
            moved_to, move = moved.get(record.id, ("", ""))
            nodes.append({**health.as_dict(), **figures, "metrics": url, "moved_to": moved_to, "move": move})
        events, event_counts = self.events.recent()
        queries = self.mdr.queries()
        states = query_states(self.mdr, queries)
        faulty = {e["receptor"] for e in events if e["kind"] == "faulty" and now - e["ms"] < 60_000}
        return {
            "now_ms": now,
            "topology": self.topology.name if self.topology else "",
            "nodes": nodes,
            "receptors": self._receptors(records, faulty),
            "views": [{"name": v.name, "node": v.node, "topic": v.topic, "window": v.window,
                       "definition": v.definition, "readers": list(v.readers), "internal": internal_view(v.name)}
                      for v in views],
            "queries": [{"id": q.id, "principal": q.principal, "text": q.text, "root": q.root,
                         "status": states[q.id][0],
                         "error": states[q.id][1], "submitted_ms": q.submitted_ms, "explain": q.explain,
                         "columns": list(q.columns), "tasks": list(q.tasks)} for q in queries],
            "tiers": tier_series({r.id: self.mdr.history(r.id, CHART_SPAN_MS // 1000) for r in records},
                                 {r.id: r.tier for r in records}, now - CHART_SPAN_MS),
            "events": events[:50],
            "event_counts": event_counts,
            "endpoints": endpoints,
        }

    def _receptors(self, records, faulty: set[str]) -> dict[str, list[dict]]:
        """Per edge node, its receptors with rates over the last RATE_SPAN_MS (or what has been seen)."""
        edges = [r.id for r in records if r.tier == "edge"]
        counts = {rid: stats for node in edges for rid, stats in self.mdr.receptor_stats(node).items()}
        rates = self._rates.add(CountsSample(now_ms(), counts))
        found: dict[str, list[dict]] = {edge: [] for edge in edges}
        for rid, info in sorted(self.mdr.receptors().items()):
            if info.get("node") not in found:
                continue
            rate = rates.get(rid)
            found[info["node"]].append({
                "id": rid, "kind": info.get("kind", ""), "location": info.get("location", ""),
                "reads": counts.get(rid, {}).get("reads", 0), "faulty": rid in faulty,
                **(rate.as_dict() if rate else {"reads_per_s": None, "cycle_ms": None, "weak_share": None,
                                                 "silent": False})})
        return found

    def prometheus_targets(self) -> list[dict]:
        """Every service's /metrics in Prometheus' HTTP service-discovery form, labelled with
        service, node and tier: Prometheus finds whatever registered in the MDR."""
        tiers = {n.id: n.tier for n in self.mdr.nodes()}
        targets = []
        for service, endpoints in sorted(self.mdr.endpoints().items()):
            url = urlsplit(endpoints.get("metrics", ""))
            if not url.netloc:
                continue
            labels = {"service": service, "__metrics_path__": url.path or "/metrics", "__scheme__": url.scheme}
            if service.startswith("node:"):
                node = service.removeprefix("node:")
                labels.update(node=node, tier=tiers.get(node, ""))
            targets.append({"targets": [url.netloc], "labels": labels})
        return targets

    def snapshots(self, stop: threading.Event) -> Iterator[dict]:
        while not (stop.is_set() or self.stop_event.is_set()):
            yield self.snapshot()
            stop.wait(PUSH_INTERVAL_S)

    # ------------------------------------------------------------ queries, through the placement service

    def placement(self) -> hifi_pb2_grpc.PlacementStub:
        address = self.mdr.placement_address()
        if not address:
            raise LookupError("no placement service is registered in the MDR")
        if self._placement_channel is None:
            self._placement_channel = open_channel(address, self.security)
        return hifi_pb2_grpc.PlacementStub(self._placement_channel)

    def submit(self, sql: str, explain_only: bool, token: str, since_ms: int = 0, until_ms: int = 0) -> dict:
        reply = self.placement().Submit(hifi_pb2.SubmitRequest(sql=sql, explain_only=explain_only, since_ms=since_ms,
                                                                until_ms=until_ms), timeout=120,
                                        credentials=grpc.access_token_call_credentials(token))
        return {"query_id": reply.query_id, "root": reply.root_node, "plan": reply.plan,
                "columns": list(reply.columns)}

    def cancel(self, query_id: str, token: str) -> None:
        self.placement().Cancel(hifi_pb2.QueryRef(query_id=query_id), timeout=120,
                                credentials=grpc.access_token_call_credentials(token))

    def query_rows(self, query_id: str, stop: threading.Event, token: str) -> Iterator[dict]:
        stream = self.placement().Results(hifi_pb2.QueryRef(query_id=query_id),
                                          credentials=grpc.access_token_call_credentials(token))
        stop_watch = threading.Thread(target=lambda: (stop.wait(), stream.cancel()), daemon=True)
        stop_watch.start()
        try:
            for result in stream:
                values = [_json_cell(from_value(v)) for v in result.row.values]
                yield {"columns": list(result.columns), "values": values, "emitted_ms": result.emitted_ms}
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.CANCELLED:
                raise

    def view_rows(self, node_view: str, stop: threading.Event) -> Iterator[dict]:
        node, _, view = node_view.partition(".")
        record = next((v for v in self.mdr.views(node) if v.name == view and v.topic), None)
        if record is None:
            raise KeyError(f"no materialized view {node_view!r}")
        for _, batch in readable_batches(consumers.tail(self.bootstrap, [record.topic], stop)):
            for values in batch.rows:
                yield {"columns": list(batch.columns), "values": [_json_cell(v) for v in values],
                       "emitted_ms": batch.emitted_ms}


class _Handler(JsonExchange):
    """The dashboard's pages and API (the module's docstring lists them)."""

    owner: Dashboard
    hosts: frozenset[str] = frozenset(LOCAL_HOSTS)
    secure = False   # served over TLS: the session cookie is `Secure`

    def _misdirected(self) -> bool:
        """Refuse (421) a request for a host name this dashboard does not go by (allowed_hosts)."""
        if host_name(self.headers.get("Host")) in self.hosts:
            return False
        self.close_connection = True   # its body is not read
        self._error(HTTPStatus.MISDIRECTED_REQUEST, "this dashboard does not answer to that host name; "
                                                    "set HIFI_DASHBOARD_HOSTS to the names it is reached by")
        return True

    # ------------------------------------------------------------ routes

    def _caller(self) -> tuple[Identity, str] | None:
        """(identity, token) of the request's session or bearer token; None after answering 401."""
        token = ""
        header = self.headers.get("Authorization", "")
        if header.startswith("Bearer "):
            token = header.removeprefix("Bearer ").strip()
        else:
            cookies = SimpleCookie(self.headers.get("Cookie", ""))
            if SESSION_COOKIE in cookies:
                token = self.owner.sessions.token(cookies[SESSION_COOKIE].value)
        identity = self.owner.authenticator.identify(token)
        if identity is None:
            self.close_connection = True   # a body it sent is not read: where the next request starts is unknown
            self._error(HTTPStatus.UNAUTHORIZED, "log in first: POST /api/login {\"token\": ...} (hifi users add "
                                                 "makes a token; hifi up prints a login link)")
            return None
        return identity, token

    def do_GET(self) -> None:  # noqa: N802 - http.server's names
        self.guarded(self._get)

    def do_POST(self) -> None:  # noqa: N802
        self.guarded(self._post)

    def _get(self) -> None:
        if self._misdirected():
            return None
        url = urlsplit(self.path)
        if url.path in ("/", "/index.html"):
            return self._asset("index.html")
        if url.path.startswith("/static/"):
            return self._asset(url.path.removeprefix("/static/"))
        if url.path == "/api/prometheus-targets":
            return self._json(self.owner.prometheus_targets())
        if url.path == "/metrics":
            return self._send(HTTPStatus.OK, generate_latest(self.owner.metrics.registry),
                              "text/plain; version=0.0.4; charset=utf-8")
        if not url.path.startswith("/api/"):
            return self._error(HTTPStatus.NOT_FOUND, f"no such page: {url.path}")
        caller = self._caller()
        if caller is None:
            return None
        identity, token = caller
        if url.path == "/api/me":
            return self._json({"principal": identity.principal, "roles": sorted(identity.roles)})
        if url.path == "/api/snapshot":
            return self._json(visible_to(self.owner.snapshot(), identity))
        if url.path == "/api/stream":
            stop = threading.Event()
            return self._held_stream(self.owner.snapshot_streams, identity, (
                ("snapshot", visible_to(s, identity)) for s in self.owner.snapshots(stop)), stop)
        if url.path == "/api/results":
            return self._results(parse_qs(url.query), identity, token)
        self._error(HTTPStatus.NOT_FOUND, f"no such page: {url.path}")

    def _cross_origin(self) -> bool:
        """Refuse (403) a browser's request sent by a page of another origin: a mutating call must
        come from this dashboard's own page (a foreign page could otherwise start or cancel queries
        through a browser that can reach it)."""
        if same_origin(self.headers.get("Origin"), self.headers.get("Host"), self.headers.get("Sec-Fetch-Site")):
            return False
        self.close_connection = True   # its body is not read
        self._error(HTTPStatus.FORBIDDEN, "cross-origin request refused: queries are started and cancelled "
                                          "from the dashboard's own page (or without a browser: hifi query)")
        return True

    def _post(self) -> None:
        path = urlsplit(self.path).path
        if self._misdirected() or self._cross_origin():
            return None
        if path == "/api/login":
            return self._login()
        if path == "/api/logout":
            cookies = SimpleCookie(self.headers.get("Cookie", ""))
            if SESSION_COOKIE in cookies:
                self.owner.sessions.close(cookies[SESSION_COOKIE].value)
            return self._json({"logged_out": True})
        if path not in ("/api/explain", "/api/queries"):
            return self._error(HTTPStatus.NOT_FOUND, f"no such endpoint: {path}")
        caller = self._caller()
        if caller is None:
            return None
        body = self._body()
        if body is None:
            return None
        sql = str(body.get("sql", "")).strip()
        sql.encode()   # a lone surrogate (`"\ud800"`) is no text: refused here (`guarded`), not in the call
        if not sql:
            return self._error(HTTPStatus.BAD_REQUEST, "the request needs a query: {\"sql\": \"SELECT ...\"}")
        now = now_ms()
        try:
            since_ms = time_at(str(body["since"]), now, ago=True) if body.get("since") else 0
            until_ms = time_at(str(body["until"]), now, ago=False) if body.get("until") else 0
        except DurationError as exc:
            return self._error(HTTPStatus.BAD_REQUEST, str(exc))
        self._placement_call(lambda: self._json(self.owner.submit(sql, path == "/api/explain", caller[1], since_ms,
                                                                  until_ms)))

    def _login(self) -> None:
        body = self._body()
        if body is None:
            return None
        token = str(body.get("token", "")).strip()
        identity = self.owner.authenticator.identify(token)
        if identity is None:
            return self._error(HTTPStatus.UNAUTHORIZED, "unknown or expired token")
        session = self.owner.sessions.open(token)
        body_bytes = json.dumps({"principal": identity.principal, "roles": sorted(identity.roles)}).encode()
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body_bytes)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("Set-Cookie", f"{SESSION_COOKIE}={session}; Path=/; HttpOnly; SameSite=Strict; "
                                       f"Max-Age={SESSION_S}" + ("; Secure" if self.secure else ""))
        self.end_headers()
        self.wfile.write(body_bytes)

    def do_DELETE(self) -> None:  # noqa: N802
        path = urlsplit(self.path).path
        if self._misdirected() or self._cross_origin():
            return None
        if not path.startswith("/api/queries/"):
            return self._error(HTTPStatus.NOT_FOUND, f"no such endpoint: {path}")
        caller = self._caller()
        if caller is None:
            return None
        query_id = path.removeprefix("/api/queries/")
        self._placement_call(lambda: (self.owner.cancel(query_id, caller[1]), self._json({"cancelled": query_id})))

    def _placement_call(self, call) -> None:
        try:
            call()
        except LookupError as exc:
            self._error(HTTPStatus.SERVICE_UNAVAILABLE, str(exc))
        except grpc.RpcError as exc:
            status = {grpc.StatusCode.INVALID_ARGUMENT: HTTPStatus.BAD_REQUEST,
                      grpc.StatusCode.NOT_FOUND: HTTPStatus.NOT_FOUND,
                      grpc.StatusCode.UNAUTHENTICATED: HTTPStatus.UNAUTHORIZED,
                      grpc.StatusCode.PERMISSION_DENIED: HTTPStatus.FORBIDDEN}.get(exc.code(),
                                                                                   HTTPStatus.SERVICE_UNAVAILABLE)
            self._error(status, exc.details() or exc.code().name)

    def _results(self, params: dict[str, list[str]], identity: Identity, token: str) -> None:
        stop = threading.Event()
        query, view = params.get("query", [""])[0], params.get("view", [""])[0]
        if not query and not view:
            return self._error(HTTPStatus.BAD_REQUEST, "name a query (?query=ID) or a view (?view=NODE.VIEW)")
        if view:
            record = next((v for v in self.owner.mdr.views() if f"{v.node}.{v.name}" == view and v.topic), None)
            if record is None or not identity.may_read(record.readers):   # one answer: nothing said of one not theirs
                return self._error(HTTPStatus.NOT_FOUND, f"no materialized view {view!r} exported to "
                                                         f"{identity.principal}")
        if query:
            found = next((q for q in self.owner.mdr.queries() if q.id == query), None)
            if found is None:
                return self._error(HTTPStatus.NOT_FOUND, f"no query {query!r}")
            if not identity.may_touch(found.principal):
                return self._error(HTTPStatus.FORBIDDEN, f"query {query} is not {identity.principal}'s")
        if query:
            return self._stream((("row", row) for row in self.owner.query_rows(query, stop, token)), stop)
        self._held_stream(self.owner.view_streams, identity, (("row", row) for row in self.owner.view_rows(view, stop)),
                          stop)

    def _held_stream(self, slots: StreamSlots, identity: Identity, events: Iterator[tuple[str, Any]],
                     stop: threading.Event) -> None:
        """An event stream that holds one of `identity`'s slots while it is open: beyond its
        quota, 429 (each stream holds a thread of the dashboard's)."""
        if not slots.take(identity.principal, quota_of(identity).streams):
            return self._error(HTTPStatus.TOO_MANY_REQUESTS, streams_refusal(identity))
        try:
            self._stream(events, stop)
        finally:
            slots.give_back(identity.principal)

    def _asset(self, name: str) -> None:
        path = os.path.normpath(os.path.join(ASSETS, name))
        if not path.startswith(ASSETS + os.sep) or not os.path.isfile(path):
            return self._error(HTTPStatus.NOT_FOUND, f"no such file: {name}")
        with open(path, "rb") as fh:
            body = fh.read()
        self._send(HTTPStatus.OK, body, CONTENT_TYPES.get(os.path.splitext(path)[1], "application/octet-stream"))

