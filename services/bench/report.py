"""How benchmarks report: figure tables and percentiles. Pure."""

from __future__ import annotations

import statistics
from collections.abc import Sequence


def figures_table(rows: list[tuple[str, str]]) -> str:
    """A benchmark's figures: names padded to one width, then values."""
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name.ljust(width)}  {value}" for name, value in rows)


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0-100, inclusive method) of `values`; None for none."""
    if not values:
        return None
    if len(values) == 1:
        return float(values[0])
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]
