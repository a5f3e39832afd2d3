"""A node's running parts and how a batch goes through them: each part's evaluator (dsp.operators)
takes the rows, its output and progress markers go to its topic (dsp.spark.kafka_sink; through the
uplink's lanes on a constrained link), and the parts of the same node that read that topic are
handed the rows in process. A part that fails is shown failed and rebuilt later; one part's
failure never stops the others.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import pyarrow as pa

from base.plan_json import to_json
from base.plan_schema import carries_markers, event_time_column, output_columns
from dsp.operators.build import build, rows_of, view_batch
from dsp.operators.core import Operator
from dsp.operators.topic_batch import TopicBatch
from dsp.runtime.bounds import OutputBounds
from dsp.runtime.inputs import Reader
from dsp.runtime.uplink import Uplink
from dsp.spark.kafka_sink import new_run, send_marker, send_rows
from dsp.spark.manager import RESTART_AFTER_S, failure_cause
from dsp.status import BatchHook, BatchReport, ManagedQuery

log = logging.getLogger("hifi.dsp")

Reports = list[tuple["Part", BatchReport]]   # what the parts emitted in a batch, for the node's statistics


@dataclass
class Part:
    """A plan running on the node's shared readers."""

    managed: ManagedQuery
    root: Operator
    topics: frozenset[str]
    columns: list[str]
    on_batch: BatchHook | None = None
    local_topics: frozenset[str] = frozenset()   # inputs written by parts of this node (handed in process)
    sequence: int = 0                  # RowBatch ids of its output (rows and markers)
    last_marker: int | None = None
    run: str = field(default_factory=new_run)   # names its batch ids' numbering (saved with its state)
    inputs: frozenset[tuple[str, str]] = frozenset()   # (topic, format) of its sources
    owner: str = ""                    # the dead node it runs for (adopted: its own readers), else ""
    priority: int = 0                  # its messages' lane on a constrained uplink (dsp.runtime.uplink): higher first
    bounds: OutputBounds | None = None  # what of its output goes out while another node shares its topic
    # rebuilt after a failure of its own and not yet through a batch with output: it still shows
    # FAILED with that cause (a part that keeps dying must not flash "running" between its restarts)
    proving: bool = False
    suspended_ms: int | None = None   # when it was suspended: on resume it is fed what it missed since

    @functools.cached_property
    def plan_json(self) -> str:
        """Its plan's JSON (a part's plan never changes: a new plan is a new part), encoded once: it is
        saved with the part's state after every batch (encoding it each time was 10 % of a save, 2 %
        of a door's lane: py-spy, 32 doors, 2026-11-29)."""
        return to_json(self.managed.plan)

    def saved(self) -> tuple:
        return self.plan_json, self.root, self.sequence, self.last_marker, self.run

    def take_back(self, saved: tuple) -> None:
        """Its state as `saved` gave it (a state saved before runs had names keeps a new one)."""
        _, self.root, self.sequence, self.last_marker, *run = saved
        self.run = run[0] if run else self.run

    @property
    def feeds(self) -> bool:
        """Whether batches go through it: not suspended, not failed itself (a part shown failed
        because its reader is down takes the reader's replay when it comes back)."""
        return self.managed.status != "suspended" and self.managed.failed_at is None

    @property
    def publishes_markers(self) -> bool:
        return carries_markers(self.columns)


def push_one(topic: str, rows: pa.Table, root: Operator) -> pa.Table | None:
    """`rows` of `topic` pushed into an evaluator by the driver (dsp.operators)."""
    return root.push(topic, rows)


def push_tagged(batch: TopicBatch, root: Operator) -> pa.Table | None:
    """A batch of several topics pushed into an evaluator by the driver (dsp.operators)."""
    return root.push_tagged(batch)


