"""One Spark streaming query per process: the clock and the offset log of every node it hosts.

A node's runtime (dsp.runtime.shared) reads each of its streams — its own inputs, and those of the parts it
adopted from a dead node — as a *lane* of this one query: each micro-batch's offset log says where
every lane's topics end, and each lane reads from where its node saved its position to there. So a
process pays Spark's fixed cost per micro-batch (planning, the offset and commit logs, the source's
poll in a Python worker, the driver's callback) once, whatever the number of nodes it hosts and of
their children. Measured on the 2-core machine (2026-11-27), 32 doors under one warehouse in one
`hifi up`, a Spark query per node: the JVM alone 0.5 cores and the driver's batch threads 0.37, for
~520 readings/s; the doors' windows out 6.2 s after they close (p50), the warehouse's 16 s.

A `hifi node` process hosts one node: its lanes are the node's streams, the query's checkpoint in
the node's state. `hifi up` hosts every node in one process and gives them one home (`home`).

Each batch's lanes run on LANE_THREADS threads, parents first (`_batch`), one at a time
(dsp.turns: lanes at once queue for the interpreter's lock at every pyarrow call), a lane waiting
on its node (a deploy goes first) stepping aside so that it does not hold the others. A lane that
fails fails the batch: Spark runs it again once the query restarts, and the lanes that saved it
skip it (their fences). Measured 2026-11-28 with the 32 doors, a lane's reads through a consumer
of its own (wire.kafka.ranges), parents first and lanes in turn: the process's batch 1.9 -> 0.7 s,
the warehouse's windows p50 / p95 5.9 / 6.6 -> 2.9 / 3.5 s after they close (`hifi bench fanin`,
before and after in one run). Then the short ranges the lanes read fetched in one go before they
run (dsp.runtime.lane_fetch), not one fetch a lane.

Measured after, `hifi bench fanin --whole 32` against the layout before, back to back: 1.41 -> 0.99
cores; the warehouse's windows p50 / p95 17.7 / 22.1 -> 7.4 / 8.7 s after they close.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from pyspark.sql import SparkSession

from dsp.runtime.lane_fetch import Fetched, fetch_for_lanes
from dsp.spark.compiler import kafka_stream
from dsp.spark.kafka_source import OFFSETS_ONLY
from dsp.spark.lane_offsets import OffsetRange, lanes_of
from dsp.spark.manager import DSPManager
from dsp.spark.offset_log import Offsets, batch_end
from dsp.spark.rounds import Rounds
from dsp.turns import Turns
from wire.kafka import clients

log = logging.getLogger("hifi.dsp")

QUERY_ID = "read:process"
# Lanes waiting in a round of Spark jobs (dsp.spark.rounds) hold their threads: the pool makes as
# many as the lanes ask for (threads are made when none is idle), up to this
LANE_THREADS = 1024
LANES_AT_ONCE = 1   # the others wait their turn (dsp.turns), but for one waiting for its node
LANE_THREAD = "lane"   # the lanes' threads' names begin so
# A lane's batch: (batch id, the lane's ends, the stream's identity: its checkpoint's id, its
# records fetched already: dsp.runtime.lane_fetch)
LaneBatch = Callable[[int, Offsets, str, Fetched], None]
# The ranges a lane's batch reads in this process: (batch id, the lane's ends, the identity)
LaneRanges = Callable[[int, Offsets, str], list[OffsetRange]]


@dataclass(frozen=True)
class Lane:
    topics: tuple[str, ...]
    on_batch: LaneBatch
    ranges: LaneRanges | None = None   # None: it fetches its own


class ProcessStream:
    """The Spark query of one home: lanes attached, their topics, and each batch handed to them."""

    _homes: dict[str, ProcessStream] = {}
    _homes_lock = threading.Lock()

    def __init__(self, spark: SparkSession, home: str, bootstrap: str, trigger_ms: int, raw_every_ms: int = 0) -> None:
        self.home, self.bootstrap, self.raw_every_ms = home, bootstrap, raw_every_ms
        # its directory is `home`; its Spark query is named after it (unique in the session)
        self.manager = DSPManager(spark, os.path.basename(home), bootstrap, os.path.dirname(home),
                                  trigger_ms=trigger_ms)
        self._lanes: dict[str, Lane] = {}
        self._order: dict[str, int] = {}   # lane -> its place in each batch (lower first; `attach`)
        self._released: set[str] = set()   # lanes detached during a batch: their consumers to close
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(LANE_THREADS, thread_name_prefix=LANE_THREAD)
        self._turns = Turns(LANES_AT_ONCE)
        self._in_flight: dict[str, Future] = {}   # lane -> its part of the batch running now
        self._running = False
        self.rounds = Rounds(0)   # the last batch's (its jobs counted)

    @classmethod
    def at(cls, spark: SparkSession, home: str, bootstrap: str, trigger_ms: int,
           raw_every_ms: int = 0) -> ProcessStream:
        """The stream of `home` in this process (made on first use): it polls every `trigger_ms`,
        and reads raw topics' new records every `raw_every_ms` (dsp.poll_pace)."""
        with cls._homes_lock:
            found = cls._homes.get(home)
            if found is None:
                found = cls._homes[home] = cls(spark, home, bootstrap, trigger_ms, raw_every_ms)
            return found

    # ------------------------------------------------------------ lanes

    def attach(self, lane: str, topics: Sequence[str], on_batch: LaneBatch, order: int = 0,
               ranges: LaneRanges | None = None) -> None:
        """`lane` reads `topics` from the next batch on (its topics replaced when attached already).
        `order`: lanes of a lower order start first in each batch (`_batch`); `ranges`: what its
        batch reads here, fetched with the other lanes' before they run (dsp.runtime.lane_fetch)."""
        with self._lock:
            self._lanes[lane] = Lane(tuple(sorted(set(topics))), on_batch, ranges)
            self._order[lane] = order
            self._write_lanes()
            start = not self._running
            self._running = True
        if start:
            self.manager.run(QUERY_ID, self._start)

    def detach(self, lane: str) -> None:
        """`lane` no longer read, once its part of the batch in flight is done; the query stops with
        the last lane (its checkpoint kept). The wait matters when the lane's node starts again in
        this process: a batch the old node finished after the new one loaded its state would be
        sent twice under one identity, the second with other rows (seen in CI: a window lost)."""
        with self._lock:
            if self._lanes.pop(lane, None) is None:
                return
            self._order.pop(lane, None)
            self._write_lanes()
            stop = self._running and not self._lanes
            self._running = self._running and not stop
            in_flight = self._in_flight.get(lane)
        if in_flight is not None and not threading.current_thread().name.startswith(LANE_THREAD):
            in_flight.exception()   # done (its failure is the batch's, reported there)
        if in_flight is None or in_flight.done():   # its reads' consumer (dsp.runtime.inputs names it after the lane)
            clients.release(lane)
        else:
            with self._lock:
                self._released.add(lane)   # closed before the next batch, once this one is over
        if stop:
            self.manager.cancel(QUERY_ID, drop_state=False)
            clients.release(self._fetch_owner)

    def failure(self) -> str:
        """Why the query is down ("" while it runs); one that died is restarted when its wait is over."""
        found = next((q for q in self.manager.queries() if q.query_id == QUERY_ID), None)
        return found.error if found is not None and found.status == "failed" else ""

    def ends(self, batch_id: int, lane: str) -> Offsets | None:
        """Where `lane`'s topics ended at batch `batch_id` (None: the log no longer says)."""
        logged = batch_end(self.checkpoint, batch_id)
        return None if logged is None else lanes_of(logged).get(lane, {})

    @property
    def checkpoint(self) -> str:
        return self.manager.spark_checkpoint(QUERY_ID)

    @property
    def identity(self) -> str:
        """The query's checkpoint's own id: a lane's fences count batches of this checkpoint only."""
        try:
            with open(os.path.join(self.checkpoint, "metadata"), encoding="utf-8") as fh:
                return str(json.loads(fh.read().splitlines()[0])["id"])
        except (OSError, ValueError, KeyError, IndexError):
            return ""

    # ------------------------------------------------------------ the query

    def _lanes_path(self) -> str:
        return os.path.join(self.manager.checkpoint(QUERY_ID), "lanes.json")

    def _write_lanes(self) -> None:
        """The lanes' topics where the source reads them at its next poll (written whole, renamed)."""
        path = self._lanes_path()
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(f"{path}.tmp", "w", encoding="utf-8") as fh:
            json.dump({"lanes": {name: list(lane.topics) for name, lane in self._lanes.items()}}, fh)
        os.replace(f"{path}.tmp", path)

    def _start(self, writer: Callable):
        options = {"bootstrap": self.bootstrap, "format": OFFSETS_ONLY, "topics": "",
                   "topics_file": self._lanes_path(), "raw_every_ms": str(self.raw_every_ms)}
        return writer(kafka_stream(self.manager.spark, options)).foreachBatch(
            lambda batch, batch_id: self._batch(batch_id)).start()

    def _batch(self, batch_id: int) -> None:
        """Every lane attached takes its part of the batch, in their order, in turn (`_serve`); the
        first failure fails it. A parent reads what its children sent in the batch before, so its
        lane going first is what it adds to a window's latency (the 32 doors: the warehouse's lane
        last added a whole batch, 1.3 s p50; measured 2026-11-28)."""
        logged = batch_end(self.checkpoint, batch_id)
        if logged is None:
            raise RuntimeError(f"the offset log of {self.checkpoint} does not say where batch {batch_id} ends")
        by_lane, identity = lanes_of(logged), self.identity
        with self._lock:   # made under the lock: a lane detached after this waits for its part
            for lane in self._released - set(self._lanes):
                clients.release(lane)
            self._released.clear()
            order = sorted(self._lanes, key=lambda lane: self._order[lane])
            lanes = {name: self._lanes[name] for name in order}
            self._in_flight = {lane: Future() for lane in order}
            running = list(self._in_flight.values())
        fetched = self._fetch(batch_id, identity, lanes, by_lane)
        waiting = deque((self._in_flight[name], lane.on_batch, by_lane.get(name, {}), fetched.get(name, {}))
                        for name, lane in lanes.items())
        self.rounds = Rounds(len(waiting))
        self._serve(waiting, batch_id, identity, self.rounds)
        errors = [exc for future in running if (exc := future.exception()) is not None]
        if errors:
            raise errors[0]

    @property
    def _fetch_owner(self) -> str:
        return f"lanes of {self.home}"

    def _fetch(self, batch_id: int, identity: str, lanes: dict[str, Lane], by_lane: dict[str, Offsets]
               ) -> dict[str, Fetched]:
        """The lanes' short ranges of the batch, fetched at once (dsp.runtime.lane_fetch). A lane whose
        ranges cannot be told (its node mid-change) fetches its own."""
        wanted: dict[str, list[OffsetRange]] = {}
        for name, lane in lanes.items():
            if lane.ranges is not None:
                try:
                    wanted[name] = lane.ranges(batch_id, by_lane.get(name, {}), identity)
                except Exception:  # noqa: BLE001 - see the docstring
                    log.debug("lane %s: its ranges of batch %d not told", name, batch_id, exc_info=True)
        return fetch_for_lanes(self.bootstrap, self._fetch_owner, wanted)

    def _serve(self, waiting: deque, batch_id: int, identity: str, rounds: Rounds) -> None:
        """A thread of the pool runs the waiting lanes one after another; a lane that steps aside
        (dsp.turns) has another thread go on with the rest meanwhile. The lanes' Spark jobs are
        the batch's `rounds`' (dsp.spark.rounds)."""
        def serve() -> None:
            while True:
                try:
                    future, on_batch, ends, fetched = waiting.popleft()
                except IndexError:
                    return
                with self._turns.taking(when_aside=lambda: self._pool.submit(serve)):
                    try:
                        with rounds.lane():
                            on_batch(batch_id, ends, identity, fetched)
                    except BaseException as exc:  # noqa: BLE001 - the batch's failure, raised by `_batch`
                        future.set_exception(exc)
                    else:
                        future.set_result(None)
        self._pool.submit(serve)
