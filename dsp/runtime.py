"""What every runtime of a node offers the node service (services.node): the shared runtime
(dsp.shared, the parts fed from the node's one stream) and the Spark query manager it hands the
plans it cannot evaluate itself (dsp.manager: adaptive smoothing, mote quality)."""

from __future__ import annotations

from typing import Protocol

from base.part_spec import PartSpec
from base.plan import Plan
from dsp.kafka_sink import BatchHook
from dsp.manager import ManagedQuery


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
