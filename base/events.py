"""Event patterns over a stream (base.plan.Match), incrementally, per partition. Pure.

Semantics (those of Flink CEP's `begin(a).followedBy(b).notFollowedBy(x)...within(T)` with
AFTER MATCH SKIP PAST LAST ROW; the reference evaluator, glue.reference, computes the same by a
search of its own):
  - a partition's rows are taken in event-time order (ties: `order_key`), once the input's bound
    says no earlier row can come;
  - every row meeting the first step starts a candidate; a candidate takes, for its next step,
    the first later row meeting it (other rows between are skipped), for an AND step each of its
    names the first row meeting that name, in any order; all its rows within `within_ms` of its
    first (inclusive);
  - a negated step between two others ends a candidate when a row meets it after the one before
    and before the one after is found; a negated last step ends it when a row meets it within
    the bound, and otherwise the candidate matches once the bound has passed (its end time is
    its first row's time + within);
  - the first candidate to complete (the earliest end; at one end, one completed by a row before
    one whose bound passed, then the earliest start) is the match; every other candidate is
    dropped and the next match starts after its end.

A partition's state lives in the MatchOp of the node's shared runtime (dsp.operators, saved with every
other operator's after each micro-batch, with its fence), not in Spark's state store: the same
pattern as a Spark query of its own (applyInPandasWithState, PySpark 4.3.0, pandas 2.3.3, 200 rows/s,
1 s triggers, measured on the 2-core machine) took 0.84 cores and 0.49 s per trigger alone, and five
of them 1.66 cores at 2.1-2.3 s per trigger (falling behind), where five plain queries took 0.62:
every pattern would be the per-query cost the shared runtime removed (docs/benchmarks.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from base.plan import Match, expr_columns

Row = dict[str, Any]


@dataclass(frozen=True)
class Step:
    names: tuple[str, ...]
    negated: bool = False


@dataclass
class Candidate:
    start_ms: int
    order: int                                 # creation order: ties of start
    next: int                                  # index of the next positive step (len(steps): all met)
    rows: dict[str, Row] = field(default_factory=dict)
    pending: tuple[str, ...] = ()              # names of the AND step at `next` still unmet


@dataclass(frozen=True)
class Found:
    rows: dict[str, Row]
    end_ms: int


def ordering_columns(plan: Match, types: dict[str, str]) -> tuple[str, ...]:
    """The columns that order rows of one time, alike in the runtime and the reference: every
    one the pattern reads (conditions, partition, outputs) but timestamps."""
    read = {c for step in plan.steps for cond in step.conditions for c in expr_columns(cond)}
    read |= set(plan.partition) | {column for _, _, column in plan.outputs}
    return tuple(sorted(c for c in read if types.get(c) != "timestamp"))


def order_key(row: Row, ts: int, columns: Sequence[str]) -> tuple:
    """How rows are taken: by time, then by the values of `columns` (ordering_columns)."""
    return (ts, tuple(repr(row.get(c)) for c in columns))


class PatternState:
    """One partition's candidates: fed rows in order (`feed`) and bounds (`close`)."""

    def __init__(self, steps: Sequence[Step], within_ms: int) -> None:
        self.steps = tuple(steps)
        self.within_ms = within_ms
        self.candidates: list[Candidate] = []
        self.resume_after: int | None = None   # a match ended here: later rows start candidates
        self.created = 0

    # ------------------------------------------------------------ the pattern's shape

    def _positive_from(self, index: int) -> int:
        while index < len(self.steps) and self.steps[index].negated:
            index += 1
        return index

    def _guards(self, candidate: Candidate) -> list[str]:
        """The negated names no row may meet now: those between its last step met and its next
        (after its last: the negated last steps)."""
        previous = candidate.next - 1
        while previous >= 0 and self.steps[previous].negated:
            previous -= 1
        return [s.names[0] for s in self.steps[previous + 1:candidate.next]]

    def _trailing(self) -> bool:
        return self.steps[-1].negated

    def _advance(self, candidate: Candidate, name: str, row: Row) -> None:
        candidate.rows[name] = row
        candidate.pending = tuple(n for n in candidate.pending if n != name)
        if not candidate.pending:
            candidate.next = self._positive_from(candidate.next + 1)
            if candidate.next < len(self.steps):
                candidate.pending = self.steps[candidate.next].names

    # ------------------------------------------------------------ input

    def close(self, bound_ms: int) -> list[Found]:
        """No row earlier than `bound_ms` can come: a candidate waiting only for its negated last
        step's bound to pass (start + within < bound_ms) matches."""
        if not self._trailing():
            return []
        due = [c for c in self.candidates if c.next == len(self.steps) and c.start_ms + self.within_ms < bound_ms]
        if not due:
            return []
        first = min(due, key=lambda c: (c.start_ms, c.order))
        end = first.start_ms + self.within_ms
        self.candidates = [c for c in self.candidates if c.start_ms > end]   # the others are skipped past
        self.resume_after = end
        return [Found(first.rows, end), *self.close(bound_ms)]

    def feed(self, ts: int, meets: dict[str, bool], row: Row) -> list[Found]:
        """One row (its time, and which step names' conditions it meets), after every earlier one."""
        found = self.close(ts)
        completed: list[Candidate] = []
        kept: list[Candidate] = []
        for candidate in self.candidates:
            if self.within_ms and ts > candidate.start_ms + self.within_ms:
                continue   # out of its bound (one whose negated last step bounded it matched in close)
            if any(meets[name] for name in self._guards(candidate)):
                continue
            if candidate.next < len(self.steps):
                name = next((n for n in candidate.pending if meets[n]), None)
                if name is not None:
                    self._advance(candidate, name, row)
                    if candidate.next == len(self.steps) and not self._trailing():
                        completed.append(candidate)
                        continue
            kept.append(candidate)
        if completed:
            first = min(completed, key=lambda c: (c.start_ms, c.order))
            self.candidates = []
            self.resume_after = ts
            return [*found, Found(first.rows, ts)]
        self.candidates = kept
        if self.resume_after is None or ts > self.resume_after:
            first_step = self.steps[0]
            name = next((n for n in first_step.names if meets[n]), None)
            if name is not None:
                candidate = Candidate(ts, self.created, 0, {}, first_step.names)
                self.created += 1
                self._advance(candidate, name, row)
                if candidate.next == len(self.steps) and not self._trailing():   # a one-step pattern
                    self.candidates = []
                    self.resume_after = ts
                    return [*found, Found(candidate.rows, ts)]
                self.candidates.append(candidate)
        return found
