"""The placement service's work (QueryPlacer; services.placement_service serves it over gRPC):
submit a HiFi SQL query -> place it, rewrite it into one plan per node, deploy those plans on
the nodes over their gRPC Node API, stream the results; cancel; list.

It is the query listener + logical planner + physical planner + dispatcher of DESIGN §4, for
every query posed to the hierarchy. It keeps no state of its own: the catalog it plans against
and the queries it runs are in the MDR, so a restarted service picks up where it was.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import grpc

from base.part_spec import PartSpec
from base.plan import PlanError
from base.plan_json import from_json
from base.plan_schema import window_of
from glue.analyzer import analyze_statement, refuse_taken_view_name
from glue.catalog import Catalog, ExportedView, NodeInfo, ReceptorInfo, Relation
from glue.limits import Limits
from glue.logical_query import LogicalQuery
from glue.planner import plan_query, start_from
from glue.proxy import sample_predicates
from glue.rewrite.distribute import DistributedPlan
from glue.sql.lexer import SqlError
from glue.sql.parser import parse
from mdr.repository import MDR, QueryRecord, now_ms
from protos import hifi_pb2, hifi_pb2_grpc
from services.auth import Security, open_channel
from services.health import query_health
from services.part_signing import PartSigner
from wire.codec import readable_batches
from wire.errors import HiFiError
from wire.identity import INTERNAL_READERS, SYSTEM, Identity
from wire.kafka import clients, consumers, offsets

# A part over the past is fed the batches its node took in from this long before the query's
# `since`: a row of an event time from `since` on may have been taken in a little before it (a
# receptor's clock ahead of the node's, within what intake accepts)
HISTORY_MARGIN_MS = 60_000
# ... and a query answering from its submission, from this long before it (a record stamped from
# then on arrives at most intake's max_ahead, 500 ms, earlier)
LIVE_HISTORY_MARGIN_MS = 2_000

log = logging.getLogger("hifi.placement")


class PlacementError(HiFiError):
    """A submitted query that was planned but could not be deployed; names the node and why."""


def load_catalog(mdr: MDR) -> Catalog:
    """The MDR's catalog as plain data for the planner."""
    views = []
    for v in mdr.views():
        plan = None
        if v.plan:
            try:
                plan = from_json(v.plan)
            except PlanError:
                plan = None
        views.append(ExportedView(v.name, v.node, v.topic, v.columns, window_of(plan) if plan else None, v.definition,
                                  v.readers, plan))
    relations = {}
    for name in mdr.relation_names():
        found = mdr.relation(name)
        if found:
            relations[name] = Relation(name, tuple(found[0]), tuple(found[1]), tuple(found[2]))
    nodes = {n.id: NodeInfo(n.id, n.tier, n.parent, n.alive, n.address) for n in mdr.nodes()}
    receptors = [ReceptorInfo(rid, info["node"], info.get("location", ""), info.get("area", ""),
                              info.get("kind", "rfid")) for rid, info in sorted(mdr.receptors().items())]
    return Catalog({name: tuple(cols) for name, cols in mdr.streams().items()}, views, relations, nodes, receptors,
                   mdr.parameters(), mdr.stream_readers(), mdr.histograms(), mdr.input_rates(sorted(nodes)))


# A results stream ends with an error once a part of its query has died this many times in a row
# (before that a restart, which comes after 2, 10, 30 s, may still recover it).
FAILURES_ENDING_RESULTS = 3
FAILURE_CHECK_S = 2.0
# A query `--until` T is cancelled this long after T (its windows before T have gone out by then),
# looked for every services.placement_service.ENDING_CHECK_S.
UNTIL_GRACE_MS = 60_000
# A cancelled query's topics (its parts' and its results') may be deleted this long after the
# cancel (delete_retired_topics): a node's one streaming query reads the topics its lanes list at
# its next poll (within a second of the cancel), and a topic deleted while a poll still lists it
# failed that query, every part of the node with it (seen in the suite).
TOPIC_GRACE_MS = 60_000