class Parts:
    """The node's parts by query id, and feeding them. Callers hold the runtime's lock, but for
    the status fields `reflect` and `late_rows` read."""

    def __init__(self, node_id: str, relations: Callable[[], Mapping[str, Sequence[tuple]]],
                 uplink: Uplink | None) -> None:
        self.node_id, self.relations, self.uplink = node_id, relations, uplink
        self.by_id: dict[str, Part] = {}

    def reading(self, reader: Reader, topic: str) -> list[Part]:
        """The parts fed `topic`'s rows from `reader`: a raw topic has two readers (readings,
        samples), each feeding the parts reading its form; an adopted part only its own."""
        return [p for p in self.by_id.values() if topic in p.topics - p.local_topics and p.feeds
                and p.owner == reader.owner and (topic, reader.format) in p.inputs]

    def topics_by_part(self, reader: Reader, topics: list[str]) -> list[tuple[Part, set[str]]]:
        """Each part reading some of a batch's `topics`, with those it reads: a part takes a
        batch of many children's views in one push (dsp.runtime.parts.push_tagged)."""
        found: dict[str, tuple[Part, set[str]]] = {}
        for topic in topics:
            for part in self.reading(reader, topic):
                found.setdefault(part.managed.query_id, (part, set()))[1].add(topic)
        return list(found.values())

    def still_read(self) -> set[tuple[str, str, str]]:
        """(owner, topic, format) of every input a part reads from a reader (not handed in process)."""
        return {(p.owner, t, form) for p in self.by_id.values() for t, form in p.inputs if t not in p.local_topics}

    def feed(self, part: Part, push: Callable[[Operator], pa.Table | None], producer, sent: list,
             reports: Reports) -> None:
        """Push the batch through `part` (`push` into its evaluator; then into the parts here that
        read its output), adding the messages to send to `sent` and its report for the node's
        statistics to `reports`."""
        started = time.monotonic()
        if self.uplink is not None:   # queued on disk by priority; the uplink sends at the link's rate
            producer = self.uplink.lane(part.priority)
        try:
            out = push(part.root)
            if out is None:
                return
            rows: list[tuple] = rows_of(out) if out.num_rows else []
            if rows and part.bounds is not None:
                rows = part.bounds.keep(rows, part.columns)
            marker = self._send(part, rows, producer, sent)
            self._hand_on(part, out, rows, marker, producer, sent, reports)
            if part.on_batch is not None and rows:
                reports.append((part, self._report(part, rows, started)))
            elif rows:
                self.proven(part)
        except Exception as exc:  # noqa: BLE001 - one part's failure must not stop the others
            self.fail(part, exc)

    def _send(self, part: Part, rows: list[tuple], producer, sent: list) -> int | None:
        """The part's rows and, if its progress moved, its marker to its topic; the marker sent."""
        managed = part.managed
        if rows:
            part.sequence += 1
            sent += send_rows(producer, managed.output_topic, self.node_id, managed.query_id, part.columns, rows,
                              part.sequence, part.run)
        bound = part.root.bound()
        if bound is not None and part.bounds is not None:
            bound = part.bounds.cap(bound)
        if not part.publishes_markers or bound is None or (part.last_marker is not None and bound <= part.last_marker):
            return None
        part.sequence += 1
        sent.append(send_marker(producer, managed.output_topic, self.node_id, managed.query_id, part.sequence,
                                bound, part.run))
        part.last_marker = bound
        return bound

    def _hand_on(self, part: Part, out: pa.Table, rows: list[tuple], marker: int | None, producer, sent: list,
                 reports: Reports) -> None:
        """The part's output handed in process to the parts here that read its topic."""
        topic = part.managed.output_topic
        readers_here = [p for p in self.by_id.values() if topic in p.local_topics and p.feeds]
        if readers_here and (rows or marker is not None):
            handed = view_batch(output_columns(part.managed.plan), out, marker)
            for reader in readers_here:
                self.feed(reader, functools.partial(push_one, topic, handed), producer, sent, reports)

    def run_hooks(self, reports: Reports) -> None:
        """A hook that fails fails its part, as its sink would."""
        for part, report in reports:
            try:
                part.on_batch(report)
            except Exception as exc:  # noqa: BLE001 - one part's failure must not stop the others
                self.fail(part, exc)
            else:
                self.proven(part)

    @staticmethod
    def proven(part: Part) -> None:
        """A part rebuilt after a failure emitted and recorded a batch: it runs again."""
        if part.proving:
            part.proving = False
            part.managed.status, part.managed.error = "running", ""

    def fail(self, part: Part, exc: Exception) -> None:
        """The part failed: shown with its cause, rebuilt after a wait (`reflect`)."""
        log.exception("node %s: part %s failed", self.node_id, part.managed.query_id, exc_info=exc)
        part.managed.status, part.managed.error = "failed", failure_cause(str(exc))
        part.managed.failed_at = time.monotonic()

    @staticmethod
    def _report(part: Part, rows: list[tuple], started: float) -> BatchReport:
        report = BatchReport(part.sequence, rows_out=len(rows), duration_s=time.monotonic() - started,
                             emitted_ms=int(time.time() * 1000))
        event_time = event_time_column(part.managed.plan) if part.managed.plan is not None else None
        if event_time in part.columns:
            at = part.columns.index(event_time)
            stamps = [r[at] for r in rows if r[at] is not None]
            report.max_event_ms = round(max(stamps).timestamp() * 1000) if stamps else None
        return report

    # ------------------------------------------------------------ state

    def saved(self) -> dict[str, tuple]:
        """Every part's state, to save with the batch's fence."""
        return {qid: p.saved() for qid, p in self.by_id.items() if p.managed.plan is not None}

    def restore(self, saved: Mapping[str, tuple]) -> None:
        """Every part back to its state in `saved` (a part deployed since: built anew)."""
        for query_id, part in self.by_id.items():
            if part.managed.plan is None:
                continue
            kept = saved.get(query_id)
            if kept is not None and kept[0] == part.plan_json:
                part.take_back(kept)
            else:
                part.root, part.sequence, part.last_marker = build(part.managed.plan, self.relations()), 0, None

    # ------------------------------------------------------------ inspection

    def reflect(self, down: Mapping[tuple[str, str], str], now: float) -> list[ManagedQuery]:
        """The parts as queries: one whose reader is down (`down`: (owner, topic) -> its error)
        shows as failed with the reader's error; one that failed is rebuilt (its state lost)
        after the next wait of RESTART_AFTER_S."""
        for part in list(self.by_id.values()):
            managed = part.managed
            if managed.failed_at is not None:
                wait = RESTART_AFTER_S[min(managed.restarts, len(RESTART_AFTER_S) - 1)]
                if now - managed.failed_at >= wait and managed.plan is not None:
                    managed.restarts += 1
                    part.root, managed.failed_at = build(managed.plan, self.relations()), None
                    managed.started_at, part.proving = now, True
                continue
            reader_error = next((down[part.owner, t] for t in part.topics if (part.owner, t) in down), None)
            if reader_error is not None:
                managed.status, managed.error = "failed", reader_error
            elif managed.status == "failed" and not part.proving:
                managed.status, managed.error = "running", ""
        return [p.managed for p in list(self.by_id.values())]

    def late_rows(self) -> int:
        return sum(p.root.late_rows() for p in list(self.by_id.values()))
