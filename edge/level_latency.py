"""How long a reading takes to reach each level of the hierarchy: from its event time to the first
emit of the window that holds it, per level, with the windows a level never emitted counted as
missing (a window that never came out costs nothing in a percentile, so it is counted apart). Pure.

Inputs: the read-cycle lines of edge.agent's readings.jsonl, and per level the first emit of each
window at each node ({(node, window_start_ms): (emitted_ms, window_end_ms)}) read off the level's
view topics.

>>> tree = {"door": ["warehouse"], "warehouse": []}
>>> cycles = [{"t": 1_000, "node": "door", "reads": [["a", 1, 0.5]]}, {"t": 3_000, "node": "door", "reads": []}]
>>> level = level_latency("edge", {"door"}, {("door", 0): (2_500, 2_000)}, cycles, tree, 2_000, horizon_ms=4_000)
>>> level.reading_ms, level.close_ms, level.expected, level.missing
([1500], [500], 1, 0)
>>> level_latency("core", {"warehouse"}, {}, cycles, tree, 2_000, horizon_ms=4_000).missing
1
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

Emits = Mapping[tuple[str, int], tuple[int, int]]   # (node, window start ms) -> (first emit ms, window end ms)


@dataclass
class LevelLatency:
    level: str
    reading_ms: list[int] = field(default_factory=list)   # per reading: first emit of its window - its time
    close_ms: list[int] = field(default_factory=list)     # per window: first emit - its end
    expected: int = 0     # windows that held a reading and closed before the horizon
    missing: int = 0      # of those, never emitted at this level


def window_length_ms(emits: Emits, default_ms: int) -> int:
    """The level's window length, read off what it emitted (the most common end - start)."""
    lengths = Counter(end - start for (_, start), (_, end) in emits.items())
    return lengths.most_common(1)[0][0] if lengths else default_ms


def level_latency(level: str, nodes: set[str], emits: Emits, cycles: Iterable[dict[str, Any]],
                  ancestors: Mapping[str, Sequence[str]], window_ms: int, horizon_ms: int,
                  min_strength: float = 0.0) -> LevelLatency:
    """`nodes`: the level's nodes (those exporting its view); `ancestors`: each edge node's chain up
    to the root (the node itself not included). A reading belongs at this level to the node of
    `nodes` that is its edge node or one of its ancestors.
    Windows are tumbling, `window_ms` long, aligned to the epoch; only those that end by
    `horizon_ms` and hold a reading at least `min_strength` strong are expected."""
    found = LevelLatency(level)
    held: dict[tuple[str, int], list[int]] = {}
    for cycle in cycles:
        strong = [r for r in cycle["reads"] if r[2] >= min_strength]
        owner = next((n for n in (cycle["node"], *ancestors.get(cycle["node"], ())) if n in nodes), None)
        if not strong or owner is None:
            continue
        start = cycle["t"] // window_ms * window_ms
        if start + window_ms <= horizon_ms:
            held.setdefault((owner, start), []).extend([cycle["t"]] * len(strong))
    for key, times in sorted(held.items()):
        found.expected += 1
        emitted = emits.get(key)
        if emitted is None:
            found.missing += 1
            continue
        found.reading_ms.extend(emitted[0] - t for t in times)
        found.close_ms.append(emitted[0] - emitted[1])
    return found
