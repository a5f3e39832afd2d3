"""A node's side of re-parenting (glue.adoption): adopting a dead parent's parts, draining them
at the hand-back, and taking its own parts back when it returns.

Runs in the node's reconcile round (every 2 s): one HGETALL of the adoptions and, for a node that
may adopt or is in an adoption, the node list. Who adopts is decided by every node alike from the topology
and the live set; the MDR's HSETNX lets only one claim a dead node.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import Protocol

from base.part_spec import PartSpec
from base.plan import PlanError
from base.plan_schema import output_columns
from dsp.runtime.bounds import OutputBounds, bounded_column
from dsp.runtime.shared import SharedRuntime
from glue.adoption import TailBatch, adopt_after_ms, adoptable_by, adopter, handback_at, resume_point
from glue.operators import operator_parts
from glue.standing import StandingView, standing_parts
from glue.topology import Topology
from mdr.repository import MDR, Adoption, now_ms
from services.part_signing import PartVerifier, Refusals, signed_parts
from wire.codec import datetime_ms, parse_row_batch
from wire.kafka import consumers

log = logging.getLogger("hifi.adoption")

TAIL_MESSAGES = 200   # read back from an output topic's end for its resume point (a marker goes out
                      # with every batch that moves it: the last few messages hold the newest)
MARKERLESS_DRAIN_MS = 15_000   # a part without progress markers (a selection's rows) stops this long after
                               # the boundary: the time its last rows before it take to come through


class AdoptingNode(Protocol):
    """What re-parenting needs of the node it runs in (services.node.HiFiNode)."""

    id: str
    topology: Topology
    mdr: MDR
    dsp: SharedRuntime
    standing: list[StandingView]
    bootstrap: str
    verifier: PartVerifier
    refusals: Refusals

    def deploy(self, part: PartSpec, bounds: OutputBounds | None = None) -> str: ...


def parts_of(node: AdoptingNode, owner: str) -> list[PartSpec]:
    """The parts `owner` runs: its standing views' tasks (from the topology, as it plans them) and
    the query parts the placement service deployed on it (the MDR's desired state, as it signed them)."""
    desired, refused = signed_parts(node.mdr.desired(owner), owner, node.verifier)
    node.refusals.report(owner, refused)
    return [*standing_parts(node.standing, owner), *operator_parts(node.topology, owner), *desired]


def tail_of(bootstrap: str, topic: str, column: str) -> list[TailBatch]:
    """The last TAIL_MESSAGES RowBatches of `topic` as resume_point reads them."""
    consumer = consumers.make_consumer(bootstrap)
    try:
        found = []
        for tp in consumers.partitions_of(consumer, [topic]):
            end = consumers.end_offsets(consumer, [tp])[tp]
            for record in consumers.poll_range(consumer, tp, max(0, end - TAIL_MESSAGES), end):
                batch, _ = parse_row_batch(record.value)
                if batch is None:
                    continue
                at = batch.columns.index(column) if column in batch.columns else None
                times = tuple(datetime_ms(r[at]) for r in batch.rows if at is not None and r[at] is not None)
                found.append(TailBatch(batch.watermark_ms, times))
        return found
    finally:
        consumer.close()


def adopted_id(owner: str, query_id: str) -> str:
    return f"{owner}:{query_id}"


class Adoptions:
    """What one node does about dead and returning parents, each reconcile round."""

    def __init__(self, node: AdoptingNode) -> None:
        self.node = node
        self.grace_ms = adopt_after_ms(node.topology)
        self.adoptable = adoptable_by(node.topology, node.id)   # whose death it watches for
        self._dead_since: dict[str, float] = {}   # node -> when this node first saw it dead (monotonic)
        self.handback: Adoption | None = None      # this node's parts being taken back from an adopter

    # ------------------------------------------------------------ the returning node

    def returning(self) -> None:
        """On start, before any part is deployed: if this node's parts were adopted, fix where it
        takes them back (every part it deploys from now on is bounded by it, `bounds`)."""
        found = self.node.mdr.adoptions().get(self.node.id)
        if found is None:
            return
        self.handback = found = self._with_handback(found)
        log.info("node %s: back; %s ran its parts since %s; it emits windows from %s on", self.node.id,
                 found.adopter, found.since_ms, found.handback_ms)

    def _with_handback(self, found: Adoption) -> Adoption:
        """The adoption with the boundary at which this node takes its parts back (fixed now if not yet)."""
        if found.handback_ms is not None:
            return found
        self.node.mdr.update_adoption(found.node, handback_ms=handback_at(now_ms(), found.parts))
        return self.node.mdr.adoptions()[found.node]

    def bounds(self, columns: list[str]) -> OutputBounds | None:
        """A part of this node deployed during a hand-back: windows from the boundary on, markers
        held there until the adopter has drained."""
        found = self.handback
        column = bounded_column(columns)
        if found is None or found.handback_ms is None or column is None:
            return None
        return OutputBounds(column, found.handback_ms, None, None if found.drained_ms else found.handback_ms)

    def _take_back(self, found: Adoption) -> None:
        """Each round while this node's parts are being taken back: markers free once the adopter
        has drained; the bounds gone and the adoption ended once every part has passed the boundary."""
        found = self._with_handback(found)   # one thought dead (frozen, cut off) that ran on: bounded from now
        since = self._dead_since.get(found.adopter)
        if not found.drained_ms and since is not None and (time.monotonic() - since) * 1000 >= self.grace_ms:
            log.error("node %s: its adopter %s is dead; the windows before %s it had still to emit are lost",
                      self.node.id, found.adopter, found.handback_ms)
            self.node.mdr.update_adoption(found.node, drained_ms=now_ms())   # waiting for it would stop the parent
            found = self.node.mdr.adoptions()[found.node]
        self.handback = found
        dsp = self.node.dsp
        parts = [dsp.part(q.query_id) for q in dsp.queries() if self._shared(q.query_id)]
        for part in parts:
            if part.bounds is None:
                dsp.set_bounds(part.managed.query_id, self.bounds(part.columns))
            elif found.drained_ms:
                part.bounds.marker_cap_ms = None
        boundary = found.handback_ms or 0
        if found.drained_ms and all(p.last_marker is not None and p.last_marker >= boundary
                                    for p in parts if p.publishes_markers):
            for part in parts:   # nothing before the boundary can come from this node any more
                dsp.set_bounds(part.managed.query_id, None)
            self.node.mdr.end_adoption(self.node.id)
            self.handback = None
            log.info("node %s: took its parts back from %s", self.node.id, found.adopter)

    def _shared(self, query_id: str) -> bool:
        try:
            self.node.dsp.part(query_id)
            return True
        except KeyError:
            return False

    # ------------------------------------------------------------ each round

    def round(self) -> None:
        """Note who is dead; take this node's parts back if they were adopted; adopt a dead node
        this node is the adopter of; run (or drain) what it adopted."""
        node, mdr = self.node, self.node.mdr
        adoptions = mdr.adoptions()
        if not self.adoptable and not any(node.id in (found.node, found.adopter) for found in adoptions.values()):
            return   # nothing it could adopt, drain or take back: no node records to read
        records = mdr.nodes()
        alive = {n.id for n in records if n.alive}
        clock = time.monotonic()
        for record in records:
            if record.alive or record.id not in node.topology.nodes:
                self._dead_since.pop(record.id, None)
            else:
                self._dead_since.setdefault(record.id, clock)
        if node.id in adoptions:
            self._take_back(adoptions[node.id])
        for record in records:
            since = self._dead_since.get(record.id)
            if (since is not None and record.id not in adoptions and (clock - since) * 1000 >= self.grace_ms
                    and adopter(node.topology, record.id, alive) == node.id):
                children = node.topology.children(record.id)
                if not mdr.claim_adoption(record.id, node.id, children):
                    continue
                if (again := mdr.node(record.id)) is not None and again.alive:
                    mdr.end_adoption(record.id)   # it came back meanwhile: it runs its parts itself
                    continue
                log.warning("node %s: %s is dead; adopting its parts (%s move here)", node.id, record.id,
                            ", ".join(children))
                adoptions = mdr.adoptions()
        for found in adoptions.values():
            if found.adopter == node.id:
                self._keep(found, found.node in alive)

    def _keep(self, found: Adoption, owner_alive: bool) -> None:
        """Run the parts adopted from `found.node` until the hand-back has drained them."""
        node = self.node
        if found.drained_ms:
            return
        running = {q.query_id for q in node.dsp.queries()}
        parts = dict(found.parts)
        for part in parts_of(node, found.node):
            query_id = adopted_id(found.node, part.query_id)
            column = bounded_column([name for name, _ in output_columns(part.plan)])
            if query_id in running or column is None:
                if column is None and query_id not in parts:
                    log.warning("node %s: part %s of %s carries no window or event time to resume at; not adopted",
                                node.id, part.query_id, found.node)
                    parts[query_id] = -1
                continue
            if parts.get(query_id, 0) < 0:
                continue
            if query_id not in parts:   # first adoption: from where the dead node stopped
                parts[query_id] = resume_point(tail_of(node.bootstrap, part.topic, column))
            bounds = OutputBounds(column, parts[query_id], found.handback_ms)
            if found.handback_ms is not None and parts[query_id] >= found.handback_ms:
                continue   # the node came back before anything here was owed
            try:
                node.deploy(replace(part, query_id=query_id, export_as="", owner=found.node,
                                    history_from_ms=None), bounds)
            except PlanError as exc:   # a part run as a Spark query of its own (adaptive smoothing)
                log.warning("node %s: part %s of %s not adopted: %s", node.id, part.query_id, found.node, exc)
                parts[query_id] = -1
                continue
            running.add(query_id)
            log.info("node %s: runs %s for %s from %s", node.id, part.query_id, found.node, parts[query_id])
        if parts != found.parts:
            node.mdr.update_adoption(found.node, parts=parts)
        ours = [q for q in parts if q in running]
        if found.handback_ms is None or not owner_alive:
            return
        drained = True
        for query_id in ours:
            part = node.dsp.part(query_id)
            if part.bounds is not None and part.bounds.until_ms is None:
                part.bounds.until_ms = found.handback_ms
            if part.publishes_markers:
                drained &= part.bounds is None or part.bounds.drained(part.last_marker)
            else:   # rows without markers: allowed the lateness of a reading to arrive
                drained &= now_ms() >= found.handback_ms + MARKERLESS_DRAIN_MS
        if drained:
            for query_id in ours:
                node.dsp.cancel(query_id)
            node.mdr.update_adoption(found.node, drained_ms=now_ms())
            log.info("node %s: handed %s's parts back at %s", node.id, found.node, found.handback_ms)
