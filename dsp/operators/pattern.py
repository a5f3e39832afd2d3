"""Event patterns (base.events) over rows released in event-time order."""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa

from base.events import Found, PatternState, Step, order_key, ordering_columns
from base.plan import Match
from base.plan_schema import event_time_column, output_columns
from dsp.operators.core import Operator, truths
from dsp.operators.expressions import arrow_schema, arrow_type, epoch_ms, evaluate, timestamps


@dataclass
class MatchOp(Operator):
    """Event patterns (base.events): rows held until the input's bound has passed them, then fed
    in event-time order to their partition's candidates; matches go out as rows."""

    plan: Match
    child: Operator
    held: list[tuple[tuple, tuple, int, dict[str, bool], dict]] = field(default_factory=list)
    states: dict[tuple, PatternState] = field(default_factory=dict)
    passed_ms: int | None = None      # the bound up to which rows were fed
    late: int = 0

    def __post_init__(self) -> None:
        self.columns = output_columns(self.plan)
        self.schema = arrow_schema(self.columns)
        self.time = event_time_column(self.plan.child)
        self.conditions = {name: cond for step in self.plan.steps for name, cond in zip(
            step.names, step.conditions, strict=True)}
        self.ordering = ordering_columns(self.plan, dict(output_columns(self.plan.child)))

    def push(self, topic: str, batch: pa.Table) -> pa.Table | None:
        rows = self.child.push(topic, batch)
        if rows is not None and rows.num_rows:
            stamps = epoch_ms(rows[self.time]).to_pylist()
            meets = {name: truths(evaluate(cond, rows), rows.num_rows) for name, cond in self.conditions.items()}
            for i, row in enumerate(rows.to_pylist()):
                if stamps[i] is None or (self.passed_ms is not None and stamps[i] < self.passed_ms):
                    self.late += 1   # the pattern went past its time: dropped, as an Aggregate drops a late row
                    continue
                self.held.append((tuple(row[k] for k in self.plan.partition), order_key(row, stamps[i], self.ordering),
                                  stamps[i], {name: values[i] for name, values in meets.items()}, row))
        bound = self.child.bound()
        if bound is None or (self.passed_ms is not None and bound <= self.passed_ms):
            return None if rows is None else self._rows([])
        ready = sorted((h for h in self.held if h[2] < bound), key=lambda h: h[1])
        self.held = [h for h in self.held if h[2] >= bound]
        found: list[tuple[tuple, Found]] = []
        steps = [Step(s.names, s.negated) for s in self.plan.steps]
        for key, _, ts, meets, row in ready:
            state = self.states.setdefault(key, PatternState(steps, self.plan.within_ms))
            found += [(key, f) for f in state.feed(ts, meets, row)]
        for key, state in self.states.items():
            found += [(key, f) for f in state.close(bound)]
        # a partition with no candidate and no match ending at or after the bound holds nothing
        self.states = {key: state for key, state in self.states.items()
                       if state.candidates or (state.resume_after is not None and state.resume_after >= bound)}
        self.passed_ms = bound
        return self._rows(found)

    def _rows(self, found: list[tuple[tuple, Found]]) -> pa.Table:
        out = []
        for key, match in sorted(found, key=lambda kf: kf[1].end_ms):
            values = dict(zip(self.plan.partition, key, strict=True))
            out.append([values[column] if not step else match.rows[step].get(column)
                        for _, step, column in self.plan.outputs] + [match.end_ms])
        arrays = [pa.array([r[i] for r in out], arrow_type(kind)) for i, (_, kind) in enumerate(self.columns[:-1])]
        return pa.Table.from_arrays([*arrays, timestamps([r[-1] for r in out])], schema=self.schema)

    def bound(self) -> int | None:
        return self.passed_ms

    def late_rows(self) -> int:
        return self.child.late_rows() + self.late

    def triaged(self) -> tuple[int, int] | None:
        return self.child.triaged()
