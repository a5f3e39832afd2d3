"""A HiFi node: gRPC Node service + control manager + local view manager around a DSP.

Every tier runs this same class; the topology says what it does. On start it registers in the
MDR, heartbeats (liveness with a TTL), starts its data listener on its raw topic (edge nodes),
deploys and exports its views, and serves the Node API. Statistics reach the MDR from each
micro-batch (counted once per batch id) and from a periodic gauge update.

What should run on it is desired state in the MDR (`desired:<node>`, written by the placement
service): on start, and every RECONCILE_INTERVAL_S after, the node deploys every desired part it
does not run, so a node restarted on its state directory takes back the query parts it hosted
(each resumes from its saved state and its readers' checkpoints). A heartbeat that finds the
node's registration gone (a Redis that lost its data) registers it and its exports again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace

import grpc
from pyspark.sql import SparkSession

from base.part_spec import PartError, PartSpec
from base.plan_json import to_json
from base.plan_schema import output_columns, window_of
from dsp.runtime.archive import DEFAULT_RETENTION_MS
from dsp.runtime.bounds import OutputBounds
from dsp.runtime.shared import SharedRuntime
from dsp.spark.compiler import Ingest
from dsp.spark.manager import QueryExists
from dsp.triage import read_budget_ms
from glue.limits import check_name
from glue.operators import operator_parts
from glue.proxy import sample_predicates
from glue.standing import standing_parts, standing_views
from glue.topology import Topology, TopologyError
from mdr.repository import MDR, ViewRecord, now_ms
from protos import hifi_pb2, hifi_pb2_grpc
from services.adoption import Adoptions
from services.auth import Security
from services.grpc_server import start_server
from services.metrics import NodeMetrics
from services.node_gauges import NodeGauges
from services.part_signing import PartVerifier, Refusals, UnsignedPart, signed_parts
from services.sensor_proxy import SensorProxy
from wire.errors import HiFiError
from wire.intake import DEFAULT_MAX_AHEAD_MS, DEFAULT_MAX_BEHIND_MS, IntakeRules
from wire.kafka import admin
from wire.topics import control_topic, dead_topic, part_id_problem, raw_topic, topic_problem
from wire.windows import duration_ms

log = logging.getLogger("hifi.node")


def archive_retention_ms(parameters: dict) -> int:
    """How long a node's archive keeps what it took in: the topology's `archive_retention` (a
    duration, or off: 0), by default DEFAULT_RETENTION_MS. YAML reads `off` as false.

    >>> archive_retention_ms({"archive_retention": "2 h"}), archive_retention_ms({"archive_retention": False})
    (7200000, 0)
    """
    retention = parameters.get("archive_retention")
    if retention is None or retention == "":
        return DEFAULT_RETENTION_MS
    if retention is False or str(retention).lower() in ("off", "none"):
        return 0
    return duration_ms(str(retention))

HEARTBEAT_INTERVAL_S = 1.0
HEARTBEAT_TTL_MS = 5_000
RECONCILE_INTERVAL_S = 2.0   # one HGETALL per node: what a lost part waits at most to be deployed again


class NodeServicer(hifi_pb2_grpc.NodeServicer):
    def __init__(self, node: HiFiNode) -> None:
        self.node = node

    def _guard(self, context: grpc.ServicerContext, action, *args):
        try:
            return action(*args)
        except KeyError as exc:
            context.abort(grpc.StatusCode.NOT_FOUND, str(exc.args[0]))
        except QueryExists as exc:
            context.abort(grpc.StatusCode.ALREADY_EXISTS, str(exc))
        except UnsignedPart as exc:
            context.abort(grpc.StatusCode.PERMISSION_DENIED, str(exc))
        except HiFiError as exc:   # what it was told is not a part it can run; anything else is a bug
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))

    @staticmethod
    def _part(context: grpc.ServicerContext, query_id: str) -> str:
        """The part's id, refused unless it can name a checkpoint directory and topics (`..` would
        reach outside the node's state)."""
        problem = part_id_problem(query_id)
        if problem:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
        return query_id

    def Deploy(self, request, context):  # noqa: N802 - gRPC method names
        self._part(context, request.query_id)
        part = self._guard(context, PartSpec.from_proto, request, self.node.id)
        self._guard(context, self.node.verifier.check, part, request.signature)   # whoever calls
        if request.prepare:
            self._guard(context, self.node.prepare, part)
            return hifi_pb2.DeployReply(query_id=part.query_id)
        topic = self._guard(context, self.node.deploy, part)
        return hifi_pb2.DeployReply(query_id=part.query_id, output_topic=topic)

    def Cancel(self, request, context):  # noqa: N802
        query_id = self._part(context, request.query_id)
        self._guard(context, self.node.verifier.check_cancel, self.node.id, query_id, request.issued_ms,
                    request.signature, now_ms())   # whoever calls
        self._guard(context, self.node.cancel, query_id)
        return hifi_pb2.Ack(ok=True)

    def Suspend(self, request, context):  # noqa: N802
        self._guard(context, self.node.dsp.suspend, self._part(context, request.query_id))
        return hifi_pb2.Ack(ok=True)

    def Resume(self, request, context):  # noqa: N802
        self._guard(context, self.node.dsp.resume, self._part(context, request.query_id))
        return hifi_pb2.Ack(ok=True)

    def ListViews(self, request, context):  # noqa: N802
        return hifi_pb2.ViewList(views=[
            hifi_pb2.ViewInfo(name=v.name, node=v.node, topic=v.topic, window=v.window, definition=v.definition,
                              readers=list(v.readers)) for v in self.node.mdr.views(self.node.id)])

    def ListQueries(self, request, context):  # noqa: N802
        return hifi_pb2.QueryList(queries=[
            hifi_pb2.QueryInfo(query_id=q.query_id, status=q.status, output_topic=q.output_topic,
                               plan=q.plan_json(), error=q.error) for q in self.node.dsp.queries()])

    def Status(self, request, context):  # noqa: N802
        stats = self.node.mdr.stats(self.node.id)
        spec = self.node.topology.nodes[self.node.id]
        return hifi_pb2.NodeStatus(
            node=self.node.id, tier=spec.tier, parent=spec.parent, rows_in=int(stats.get("rows_in", 0)),
            input_rate=stats.get("input_rate", 0.0), lag_ms=int(stats.get("lag_ms", 0)),
            dead_lettered=int(stats.get("dead", 0)), running_queries=len(self.node.dsp.queries()),
            uptime_s=int(time.time() - self.node.started_s))


