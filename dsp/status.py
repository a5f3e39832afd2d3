"""What every runtime of a node offers and reports to the node service (services.node): the
shared runtime (dsp.runtime.shared, the parts fed from the node's one stream) and the Spark query
manager it hands the plans it cannot evaluate itself (dsp.spark.manager: adaptive smoothing, mote
quality) both run parts as `ManagedQuery`s and tell of each batch in a `BatchReport`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from base.part_spec import PartSpec
from base.plan import Plan
from base.plan_json import to_json

if TYPE_CHECKING:
    from pyspark.sql.streaming import StreamingQuery


@dataclass
class BatchReport:
    """What one micro-batch did, handed to the node for its runtime statistics."""

    batch_id: int
    rows_out: int = 0
    max_event_ms: int | None = None
    duration_s: float = 0.0      # running the micro-batch's plan and writing its rows
    emitted_ms: int = 0          # wall clock when its rows were written


BatchHook = Callable[[BatchReport], None]


@dataclass
class ManagedQuery:
    query_id: str
    plan: Plan | None               # None for a standalone data listener
    output_topic: str
    status: str = "running"         # running | suspended | failed | stopped
    error: str = ""
    restarts: int = 0               # after dying with an error (see DSPManager.queries)
    failed_at: float | None = None  # monotonic time it was found dead with an error
    started_at: float = 0.0         # monotonic time of its last (re)start
    start: Callable[[], StreamingQuery] | None = None
    handle: StreamingQuery | None = None
    sinks: list = field(default_factory=list)

    def plan_json(self) -> str:
        return to_json(self.plan) if self.plan is not None else ""


class Runtime(Protocol):
    def deploy(self, spec: PartSpec, on_batch: BatchHook | None = None) -> None:
        """Run the part; `on_batch` is told of each batch it emitted."""

    def suspend(self, query_id: str) -> None:
        """Stop feeding it, its state kept."""

    def resume(self, query_id: str) -> None:
        """Feed it again."""

    def cancel(self, query_id: str, drop_state: bool = True) -> None:
        """Stop it (a part it does not run: nothing)."""

    def stop_all(self) -> None:
        """Stop everything it runs, the state kept for the next start."""

    def plans(self) -> list[Plan]:
        """The plans deployed, whatever their state, with no side effect."""

    def queries(self) -> list[ManagedQuery]:
        """What it runs, with each one's status (a failed one may be restarted by asking)."""

    def progress(self) -> dict[str, float]:
        """Its "input_rate" (rows/s) and "late_rows"."""
