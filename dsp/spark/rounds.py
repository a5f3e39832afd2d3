"""A micro-batch's Spark jobs, shared by the lanes of the process's stream (dsp.runtime.process_stream).

Each lane (a node's stream) asks Spark for the rows of some DataFrames — its forms' statistics,
its parts' partials — at the same points of its batch. Rather than a job per ask, the asks of
every lane wait for each other: once every lane of the batch is either waiting or done, one job
computes all the frames asked (`collect_frames`: one union, each frame tagged by its place) and
each lane takes its own rows and goes on. A job's fixed cost (planning, scheduling, the tasks'
Python workers, the result's transfer) is paid once a round, not once per lane and form.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame

from dsp.turns import stepping_aside

PART = "__part"
Found = list[pa.Table | Exception]   # each frame's rows, or why Spark could not compute them

_lane = threading.local()   # the Rounds the thread's lane takes part in


def collect(frames: Sequence[DataFrame]) -> Found:
    """Every frame's rows: in the round of the thread's lane when it runs in a micro-batch of the
    process's stream, else by a job of their own."""
    rounds: Rounds | None = getattr(_lane, "rounds", None)
    if rounds is None or not frames:
        return collect_frames(frames)
    return rounds.collect(frames)


@dataclass
class _Ask:
    frames: Sequence[DataFrame]
    found: Found | None = None
    error: BaseException | None = None
    done: bool = False


@dataclass
class Rounds:
    """The rounds of one micro-batch of `lanes` lanes: a round's job runs once every lane not
    done is waiting in it."""

    lanes: int
    jobs: int = 0   # the rounds run
    run: Callable[[Sequence[DataFrame]], Found] = field(default=lambda frames: collect_frames(frames))
    _asks: list[_Ask] = field(default_factory=list)
    _turn: threading.Condition = field(default_factory=threading.Condition)

    @contextmanager
    def lane(self) -> Iterator[None]:
        """The block is a lane's part of the batch: its asks join the rounds; it is done after."""
        _lane.rounds = self
        try:
            yield
        finally:
            _lane.rounds = None
            with self._turn:
                self.lanes -= 1
                ready = self._ready()
            if ready:
                self._run(ready)

    def collect(self, frames: Sequence[DataFrame]) -> Found:
        ask = _Ask(frames)
        with self._turn:
            self._asks.append(ask)
            ready = self._ready()
        if ready:
            self._run(ready)
        else:
            with stepping_aside(), self._turn:   # the lanes not yet asking go on meanwhile
                self._turn.wait_for(lambda: ask.done)
        if ask.error is not None:
            raise ask.error
        assert ask.found is not None
        return ask.found

    def _ready(self) -> list[_Ask]:
        """The round's asks if every lane not done asks (taken: the next round starts empty)."""
        if not self._asks or len(self._asks) < self.lanes:
            return []
        ready, self._asks = self._asks, []
        return ready

    def _run(self, asks: list[_Ask]) -> None:
        frames = [frame for ask in asks for frame in ask.frames]
        try:
            found, error = self.run(frames), None
            self.jobs += 1
        except BaseException as exc:  # noqa: BLE001 - every lane of the round fails with it
            found, error = [], exc
        with self._turn:
            start = 0
            for ask in asks:
                ask.found, ask.error, ask.done = found[start:start + len(ask.frames)], error, True
                start += len(ask.frames)
            self._turn.notify_all()


def collect_frames(frames: Sequence[DataFrame]) -> list[pa.Table | Exception]:
    """Every frame's rows, computed by one Spark job: the frames tagged by their place and
    unioned, each column in a slot of its type (`slots`: the union is as wide as the widest frame
    per type, whatever the number of frames). Should that job fail, each frame is computed alone:
    only the frames whose rows fail it get their exception."""
    if len(frames) <= 1:
        return [_alone(frame) for frame in frames]
    schemas = [frame.schema for frame in frames]
    union, placed = slots([[field.dataType.simpleString() for field in schema.fields] for schema in schemas])
    tagged = []
    for i, (frame, schema, mine) in enumerate(zip(frames, schemas, placed, strict=True)):   # one JVM call a frame
        by_slot = {slot: quoted(field.name) for field, slot in zip(schema.fields, mine, strict=True)}
        tagged.append(frame.selectExpr(f"{i} AS {PART}", *[f"{by_slot.get(slot, f'CAST(NULL AS {kind})')} AS {slot}"
                                                          for slot, kind in union]))
    try:
        table = _union_all(tagged).toArrow()
    except PySparkException:   # see the docstring
        return [_alone(frame) for frame in frames]
    found: list[pa.Table | Exception] = []
    for i, (schema, mine) in enumerate(zip(schemas, placed, strict=True)):
        rows = table.filter(pc.equal(table[PART], i))
        found.append(rows.select(mine).rename_columns([field.name for field in schema.fields]))
    return found


def quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _union_all(frames: list[DataFrame]) -> DataFrame:
    """The frames' rows in one DataFrame, unioned pairwise in rounds: each union is analysed as it
    is made, so a chain of n would analyse ~n²/2 branches, the rounds ~n log n."""
    while len(frames) > 1:
        odd = frames[len(frames) // 2 * 2:]
        frames = [a.unionAll(b) for a, b in zip(frames[::2], frames[1::2], strict=False)] + odd
    return frames[0]


def slots(parts: Sequence[Sequence[str]]) -> tuple[list[tuple[str, str]], list[list[str]]]:
    """Columns of several parts (each a list of its columns' types) placed in shared slots: a
    slot holds one type, and a part's columns of a type take that type's slots in order. The
    union's slots (name, type), and per part the slot of each of its columns.

    >>> union, placed = slots([["bigint", "string"], ["string", "string", "double"]])
    >>> union
    [('s0_0', 'bigint'), ('s1_0', 'string'), ('s1_1', 'string'), ('s2_0', 'double')]
    >>> placed
    [['s0_0', 's1_0'], ['s1_0', 's1_1', 's2_0']]
    """
    kinds: dict[str, int] = {}
    width: dict[str, int] = {}
    placed = []
    for columns in parts:
        used: dict[str, int] = {}
        mine = []
        for kind in columns:
            n = used.get(kind, 0)
            used[kind] = n + 1
            mine.append(f"s{kinds.setdefault(kind, len(kinds))}_{n}")
        placed.append(mine)
        for kind, n in used.items():
            width[kind] = max(width.get(kind, 0), n)
    union = [(f"s{index}_{n}", kind) for kind, index in kinds.items() for n in range(width[kind])]
    return union, placed


def _alone(frame: DataFrame) -> pa.Table | Exception:
    """One frame's rows computed by a job of its own, or why Spark cannot (its asker raises it)."""
    try:
        return frame.toArrow()
    except PySparkException as exc:
        return exc
