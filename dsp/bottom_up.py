"""Parts run bottom-up in one process, without Spark or Kafka: each round, every part takes the
batches of the topics it reads, and its rows and progress marker go at once to the parts after it
that read its topic. The tests' harness for hierarchies evaluated part by part, and the joins
benchmark's for the cost of the parts a plan deploys.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import pyarrow as pa

from base.plan import Plan
from base.plan_schema import carries_markers, output_columns, sources
from dsp.operators.build import build, rows_of, view_batch
from dsp.operators.core import Operator

Pushes = Callable[[Operator, list[tuple[str, pa.Table]]], list[pa.Table | None]]


def pushed(root: Operator, batches: list[tuple[str, pa.Table]]) -> list[pa.Table | None]:
    """What `root` returns for each (topic, batch), pushed in order (the driver's engine)."""
    return [root.push(topic, table) for topic, table in batches]


class BottomUp:
    """`tasks` ((topic it writes, plan), producers first) built once; `rounds` fed through them.
    `emitted`: the rows each topic received (as tuples), when `keep_rows`; `counted`: how many."""

    def __init__(self, tasks: Sequence[tuple[str, Plan]], relations: Mapping[str, list],
                 push: Pushes = pushed, keep_rows: bool = True) -> None:
        self.roots = [(topic, plan, build(plan, relations)) for topic, plan in tasks]
        self.push, self.keep_rows = push, keep_rows
        self.markers: dict[str, int | None] = {topic: None for topic, _ in tasks}
        self.emitted: dict[str, list[tuple]] = {topic: [] for topic, _ in tasks}
        self.counted: dict[str, int] = dict.fromkeys(self.emitted, 0)

    def round(self, pending: dict[str, list[pa.Table]]) -> None:
        """One round: `pending` (topic -> its batches: the raw topics') grows by every part's output."""
        for out_topic, plan, root in self.roots:
            read = dict.fromkeys(topic for source in sources(plan) for topic in source.topics)   # a topic once
            outputs = self.push(root, [(topic, table) for topic in read for table in pending.get(topic, [])])
            found = [o for o in outputs if o is not None and o.num_rows]
            rows = pa.concat_tables(found) if found else None
            bound = root.bound()
            marker = bound if carries_markers(dict(output_columns(plan))) and bound is not None and \
                bound != self.markers[out_topic] else None
            self.markers[out_topic] = bound if marker is not None else self.markers[out_topic]
            pending.setdefault(out_topic, []).append(view_batch(output_columns(plan), rows, marker))
            if rows is not None:
                self.counted[out_topic] += rows.num_rows
                if self.keep_rows:
                    self.emitted[out_topic].extend(rows_of(rows))
