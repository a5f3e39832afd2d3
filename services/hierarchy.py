"""Bring up a whole topology: MDR contents, every node, the placement service, the receptor agents.

The embedded default hosts every node's DSP in one Spark application (jobs FIFO, see dsp.spark.session);
each node is still its own gRPC service with its own queries, checkpoints and topics. With
`processes`, each node is a `hifi node` process of its own (its own Spark) under a supervisor
(services.supervisor) that starts one that dies again, as compose does with containers.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

import grpc

from base.plan import RAW_STREAMS
from dsp.spark.session import spark_session
from edge.agent import ReceptorAgent, replay_receptor
from edge.intel_lab import load_intel_lab
from edge.scenario import Scenario
from glue.standing import standing_views
from glue.topology import ReceptorSpec, Topology
from mdr.repository import MDR, now_ms
from protos import hifi_pb2_grpc
from services import heap
from services.auth import Security, mint_token, open_channel
from services.certs import ensure_certificates
from services.dashboard import Dashboard
from services.deploy_names import node_service
from services.emulation import receptors_for, relation_rows, scenario_of
from services.node import HiFiNode
from services.placement import QueryPlacer
from services.placement_service import PlacementService, start_placement_service
from services.redis_acls import rules_by_user
from services.supervisor import Supervisor
from wire.codec import readable_batches
from wire.kafka import config, consumers
from wire.topics import view_topic

log = logging.getLogger("hifi.hierarchy")

ADMIN_PRINCIPAL = "admin"   # whom the token `hifi up` writes to its run file belongs to
ADMIN_TOKEN_S = 7 * 24 * 3600   # how long that token works: a run left going a week logs in anew
STREAM_HOME = "hierarchy.stream"   # the one Spark stream of the nodes run in this process (dsp.runtime.process_stream)


def hifi_home() -> str:
    return os.environ.get("HIFI_HOME", os.path.join(os.path.expanduser("~"), ".hifi"))


def run_file() -> str:
    return os.path.join(hifi_home(), "run.json")


def load_metadata(mdr: MDR, topology: Topology) -> None:
    """The mediated schema, receptors (the topology's and its scenario's) and static relations of
    a topology, into the MDR."""
    scenario = scenario_of(topology, 0)
    receptors = receptors_for(topology, scenario)
    if scenario.replay is not None:   # the replayed Intel Lab motes: their ids come from the data
        receptors += [ReceptorSpec(replay_receptor(m.mote_id), "mote", scenario.replay.node, scenario.replay.node, "",
                                   m.x, m.y, {}) for m in load_intel_lab(scenario.replay.data)]
    for name, raw in RAW_STREAMS.items():
        mdr.define_stream(name, raw.columns)
    mdr.put_parameters(topology.parameters)
    mdr.put_stream_readers(topology.stream_readers)
    mdr.put_receptors({r.id: {"kind": r.kind, "node": r.node, "location": r.location, "area": r.area}
                       for r in receptors})
    for relation in topology.relations:
        mdr.put_relation(relation.name, relation.columns, relation_rows(relation, receptors, scenario),
                         relation.replicas)


@dataclass
class Hierarchy:
    topology: Topology
    redis_url: str
    bootstrap: str
    state_dir: str = ""
    trigger_ms: int = 1000
    nodes: dict[str, HiFiNode] = field(default_factory=dict)
    agent: ReceptorAgent | None = None
    placement: QueryPlacer | None = None
    placement_address: str = ""
    dashboard: Dashboard | None = None
    processes: bool = False
    spare: bool = True   # with processes: a warm spare process beside the nodes (services.supervisor)
    only: frozenset[str] = frozenset()   # start these of the topology's nodes (empty: every one)
    supervisor: Supervisor | None = None
    # the deployment's certificates (services.certs): made under the state directory when not given
    tls_dir: str = ""
    # the admin token `start` makes (the CLI's and the tests' calls carry it)
    admin_token: str = ""
    _placement_service: PlacementService | None = None
    _channels: dict[str, grpc.Channel] = field(default_factory=dict)
    _mdr_urls: dict[str, str] = field(default_factory=dict)   # each service's Redis user's URL (mdr_url_for)

    def __post_init__(self) -> None:
        self.mdr = MDR.connect(self.redis_url)
        if not self.state_dir:
            # Checkpoints are rewritten every micro-batch; tmpfs keeps that off the disk.
            shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
            self.state_dir = tempfile.mkdtemp(prefix="hifi-state-", dir=shm)
        self.tls_dir = ensure_certificates(self.tls_dir or os.path.join(self.state_dir, "tls"))

    @property
    def security(self) -> Security:
        """TLS and the admin token: what a caller with every right presents."""
        return Security(self.tls_dir, self.admin_token)

    def placement_stub(self, token: str | None = None) -> hifi_pb2_grpc.PlacementStub:
        """A Placement client over TLS carrying `token` (default: the admin token; "" for none);
        one channel per token, closed when the hierarchy stops."""
        token = self.admin_token if token is None else token
        if token not in self._channels:
            self._channels[token] = open_channel(self.placement_address, self.security.with_token(token))
        return hifi_pb2_grpc.PlacementStub(self._channels[token])

    def start(self, progress: Callable[[str], None] = lambda _: None) -> None:
        self.mdr.clear()
        load_metadata(self.mdr, self.topology)
        # a run's admin token ends with the run, or after ADMIN_TOKEN_S of a run left going
        self.admin_token = mint_token(self.mdr, ADMIN_PRINCIPAL, ("admin",), now_ms() + ADMIN_TOKEN_S * 1000)
        if self.processes:
            self._start_processes(progress)
        else:
            progress("starting Spark")
            spark = spark_session()
            for spec in self.topology.bottom_up():
                if self.only and spec.id not in self.only:
                    continue
                progress(f"starting node {spec.id} ({spec.tier})")
                mdr = MDR.connect(self.mdr_url_for(node_service(spec.id)))
                node = HiFiNode(spec.id, self.topology, mdr, spark, self.bootstrap,
                                self.state_dir, self.trigger_ms, security=Security(self.tls_dir),
                                stream_home=os.path.join(self.state_dir, STREAM_HOME))
                node.start()
                self.nodes[spec.id] = node
        # its own MDR client: its MDR operations are its own metrics
        self._placement_service = start_placement_service(MDR.connect(self.mdr_url_for("placement")), self.bootstrap,
                                                          Security(self.tls_dir))
        self.placement = self._placement_service.placement
        self.placement_address = self._placement_service.address
        progress(f"placement service at {self.placement_address}")
        if self.nodes:   # nodes in this process: their long-lived objects out of the collector's walks
            heap.settle()

    def _start_processes(self, progress: Callable[[str], None], timeout_s: float = 900.0) -> None:
        """Every node as a process under the supervisor (each waits for its children's exports
        itself); returns once all are alive."""
        self.supervisor = Supervisor(self.topology.source, self.mdr_url_for, self.bootstrap, self.state_dir, progress,
                                     self.trigger_ms, spare=self.spare, tls_dir=self.tls_dir)
        progress(f"starting {len(self.topology.nodes)} node processes (their logs: {self.state_dir}/<node>.log)")
        for spec in self.topology.bottom_up():
            self.supervisor.start(spec.id)
        deadline = time.monotonic() + timeout_s
        while len([n for n in self.mdr.nodes() if n.alive]) < len(self.topology.nodes):
            if time.monotonic() > deadline:
                raise TimeoutError(f"the node processes did not all come up within {timeout_s:.0f} s "
                                   f"(logs in {self.state_dir})")
            time.sleep(0.5)

    def mdr_url_for(self, user: str) -> str:
        """The MDR's URL for the service whose Redis user is `user` (services.redis_acls: what it may
        write), the user made with a new password once per hierarchy (made again, it would lock out
        whoever holds the first: a second dashboard once did that to the first, whose next
        connections were refused); the deployment's own URL when the Redis given cannot keep users
        (its user may not make them, or it has no ACL file)."""
        if user in self._mdr_urls:
            return self._mdr_urls[user]
        password = secrets.token_urlsafe(24)
        if not self.mdr.set_user(user, password, rules_by_user(self.topology)[user]):
            log.warning("the MDR cannot keep a user per service (its user may not make users, or it has no ACL "
                        "file): %s writes with the deployment's own user", user)
            return self.redis_url
        url = urlsplit(self.redis_url)
        self._mdr_urls[user] = urlunsplit(url._replace(netloc=f"{user}:{password}@{url.hostname}:{url.port}"))
        return self._mdr_urls[user]

    def start_dashboard(self, listen: str = "127.0.0.1:0") -> str:
        """Serve the operations dashboard (services.dashboard); returns its URL."""
        self.dashboard = Dashboard(MDR.connect(self.mdr_url_for("dashboard")), self.bootstrap, Security(self.tls_dir),
                                   self.topology)
        return self.dashboard.serve(listen)

    def start_agents(self, out_dir: str | None = None,
                     scenario_at: Callable[[int], Scenario] | None = None) -> ReceptorAgent:
        """Start the topology's scenario (or `scenario_at(start_ms)`) now; its readings and ground
        truth go to `out_dir`."""
        start_ms = next_whole_second(int(time.time() * 1000))
        scenario = scenario_at(start_ms) if scenario_at is not None else scenario_of(self.topology, start_ms)
        self.agent = ReceptorAgent(scenario, self.bootstrap, out_dir or os.path.join(self.state_dir, "receptors"))
        self.agent.start()
        return self.agent

    @property
    def readings_path(self) -> str:
        """The agent's log of every reading it published (edge.agent)."""
        assert self.agent is not None, "the agents have not been started"
        return self.agent.readings_path

    def view_topics(self, name: str) -> list[str]:
        """The topics of the topology's materialized view `name`, at every node that exports it."""
        return [view_topic(node, v.name) for node in self.topology.nodes for v in self.topology.views_at(node)
                if v.name == name and v.materialize]

    def result_topics(self) -> list[str]:
        """The ends of the CSAVA chain: materialized views no other view reads (headquarters'
        analysis, the region's alerts), wherever they are exported."""
        read = {standing.reads for standing in standing_views(self.topology)}
        return [topic for v in self.topology.views if v.materialize and v.name not in read
                for topic in self.view_topics(v.name)]

    def stop(self) -> None:
        for channel in self._channels.values():
            channel.close()
        self._channels.clear()
        if self.agent is not None:
            self.agent.stop()
        if self.dashboard is not None:
            self.dashboard.close()
            self.dashboard = None
        if self._placement_service is not None:
            self._placement_service.close()
            self._placement_service = None
        if self.nodes:  # nodes stop side by side: each waits for its queries' batches to end
            with ThreadPoolExecutor(max_workers=len(self.nodes), thread_name_prefix="stop-node") as pool:
                list(pool.map(HiFiNode.stop, self.nodes.values()))
            heap.release()
        self.nodes.clear()
        if self.supervisor is not None:
            self.supervisor.stop()
            self.supervisor = None

    def write_run_file(self) -> None:
        os.makedirs(hifi_home(), exist_ok=True)
        # readable by its owner only: it holds the MDR's URL with its password and the admin token
        with open(os.open(run_file(), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as fh:
            os.fchmod(fh.fileno(), 0o600)   # a run file left by an older version may be wider
            json.dump({"redis_url": self.redis_url, "bootstrap": self.bootstrap, "pid": os.getpid(),
                       "topology": self.topology.source, "readings": self.readings_path,
                       "state_dir": self.state_dir, "placement": self.placement_address,
                       "tls_dir": self.tls_dir, "token": self.admin_token,
                       "dashboard": self.dashboard.url if self.dashboard else "",
                       # the broker's credentials of this process (the embedded one's admin), for the
                       # hifi commands that read topics (services.cli.common.broker_bootstrap)
                       "kafka": {name: os.environ[name] for name in config.CLIENT_VARIABLES if os.environ.get(name)}},
                      fh)


def next_whole_second(now_ms: int) -> int:
    """Where a scenario starts: on a whole second, so read cycles line up with windows."""
    return (now_ms // 1000 + 1) * 1000


def follow_results(bootstrap: str, topics: list[str], stop: threading.Event,
                   emit: Callable[[str, dict], None]) -> None:
    """Call `emit(topic, row)` for every row of the topics' RowBatch messages until stopped."""
    for record, batch in readable_batches(consumers.tail(bootstrap, topics, stop)):
        for values in batch.rows:
            row = dict(zip(batch.columns, values, strict=True))
            row["_emitted_ms"] = batch.emitted_ms
            emit(record.topic, row)


def format_result(topic: str, row: dict) -> str:
    """A row as `hifi up` prints it: an EMIT CHANGES view's start or end (with how long it held),
    a pattern's match at its time, a window's row with its window."""
    from services.listing import clock, fields_text, shown, span

    start, end = row.get("window_start"), row.get("window_end")
    rest = fields_text(row)
    if row.get("change") == "start":
        return f"{time.strftime('%H:%M:%S')}  {topic}  STARTED  at {clock(start)}  {rest}"
    if row.get("change") == "end":
        return (f"{time.strftime('%H:%M:%S')}  {topic}  ended    at {clock(start)}  after "
                f"{shown(row.get('held_seconds'))} s  {rest}")
    if start and end:
        return f"{time.strftime('%H:%M:%S')}  {topic}  window {span(start, end)}  {rest}"
    at = row.get("__ts") or row.get("ts")
    return f"{time.strftime('%H:%M:%S')}  {topic}  at {shown(at) if at else '-'}  {rest}"
