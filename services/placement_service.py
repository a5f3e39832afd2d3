"""The placement service: the Placement gRPC API over a QueryPlacer (services.placement), its
server and /metrics, and its housekeeping (queries whose --until passed ended, retired topics
deleted)."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field

import grpc

from base.plan import PlanError
from glue.binder import AccessError
from glue.sql.lexer import SqlError
from mdr.repository import MDR, QueryRecord, now_ms
from protos import hifi_pb2, hifi_pb2_grpc
from services import tables
from services.auth import Authenticator, Security, mint_token
from services.grpc_server import start_server
from services.health import query_states
from services.metrics import ServiceMetrics
from services.placement import PlacementError, QueryFailed, QueryPlacer
from services.quotas import StreamSlots, over_queries, quota_of, streams_refusal
from wire.codec import to_value
from wire.identity import Identity, IdentityError, checked_priority, checked_readers
from wire.windows import WindowError

log = logging.getLogger("hifi.placement")


PLACEMENT_PRINCIPAL = "placement"   # the service principal its calls to the nodes carry


ENDING_CHECK_S = 10.0   # how often the queries whose --until passed are looked for


class PlacementServicer(hifi_pb2_grpc.PlacementServicer):
    """The Placement API. Every call arrives authenticated (services.auth); a query belongs to
    the principal that submitted it: only it, an operator or an admin may read, list or cancel it."""

    def __init__(self, placement: QueryPlacer, authenticator: Authenticator) -> None:
        self.placement = placement
        self.authenticator = authenticator
        self.streams = StreamSlots()

    def _caller(self, context) -> Identity:
        identity = self.authenticator.caller(context)
        if identity is None:   # its token was removed since the interceptor checked it
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "the token is no longer valid")
        return identity

    def _asking_as(self, request, context) -> Identity:
        """Who the query reads as: the caller; an admin may name another principal (to see what
        it would be answered), who then reads with that principal's roles."""
        caller = self._caller(context)
        if not request.principal or request.principal == caller.principal:
            return caller
        if not caller.has("admin"):
            context.abort(grpc.StatusCode.PERMISSION_DENIED,
                          f"{caller.principal} may not ask as {request.principal!r} (only an admin may)")
        roles = {r for t in self.placement.mdr.tokens().values() if t.principal == request.principal for r in t.roles}
        return Identity(request.principal, frozenset(roles))

    def _own_query(self, query_id: str, context) -> QueryRecord:
        """The query, when the caller may touch it (NOT_FOUND / PERMISSION_DENIED otherwise)."""
        caller = self._caller(context)
        record = next((q for q in self.placement.mdr.queries() if q.id == query_id), None)
        if record is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"no query {query_id!r}")
        if not caller.may_touch(record.principal):
            context.abort(grpc.StatusCode.PERMISSION_DENIED,
                          f"{caller.principal} may not touch query {query_id}: it is not theirs")
        return record

    def Submit(self, request, context):  # noqa: N802 - gRPC method names
        reader = self._asking_as(request, context)
        try:
            readers = checked_readers(list(request.readers))
            if request.explain_only:
                # over the past: what it would be fed, and the archives that begin too late
                plan = self.placement.plan(request.sql, reader, since_ms=request.since_ms or None,
                                           until_ms=request.until_ms or None)
            else:
                running = sum(1 for q in self.placement.mdr.queries() if q.principal == reader.principal)
                if over := over_queries(self._caller(context), reader.principal, running):
                    context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, over)
                plan = self.placement.submit(request.sql, reader, replay=request.replay, readers=readers,
                                             since_ms=request.since_ms or None, until_ms=request.until_ms or None,
                                             priority=checked_priority(self._caller(context),
                                                                              request.priority))
        except IdentityError as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        except AccessError as exc:
            context.abort(grpc.StatusCode.PERMISSION_DENIED, str(exc))
        except (SqlError, PlanError, WindowError) as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        except RecursionError:   # glue.limits refuses deep queries first; this is the last guard
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "line 1, column 1: the query nests too deeply")
        except PlacementError as exc:
            context.abort(grpc.StatusCode.UNAVAILABLE, str(exc))
        return hifi_pb2.SubmitReply(query_id=plan.query_id, root_node=plan.placement.root, plan=plan.explain(),
                                    result_topic=plan.result_topic, columns=plan.columns)

    def Cancel(self, request, context):  # noqa: N802
        self._own_query(request.query_id, context)
        try:
            self.placement.cancel(request.query_id)
        except KeyError as exc:
            context.abort(grpc.StatusCode.NOT_FOUND, str(exc.args[0]))
        return hifi_pb2.Ack(ok=True)

    def List(self, request, context):  # noqa: N802
        caller = self._caller(context)
        queries = [q for q in self.placement.mdr.queries() if caller.may_touch(q.principal)]
        states = query_states(self.placement.mdr, queries)
        return hifi_pb2.QueryList(queries=[
            hifi_pb2.QueryInfo(query_id=q.id, status=states[q.id][0], output_topic=q.result_topic, plan=q.explain,
                               root=q.root, text=q.text, error=states[q.id][1]) for q in queries])

    def Listing(self, request, context):  # noqa: N802
        """The hierarchy's listings: its health is everyone's; views those the caller may read,
        queries those it may touch (services.tables)."""
        caller = self._caller(context)
        mdr = self.placement.mdr
        node = request.node or None
        if request.what == "nodes":
            found = {"nodes": tables.nodes_table(mdr)}, []
        elif request.what == "views":
            found = {"views": tables.views_table(mdr, node, caller)}, []
        elif request.what == "motes":
            found = {"motes": tables.motes_table(mdr, node)}, []
        elif request.what == "status":
            found = tables.status_tables(mdr, caller=caller)
        else:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          f"no listing {request.what!r} (one of {', '.join(tables.LISTINGS)})")
        return hifi_pb2.ListingReply(tables=tables.encode(*found))

    def Results(self, request, context):  # noqa: N802
        self._own_query(request.query_id, context)
        caller = self._caller(context)
        if not self.streams.take(caller.principal, quota_of(caller).streams):
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, streams_refusal(caller))
        stop = threading.Event()
        context.add_callback(stop.set)
        try:
            for columns, row, emitted_ms in self.placement.results(request.query_id, stop):
                yield hifi_pb2.ResultRow(query_id=request.query_id, columns=columns,
                                         row=hifi_pb2.Row(values=[to_value(v) for v in row]), emitted_ms=emitted_ms)
        except KeyError as exc:
            context.abort(grpc.StatusCode.NOT_FOUND, str(exc.args[0]))
        except QueryFailed as exc:
            context.abort(grpc.StatusCode.ABORTED, str(exc))
        finally:
            self.streams.give_back(caller.principal)