class HiFiNode:
    def __init__(self, node_id: str, topology: Topology, mdr: MDR, spark: SparkSession, bootstrap: str,
                 state_dir: str, trigger_ms: int = 1000, listen: str = "", advertise_host: str = "",
                 metrics_port: int | None = None, security: Security | None = None, stream_home: str = "") -> None:
        """`listen`, `metrics_port`: override the topology's; `advertise_host`: the host other
        services reach this node at, when it listens on all interfaces (a container's name);
        `stream_home`: the Spark stream it shares with the other nodes of its process (dsp.runtime.shared);
        `security`: its TLS material (default: HIFI_TLS_DIR's; its certificate is the node id's)."""
        if node_id not in topology.nodes:
            raise TopologyError(f"node {node_id!r} is not in topology {topology.name!r}")
        self.id = node_id
        self.topology = topology
        self.security = security or Security.from_env()
        self.verifier = PartVerifier(self.security.tls_dir)   # what it runs, the placement service signed
        self.refusals = Refusals(self.id)   # desired parts refused (logged once each)
        self.standing = standing_views(topology)   # the topology's SQL views, planned as queries are
        self.mdr = mdr
        self.bootstrap = bootstrap
        tier = topology.nodes[node_id].tier
        ingest = (Ingest(node_id, raw_topic(node_id), mdr.url, float(topology.parameters.get("strength_T", 0.0)),
                         read_budget_ms(topology.nodes[node_id].latency_target_ms)) if tier == "edge" else None)
        self.dsp = SharedRuntime(spark, node_id, bootstrap, state_dir, lambda: mdr.relations_at(node_id), trigger_ms,
                                 ingest, self.intake_rules, mdr.url, archive_retention_ms(topology.parameters),
                                 topology.nodes[node_id].uplink_bytes_per_s, stream_home,
                                 lane_order=len(topology.ancestors(node_id)))   # parents' lanes first
        self.server: grpc.Server | None = None
        self.address = ""
        self._listen, self._advertise_host, self._metrics_port = listen, advertise_host, metrics_port
        self.metrics = NodeMetrics(node_id, mdr)
        self.gauges = NodeGauges(node_id, tier == "edge", mdr, self.dsp, self.metrics)
        self.started_s = time.time()
        self._stop = threading.Event()
        self._heartbeat: threading.Thread | None = None
        self._gauges: threading.Thread | None = None
        self._reconciler: threading.Thread | None = None
        self._exports: dict[str, ViewRecord] = {}   # what it exports, put again if the MDR lost it
        self._endpoints: dict[str, str] = {}
        self.adoptions = Adoptions(self)   # re-parenting: a dead parent's parts, and its own taken back
        self.proxy = SensorProxy(node_id, bootstrap, mdr) if tier == "edge" else None
        self._telling = False   # the motes are told once every standing part is deployed (start)

    def intake_rules(self) -> IntakeRules:
        """What this node's readers check every record against (wire.intake): its receptors from
        the MDR's registry, the clock bounds from the topology's parameters."""
        registry = self.mdr.receptors()
        if not registry and self.topology.nodes[self.id].tier == "edge":
            log.warning("node %s: the MDR registers no receptors; readings are not checked against a registry",
                        self.id)
        params = self.topology.parameters
        return IntakeRules(self.id, {rid: info["node"] for rid, info in registry.items()} if registry else None,
                           duration_ms(params.get("max_ahead", f"{DEFAULT_MAX_AHEAD_MS} ms")),
                           duration_ms(params.get("max_behind", f"{DEFAULT_MAX_BEHIND_MS} ms")))

    # ------------------------------------------------------------ lifecycle

    def start(self) -> None:
        spec = self.topology.nodes[self.id]
        self._serve(self._listen or spec.listen or "127.0.0.1:0")
        host = self.address.rsplit(":", 1)[0]
        metrics_url = self.metrics.serve(host, spec.metrics_port if self._metrics_port is None else self._metrics_port,
                                         self._advertise_host)
        if self._advertise_host:
            self.address = f"{self._advertise_host}:{self.address.rsplit(':', 1)[1]}"
        self._endpoints = {"grpc": self.address, "metrics": metrics_url}
        self._register()
        self.mdr.heartbeat(self.id, HEARTBEAT_TTL_MS)
        self._heartbeat = self._every(HEARTBEAT_INTERVAL_S, self._beat, "heartbeat", f"hb-{self.id}")
        self._gauges = self._every(HEARTBEAT_INTERVAL_S, self.gauges.put, "gauges", f"gauges-{self.id}")
        admin.ensure_topics(self.bootstrap, [dead_topic(self.id)])
        if spec.tier == "edge":
            admin.ensure_topics(self.bootstrap, [raw_topic(self.id), control_topic(self.id)])
        self.adoptions.returning()   # before any part: a node whose parts another ran takes them back bounded
        for part in [*standing_parts(self.standing, self.id), *operator_parts(self.topology, self.id)]:
            self.deploy(part)
        for standing in self.standing:
            if not standing.tasks and standing.node == self.id:   # exported as a definition only
                export = standing.export
                self._export(export.name, None, "", export.readers, export.definition, export.columns)
        self.dsp.ensure_ingest()
        self.reconcile()
        self._telling = True
        self.tell_motes()
        self._reconciler = self._every(RECONCILE_INTERVAL_S, self._reconcile_round,
                                       "reconciling with the desired state", f"reconcile-{self.id}")

    def _register(self) -> None:
        spec = self.topology.nodes[self.id]
        self.mdr.register_node(self.id, spec.tier, spec.parent, spec.alternates, self.address,
                               {"views": [v.name for v in self.topology.views_at(self.id)]},
                               int(self.started_s * 1000))
        self.mdr.put_endpoints(f"node:{self.id}", self._endpoints)

    def reconcile(self) -> list[str]:
        """Deploy every part the MDR says should run here and does not; the query ids deployed.
        A part that cannot be deployed is logged and tried again on the next round."""
        running = {q.query_id for q in self.dsp.queries()}
        deployed = []
        parts, refused = signed_parts({query_id: text for query_id, text in self.mdr.desired(self.id).items()
                                       if query_id not in running}, self.id, self.verifier)
        self.refusals.report(self.id, refused)
        for part in parts:
            query_id = part.query_id
            try:
                self.deploy(replace(part, history_from_ms=None))   # no history: it takes its saved state back
                deployed.append(query_id)
            except QueryExists:
                pass   # deployed over gRPC meanwhile
            except Exception:  # noqa: BLE001 - one part that cannot run must not stop the others
                log.exception("node %s: cannot deploy desired part %s", self.id, query_id)
        if deployed:
            log.info("node %s: deployed desired parts %s", self.id, ", ".join(deployed))
        return deployed

    def wait_for_children(self, timeout_s: float, progress: Callable[[str], None] = lambda _: None) -> None:
        """Wait until every child exports the materialized views this node's views read (a node
        started on its own, e.g. in its own container, may come up before its children)."""
        deadline = time.monotonic() + timeout_s
        announced = ""
        children = set(self.topology.children(self.id))
        # what this node's parts read from its children: the views and partial streams they export
        needed = {(task.node, task.export_as) for standing in self.standing for task in standing.tasks
                  if task.node in children and task.export_as}
        while True:
            exported = {(v.node, v.name) for v in self.mdr.views() if v.topic}
            missing = sorted(f"{node}.{name}" for node, name in needed - exported)
            if not missing:
                return
            if time.monotonic() > deadline:
                raise TopologyError(f"node {self.id}: after {timeout_s:.0f} s its children still do not export "
                                    f"{', '.join(missing)}")
            if announced != missing[0]:
                announced = missing[0]
                progress(f"node {self.id}: waiting for {', '.join(missing)}")
            time.sleep(1.0)

    def stop(self) -> None:
        self._stop.set()
        for thread in (self._heartbeat, self._gauges, self._reconciler):
            if thread is not None:
                thread.join(timeout=5)
        self.dsp.stop_all()
        if self.server is not None:
            self.server.stop(grace=1).wait(5)
        self.metrics.close()
        self.mdr.mark_down(self.id)

    def crash(self) -> None:
        """Stop heartbeating and reporting, as a node that died looks to the rest of the hierarchy
        (its queries keep running in this process): for tests and drills of failure detection."""
        self._stop.set()

    def _serve(self, listen: str) -> None:
        self.server, self.address = start_server(
            lambda server: hifi_pb2_grpc.add_NodeServicer_to_server(NodeServicer(self), server), "Node", listen,
            self.security, self.mdr, self.id, interceptors=[self.metrics.interceptor()])

    def _every(self, interval_s: float, work: Callable[[], None], what: str, name: str) -> threading.Thread:
        """A thread running `work` every `interval_s` until the node stops; a failure is logged and
        the next round runs (statistics, heartbeats and reconciling must not kill the node)."""
        def rounds() -> None:
            while not self._stop.wait(interval_s):
                try:
                    work()
                except Exception:  # noqa: BLE001 - see the docstring
                    log.exception("node %s: %s failed", self.id, what)
        thread = threading.Thread(target=rounds, name=name, daemon=True)
        thread.start()
        return thread

    def _beat(self) -> None:
        """Liveness only: nothing here may wait on the DSP (a query stop can take seconds)."""
        if not self.mdr.heartbeat(self.id, HEARTBEAT_TTL_MS):
            log.warning("node %s: the MDR lost its registration; registering again", self.id)
            self._register()
            for view in list(self._exports.values()):
                self.mdr.export_view(view)

    def _reconcile_round(self) -> None:
        self.reconcile()
        self.adoptions.round()
        self.tell_motes()   # parts cancelled or moved by any path since the last round

    # ------------------------------------------------------------ views and queries

    def tell_motes(self) -> None:
        """The sensor proxy: the motes send only what the running parts can use. Not while the node
        starts (its first parts alone would silence motes its later ones read); a failure is logged
        and the next reconcile round tells them again."""
        if self.proxy is None or not self._telling:
            return
        try:
            self.proxy.update(self.dsp.plans())
        except Exception:  # noqa: BLE001 - a part deployed or cancelled stays so; the motes are told later
            log.exception("node %s: telling its motes their settings failed", self.id)

    def prepare(self, part: PartSpec) -> None:
        """Before a part reading this edge's samples starts (the placement's prepare step): the
        motes are told what it will read, and this returns once they obey (services.sensor_proxy)."""
        if self.proxy is None or not self._telling or not sample_predicates(part.plan):
            return
        self.proxy.expect(part.query_id, part.plan)
        started = time.monotonic()
        settings = self.proxy.update(self.dsp.plans())
        if settings is not None and self.proxy.wait_obeyed(settings.version):
            log.info("node %s: its motes obey what %s will read (%.1f s)", self.id, part.query_id,
                     time.monotonic() - started)

    def cancel(self, query_id: str) -> None:
        """Stop part `query_id` (KeyError if none runs); a view's part takes its export with it."""
        self.dsp.cancel(query_id)
        self.metrics.forget(query_id)
        self.mdr.forget_part(self.id, query_id)
        if query_id.startswith("view."):
            view = query_id.removeprefix("view.")
            self._exports.pop(view, None)
            self.mdr.revoke_view(self.id, view)
        if self.proxy is not None:
            self.proxy.forget(query_id)
        self.tell_motes()

    def deploy(self, part: PartSpec, bounds: OutputBounds | None = None) -> str:
        """Start `part`; with `export_as`, its output becomes an exported view. A part adopted
        from a dead node (`owner`, services.adoption) writes that node's topic within `bounds`.
        PartError when it would write a topic that is not its own."""
        if not part.owner and bounds is None:
            bounds = self.adoptions.bounds([name for name, _ in output_columns(part.plan)])
        if part.export_as:
            check_name(part.export_as, "view")
        if not part.owner and (problem := topic_problem(self.id, part.query_id, part.export_as, part.topic)):
            raise PartError(problem)
        admin.ensure_topics(self.bootstrap, [part.topic])
        self.dsp.deploy(part, self.gauges.counting(part.query_id), bounds)
        if self.proxy is not None:
            self.proxy.forget(part.query_id)   # expected no more: it runs
        self.tell_motes()
        if part.export_as:
            self._export(part.export_as, part.plan, part.topic, part.readers, part.definition)
        return part.topic

    def _export(self, name: str, plan, topic: str, readers: tuple[str, ...], definition: str,
                columns: tuple[tuple[str, str], ...] | None = None) -> None:
        """Record an exported view in the MDR; with no plan (a definition only), its `columns`."""
        window = window_of(plan) if plan is not None else None
        view = ViewRecord(
            name=name, node=self.id, topic=topic, window=window.describe() if window else "",
            definition=definition, plan=to_json(plan) if plan is not None else "",
            columns=output_columns(plan) if plan is not None else columns, readers=readers, exported_ms=now_ms())
        self._exports[name] = view
        self.mdr.export_view(view)