class QueryPlacer:
    """Plans, places and deploys queries on the nodes (over gRPC) and cancels them: the placement
    service's work, behind its gRPC servicer."""

    def __init__(self, mdr: MDR, bootstrap: str, security: Security) -> None:
        """`security`: the TLS material and the service token its calls to the nodes carry."""
        self.mdr = mdr
        self.bootstrap = bootstrap
        self.security = security
        self.signer = PartSigner(security.tls_dir)   # a node runs only the parts it signed
        self._lock = threading.Lock()
        self._channels: dict[str, grpc.Channel] = {}  # one per node address, reused across calls

    def plan(self, sql: str, principal: str | Identity = SYSTEM, naive: bool = False, since_ms: int | None = None,
             until_ms: int | None = None) -> DistributedPlan:
        """`principal`: who reads (its API callers' identity; in-process callers, the benchmarks and
        the tests, are the deployment itself and read everything). With `since_ms`: a query over
        the past (windows in [since, until)), and which nodes' archives begin after it."""
        return self._planned(self._bound(sql, principal), f"q{uuid.uuid4().hex[:8]}", naive, since_ms, until_ms)

    def _bound(self, sql: str, principal: str | Identity) -> tuple[LogicalQuery, Catalog]:
        """The statement parsed once and bound to the catalog as `principal` reads. Syntax and
        admission limits first: a bad or oversized query is refused before the catalog (every view,
        relation and receptor) is read."""
        statement = parse(sql, Limits.from_parameters(self.mdr.parameters()))
        catalog = load_catalog(self.mdr)
        reader = principal if isinstance(principal, Identity) else Identity(principal or "*", frozenset())
        refuse_taken_view_name(statement, catalog, reader)
        catalog = catalog.as_read_by(reader)
        return analyze_statement(statement, catalog, reader, sql), catalog

    def _planned(self, bound: tuple[LogicalQuery, Catalog], query_id: str, naive: bool = False,
                 since_ms: int | None = None, until_ms: int | None = None) -> DistributedPlan:
        """The planner's plan (glue.planner): over the past from `since_ms` until `until_ms` (with
        the nodes whose archives begin after it, and those that could not archive some of it), or
        live, with no start yet."""
        query, catalog = bound
        if since_ms is None:   # live: its start applied once its inputs' ends are read (start_from)
            return plan_query(query, catalog, query_id, naive=naive)
        plan = plan_query(query, catalog, query_id, naive=naive, start_ms=since_ms, until_ms=until_ms, now_ms=now_ms())
        return replace(plan, archive_begins=self._archives_after(plan, since_ms),
                       archive_gaps=self._archive_gaps(plan, since_ms, until_ms))

    def submit(self, sql: str, principal: str | Identity = SYSTEM, naive: bool = False,
               replay: bool = False, readers: tuple[str, ...] = (), since_ms: int | None = None,
               until_ms: int | None = None, priority: int = 0) -> DistributedPlan:
        """Plan and deploy; raises SqlError (the query) or PlacementError (a node refused).

        A query answers what its sources receive from its submission on: every source is read
        from the end it had then, and the root drops windows that started earlier (they would
        be partial). `replay` reads the sources from their beginning instead (a long-running
        hierarchy then catches up first): a part joining a reader its node runs already is fed
        the node's whole archive first. `since_ms`: it answers from then on, each part first
        fed what its node archived since (dsp.runtime.archive), then the live stream; `until_ms`: only
        windows (rows) starting before then. `priority`: its parts' lane on constrained uplinks
        (dsp.runtime.uplink). `naive` deploys the lag benchmark's baseline plan.
        A view it creates is readable by its principal, by operators and by `readers` (docs/security.md,
        "Users, tokens and roles"); by everyone when the principal is the anonymous "*"."""
        name = principal.principal if isinstance(principal, Identity) else principal
        view_readers = ("*",) if name in ("", "*") else tuple(dict.fromkeys((name, "role:operator", *readers)))
        with self._lock:  # plans see the views that earlier submissions created
            bound = self._bound(sql, principal)
            plan = self._planned(bound, f"q{uuid.uuid4().hex[:8]}", naive, since_ms, until_ms)
            if readers and plan.query.view_name is None:
                raise SqlError("readers are given to a view: CREATE VIEW only")
            if since_ms is not None and replay:
                raise SqlError("a query over the past (since) reads the archives: not with replay")
            if since_ms is not None and plan.query.stream_join is not None:
                raise SqlError("a query over the past (since) does not join streams yet: join them live")
            start_offsets = None
            # where its parts joining a reader their node runs already start in the node's archive:
            # a minute before `since`; all of it for a replay (1: the proto's 0 is "none"); else a
            # moment before its start, so what came between its submission and its deployment counts
            history_from_ms = since_ms - HISTORY_MARGIN_MS if since_ms is not None else 1 if replay else 0
            if since_ms is not None:   # its inputs no reader of its node reads yet: from the topic's beginning
                self._prepare_motes(plan)   # it goes on live
            elif not replay:
                self._prepare_motes(plan)
                start_offsets = offsets.current_ends(self.bootstrap, plan.topics_read())
                # its start, taken only now that the ends are read (the plan names the topics whose
                # ends these are): anything stamped from here on is after them
                plan = start_from(plan, bound[1], now_ms(), until_ms)
                history_from_ms = (plan.start_ms or 0) - LIVE_HISTORY_MARGIN_MS
            deployed: list[tuple[str, str]] = []
            desired: dict[str, dict[str, str]] = {}
            try:
                for task in plan.tasks:
                    if task.reused:
                        continue
                    exports_view = task.role == "final" and bool(task.export_as)
                    # a CREATE VIEW's text defines the view it exports; shared partials have none
                    part = replace(task, definition=sql if exports_view else "", start_offsets=start_offsets or {},
                                   history_from_ms=history_from_ms or None, priority=priority,
                                   readers=view_readers if exports_view else INTERNAL_READERS)
                    signature = self.signer.sign(part)
                    if self._deploy(part, signature):
                        deployed.append((task.node, task.query_id))
                        desired.setdefault(task.node, {})[task.query_id] = part.to_json(signature)
            except PlacementError:
                for node, query_id in reversed(deployed):
                    self._cancel_on(node, query_id)
                raise
            # what a node runs again after a restart (services.node reconciles with it)
            self.mdr.put_desired(desired)
            remote: dict[str, list[str]] = {}
            for node, query_id in plan.uses:   # views another query made, which this one reads: kept while it runs
                remote.setdefault(node, []).append(query_id)
            for task in plan.tasks:
                remote.setdefault(task.node, []).append(task.query_id)
            tasks = tuple({"node": t.node, "role": t.role, "query_id": t.query_id, "export_as": t.export_as,
                           "reused": t.reused} for t in plan.tasks)
            self.mdr.put_query(QueryRecord(plan.query_id, sql, plan.placement.root, remote, "running", now_ms(),
                                           plan.result_topic, plan.explain(), tuple(plan.columns), tasks, name,
                                           until_ms or 0))
            return plan

    def _stub(self, node: str) -> hifi_pb2_grpc.NodeStub:
        record = self.mdr.node(node)
        if record is None or not record.alive:
            raise PlacementError(f"node {node} is not alive")
        if record.address not in self._channels:
            self._channels[record.address] = open_channel(record.address, self.security)
        return hifi_pb2_grpc.NodeStub(self._channels[record.address])

    def _archives_after(self, plan: DistributedPlan, since_ms: int) -> dict[str, int]:
        """The nodes that run parts of `plan` whose archives begin after `since_ms` (they began
        later, or their retention passed it), and when they begin."""
        found = {}
        for node in {t.node for t in plan.tasks if not t.reused}:
            oldest = int(self.mdr.stats(node).get("archive_oldest_ms", 0))
            if oldest == 0 or oldest > since_ms:
                found[node] = oldest or now_ms()
        return found

    def _archive_gaps(self, plan: DistributedPlan, since_ms: int, until_ms: int | None) -> dict[str, tuple[int, int]]:
        """The nodes that run parts of `plan` and could not archive batches of events within
        [since, until): the first and last of those events' times (dsp.runtime.archive.ArchiveUsage.failed)."""
        found = {}
        for node in {t.node for t in plan.tasks if not t.reused}:
            stats = self.mdr.stats(node)
            first, last = int(stats.get("archive_failed_from_ms", 0)), int(stats.get("archive_failed_to_ms", 0))
            if first and last >= since_ms and (until_ms is None or first < until_ms):
                found[node] = (first, last)
        return found

    def _prepare_motes(self, plan: DistributedPlan) -> None:
        """Each edge part reading samples first has its node's sensor proxy tell the motes what it
        will read, and waits until they obey: the query answers from after that, so no window of
        it lacks a sample the motes would have held back under the older settings. A node that
        cannot is logged and passed: its part may then miss samples in its first second or two."""
        for task in plan.tasks:
            if task.reused or not sample_predicates(task.plan):
                continue
            try:
                self._stub(task.node).Deploy(task.to_proto(prepare=True, signature=self.signer.sign(task)),
                                             timeout=30)
            except (grpc.RpcError, PlacementError) as exc:
                log.warning("preparing the motes of %s for %s: %s", task.node, task.query_id, exc)

    def _deploy(self, part: PartSpec, signature: bytes) -> bool:
        """Deploy `part` on its node; False when the node already runs it (a view another query created)."""
        try:
            self._stub(part.node).Deploy(part.to_proto(signature=signature), timeout=60)
            return True
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.ALREADY_EXISTS:
                return False
            raise PlacementError(f"node {part.node} refused {part.query_id}: {exc.details()}") from None

    def _cancel_on(self, node: str, query_id: str) -> None:
        issued = now_ms()
        try:
            self._stub(node).Cancel(hifi_pb2.CancelRequest(
                query_id=query_id, issued_ms=issued, signature=self.signer.sign_cancel(node, query_id, issued)),
                timeout=30)
        except (grpc.RpcError, PlacementError) as exc:
            log.warning("cancel %s on %s: %s", query_id, node, exc)

    def cancel(self, query_id: str, keep_results: bool = False) -> QueryRecord:
        """Tear down the query's remote queries, keeping those another running query uses and
        those no query deployed (a standing view's parts, which a query may reuse), and retire the
        topics of what it tore down, its results' among them when it tore down its final part (kept
        with `keep_results`: a query its `--until` ended may still be read), for
        delete_retired_topics."""
        with self._lock:
            queries = {q.id: q for q in self.mdr.queries()}
            record = queries.get(query_id)
            if record is None:
                raise KeyError(f"no query {query_id!r}")
            in_use = {(node, task) for q in queries.values() if q.id != query_id for node, tasks in q.remote.items()
                      for task in tasks}
            ending: dict[str, list[str]] = {}
            topics: list[str] = []   # its results' among them when its final part ends (not a view's it reused)
            for node, tasks in record.remote.items():
                # only what a query deployed (the node's desired state): a standing view's part
                # that a query reused runs on after it
                made = self.mdr.desired(node)
                ending[node] = [task for task in reversed(tasks) if (node, task) not in in_use and task in made]
                topics += [PartSpec.from_json(task, made[task], node).topic for task in ending[node]]
                self.mdr.drop_desired(node, ending[node])   # first: the node must not deploy them again
            # the nodes at once: each cancel waits for its node's batch in flight (~1 s on a busy node)
            with ThreadPoolExecutor(max_workers=max(1, len(ending)), thread_name_prefix="cancel") as pool:
                list(pool.map(lambda node: [self._cancel_on(node, task) for task in ending[node]], ending))
            self.mdr.drop_query(query_id)
            kept = {record.result_topic} if keep_results else set()
            self.mdr.retire_topics([t for t in topics if t and t not in kept], now_ms())
            return record

    def delete_retired_topics(self, now: int) -> list[str]:
        """Delete the topics cancels retired TOPIC_GRACE_MS or more before `now`, but an exported
        view's, a running query's results' and any a running part writes again (a view dropped and
        made anew, a shared partial deployed again); the topics deleted."""
        with self._lock:   # no submission in between: a topic it starts writing is in use
            due = self.mdr.retired_topics(now - TOPIC_GRACE_MS)
            if not due:
                return []
            # a query answered by a standing view's part has that view's topic for its results
            in_use = {q.result_topic for q in self.mdr.queries()} | {view.topic for view in self.mdr.views()}
            in_use |= {PartSpec.from_json(task, text, node.id).topic for node in self.mdr.nodes()
                       for task, text in self.mdr.desired(node.id).items()}
            gone = clients.delete_topics(self.bootstrap, [t for t in due if t not in in_use])
            self.mdr.forget_retired(due)
            return gone

    def end_finished(self, now: int) -> list[str]:
        """Cancel the queries whose `--until` is UNTIL_GRACE_MS past; their ids."""
        ended = []
        for query in self.mdr.queries():
            if query.until_ms and now >= query.until_ms + UNTIL_GRACE_MS:
                try:
                    self.cancel(query.id, keep_results=True)
                except KeyError:
                    continue   # cancelled meanwhile
                log.info("query %s ended: its --until passed", query.id)
                ended.append(query.id)
        return ended

    def results(self, query_id: str, stop: threading.Event) -> Iterator[tuple[list[str], tuple, int]]:
        """The query's result rows as they come, until `stop`; raises QueryFailed when a part of
        it has failed FAILURES_ENDING_RESULTS times in a row (the stream must not wait forever)."""
        record = next((q for q in self.mdr.queries() if q.id == query_id), None)
        if record is None:
            raise KeyError(f"no query {query_id!r}")
        failure: list[str] = []
        watcher = threading.Thread(target=self._watch_failures, args=(record, stop, failure), daemon=True,
                                   name=f"watch-{query_id}")
        watcher.start()
        for _, batch in readable_batches(consumers.tail(self.bootstrap, [record.result_topic], stop)):
            for row in batch.rows:
                yield batch.columns, row, batch.emitted_ms
        if failure:
            raise QueryFailed(f"query {query_id} failed: {failure[0]}")

    def _watch_failures(self, record: QueryRecord, stop: threading.Event, failure: list[str]) -> None:
        while not stop.wait(FAILURE_CHECK_S):
            parts = self.mdr.part_states(record.remote)
            lasting = {node: {p: s for p, s in found.items() if s.get("restarts", 0) >= FAILURES_ENDING_RESULTS - 1}
                       for node, found in parts.items()}
            status, cause = query_health(record.remote, lasting, record.status)
            if status == "FAILED":
                failure.append(cause)
                stop.set()


class QueryFailed(Exception):
    """A query whose part keeps failing on a node: its results will not come."""