@dataclass
class PlacementService:
    """A running placement service: its gRPC server, address (as others reach it) and metrics."""

    placement: QueryPlacer
    server: grpc.Server
    address: str
    metrics: ServiceMetrics
    stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        threading.Thread(target=self._housekeeping, daemon=True, name="placement-until").start()

    def _housekeeping(self) -> None:
        """End the queries whose --until passed and delete the topics cancels retired, each round."""
        while not self.stop.wait(ENDING_CHECK_S):
            try:
                self.placement.end_finished(now_ms())
            except Exception:  # noqa: BLE001 - the MDR or a node unreachable: next round
                log.exception("ending the queries whose --until passed failed")
            try:
                self.placement.delete_retired_topics(now_ms())
            except Exception as exc:  # noqa: BLE001 - the broker or the MDR unreachable: next round
                log.warning("retired topics stay for now: %s", exc)

    def close(self) -> None:
        self.stop.set()
        self.server.stop(grace=1).wait(5)
        self.metrics.close()


def start_placement_service(mdr: MDR, bootstrap: str, security: Security, listen: str = "127.0.0.1:0",
                            metrics_port: int = 0, advertise_host: str = "") -> PlacementService:
    """Serve placement on `listen` (TLS with `security`'s "placement" certificate) and /metrics on
    `metrics_port`, and record both in the MDR (as reached at `advertise_host` when given: the
    service listens on all interfaces). Its calls to the nodes carry a service token it makes
    for itself at start (the one it made before stops working)."""
    token = mint_token(mdr, PLACEMENT_PRINCIPAL, ("service",), replace=True)
    placement = QueryPlacer(mdr, bootstrap, security.with_token(token))
    metrics = ServiceMetrics("placement", mdr)
    server, address = start_server(
        lambda server: hifi_pb2_grpc.add_PlacementServicer_to_server(
            PlacementServicer(placement, Authenticator(mdr)), server),
        "Placement", listen, security, mdr, "placement", workers=32, interceptors=[metrics.interceptor()])
    host, _, port = address.rpartition(":")
    address = f"{advertise_host or host}:{port}"
    mdr.set_placement_address(address)
    mdr.put_endpoints("placement", {"grpc": address, "metrics": metrics.serve(host, metrics_port, advertise_host)})
    return PlacementService(placement, server, address, metrics)
