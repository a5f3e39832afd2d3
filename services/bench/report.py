"""How benchmarks report: figure tables and percentiles. Pure."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar


class _OnAPath(Protocol):
    path: str   # "driver" or "spark"


Run = TypeVar("Run", bound=_OnAPath)


def figures_table(rows: list[tuple[str, str]]) -> str:
    """A benchmark's figures: names padded to one width, then values."""
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name.ljust(width)}  {value}" for name, value in rows)


def detection_rows(label: str, staged: int, detected: int, right: int, found: int) -> list[tuple[str, str]]:
    """A detector's staged / detected, precision and recall rows (the event and join benches).

    >>> detection_rows("fire", 4, 5, 4, 3)[1:]
    [('fire: precision', '0.800 (4 of 5)'), ('fire: recall', '0.750 (3 of 4)')]
    """
    def fraction(part: int, whole: int) -> str:
        return f"{'n/a' if not whole else f'{part / whole:.3f}'} ({part} of {whole})"

    return [(f"{label}: staged / detected", f"{staged} / {detected}"),
            (f"{label}: precision", fraction(right, detected)), (f"{label}: recall", fraction(found, staged))]


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0-100, inclusive method) of `values`; None for none."""
    if not values:
        return None
    if len(values) == 1:
        return float(values[0])
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def paired(runs: Sequence[Run], key: Callable[[Run], Any]) -> list[tuple[Any, Run, Run]]:
    """(key, the driver's run, Spark's run) per key, in the order keys first came; a key lacking
    either path is left out (the two-path benches: batches, past).

    >>> from types import SimpleNamespace as R
    >>> runs = [R(n=1, path="driver"), R(n=1, path="spark"), R(n=2, path="driver")]
    >>> [(k, d.path, s.path) for k, d, s in paired(runs, lambda r: r.n)]
    [(1, 'driver', 'spark')]
    """
    by_key: dict[Any, dict[str, Run]] = {}
    for run in runs:
        by_key.setdefault(key(run), {})[run.path] = run
    return [(k, paths["driver"], paths["spark"]) for k, paths in by_key.items() if {"driver", "spark"} <= set(paths)]
