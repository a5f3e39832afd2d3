"""A window join of streams: each new row probes the other inputs' buffers (base.window_join)."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from base.plan import EVENT_TIME, JOIN_OLDEST, JOIN_TIME, WindowJoin
from base.plan_schema import event_time_column, output_columns
from base.window_join import Buffers
from dsp.operators.core import Operator
from dsp.operators.expressions import arrow_schema, arrow_type, epoch_ms, timestamps


@dataclass
class WindowJoinOp(Operator):
    """A window join (base.window_join): each input's new rows probe the others' buffers, one at a
    time, and the combinations they complete go out at once; rows behind their input's bound are
    late (dropped and counted, as an Aggregate drops them); buffers are evicted as bounds pass."""

    plan: WindowJoin
    children: list[Operator]
    buffers: Buffers | None = None
    late: int = 0

    def __post_init__(self) -> None:
        self.columns = output_columns(self.plan)
        self.schema = arrow_schema(self.columns)
        self.times = [event_time_column(child) for child in self.plan.children]
        if self.buffers is None:
            self.buffers = Buffers(self.plan.aliases, self.plan.keys, self.plan.bounds)

    def push(self, topic: str, batch: pa.Table) -> pa.Table | None:
        assert self.buffers is not None
        befores = [child.bound() for child in self.children]
        pushed = [child.push(topic, batch) for child in self.children]
        if all(rows is None for rows in pushed):
            return None
        found: list[dict[str, tuple[int, dict]]] = []
        for alias, time, before, rows in zip(self.plan.aliases, self.times, befores, pushed, strict=True):
            if rows is None or not rows.num_rows:
                continue
            for stamp, row in zip(epoch_ms(rows[time]).to_pylist(), rows.to_pylist(), strict=True):
                if stamp is not None and stamp < self.plan.from_ms:
                    continue   # from before the query's start: it joins nothing
                if stamp is None or (before is not None and stamp < before):
                    self.late += 1
                    continue
                found += self.buffers.add(alias, stamp, row)
        self.buffers.evict(dict(zip(self.plan.aliases, (child.bound() for child in self.children), strict=True)))
        return self._rows(found)

    def _rows(self, found: list[dict[str, tuple[int, dict]]]) -> pa.Table:
        values: dict[str, list] = {name: [] for name, _ in self.columns}
        for combination in found:
            for alias, child in zip(self.plan.aliases, self.children, strict=True):
                row = combination[alias][1]
                for name, _ in child.columns:
                    if name != EVENT_TIME:
                        values[f"{alias}.{name}"].append(row[name])
            times = [t for t, _ in combination.values()]
            values[JOIN_OLDEST].append(min(times))
            values[JOIN_TIME].append(max(times))
        arrays = [pa.array(values[name], arrow_type(kind)) for name, kind in self.columns[:-2]]
        return pa.Table.from_arrays([*arrays, timestamps(values[JOIN_OLDEST]), timestamps(values[JOIN_TIME])],
                                    schema=self.schema)

    def bound(self) -> int | None:
        """No joined row to come is older than the oldest input's bound: its newest row is one
        still to come, at or after that input's bound."""
        bounds = [child.bound() for child in self.children]
        return None if any(b is None for b in bounds) else min(bounds)   # type: ignore[type-var]

    def late_rows(self) -> int:
        return sum(child.late_rows() for child in self.children) + self.late
