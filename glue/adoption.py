"""Re-parenting by adoption: who takes over a dead parent's parts, from where, and until when. Pure.

When an aggregation node is dead longer than the grace period (topology parameter `adopt_after`,
default 10 s after its heartbeat expired), its children move to another parent: the first live
`alternate` one of them names, else the nearest live ancestor (the HiFi paper's rule: it can read
every view below). The new parent *adopts* the dead node's parts — the same plans, reading the same
children's topics, writing the same output topics — so nothing above the move changes: the
grandparent's parts read the same streams, no query is re-planned, and a window is emitted once.

Every part's output topic is the contract. An adopted part reads its inputs from their beginning
(or from where its query started) and emits only windows the dead node had not emitted: those
starting at or after the resume point, read from the tail of its output topic (`resume_point`).
When the preferred parent returns, they swap at a window boundary `handback_at`: the adopter emits
windows starting before it and caps its progress markers there, the returned node emits those
starting at it or later and holds its markers at it until the adopter has drained; a window is
emitted by exactly one of them, and a parent's watermark never passes a window still to come.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from glue.topology import Topology
from wire.windows import duration_ms

DEFAULT_ADOPT_AFTER = "10 seconds"
HANDBACK_SLACK_MS = 10_000   # the boundary lies this far ahead: the adopter learns it (within a
                             # reconcile round, 2 s) before it can emit a window starting there


def adopt_after_ms(topology: Topology) -> int:
    """How long a parent stays dead before its children move (the `adopt_after` parameter)."""
    return duration_ms(str(topology.parameters.get("adopt_after", DEFAULT_ADOPT_AFTER)))


def candidates(topology: Topology, dead: str) -> list[str]:
    """Who may adopt the parts of `dead`, first choice first: the alternates its children name (in
    the topology's order), then its ancestors, nearest first; none for an edge node (its readings
    reach only it) or a node without children."""
    children = topology.children(dead)
    if topology.nodes[dead].tier == "edge" or not children:
        return []
    named = [a for child in children for a in topology.nodes[child].alternates if a != dead]
    return list(dict.fromkeys([*named, *topology.ancestors(dead)]))


def may_adopt(topology: Topology, node: str, dead: str) -> bool:
    """Whether `node` could ever adopt `dead` (what its MDR user may write: services.redis_acls)."""
    return node in candidates(topology, dead)


def adoptable_by(topology: Topology, node: str) -> list[str]:
    """The nodes `node` could ever adopt: those whose death it must watch for. An edge node under a
    parent with no alternates watches none, so its reconcile round reads no node records (32
    doors under one warehouse read 34 records each every 2 s: an eighth of the process's Python
    time, measured 2026-11-28).

    >>> from glue.topology import parse_topology
    >>> t = parse_topology('''
    ... name: t
    ... nodes:
    ...   - {id: hq, tier: core}
    ...   - {id: wh, tier: aggregation, parent: hq}
    ...   - {id: d1, tier: edge, parent: wh}
    ... ''', "t")
    >>> adoptable_by(t, "hq"), adoptable_by(t, "d1")
    (['wh'], [])
    """
    return [dead for dead in topology.nodes if may_adopt(topology, node, dead)]


def adopter(topology: Topology, dead: str, alive: Iterable[str]) -> str | None:
    """Who adopts the parts of `dead`: the first live one of its `candidates`; None when none lives."""
    live = set(alive)
    return next((n for n in candidates(topology, dead) if n in live), None)


@dataclass(frozen=True)
class TailBatch:
    """What `resume_point` needs of a message at the end of an output topic."""

    watermark_ms: int          # a progress marker's promise (0 for rows)
    times_ms: tuple[int, ...]  # the rows' values of the time column their readers order by


def resume_point(tail: Iterable[TailBatch]) -> int:
    """The first window start (or row time) an adopter may emit on a topic whose last messages are
    `tail`: past every marker's promise and every row already there. A batch emits every window
    that closed with its watermark, so rows at time t mean none later than t is still owed
    before it. 0 when the topic is empty."""
    point = 0
    for batch in tail:
        point = max(point, batch.watermark_ms, *(t + 1 for t in batch.times_ms))
    return point


def handback_at(now_ms: int, adopted_from: Mapping[str, int]) -> int:
    """The boundary at which a returned node takes its parts back: ahead of the wall clock by the
    slack, and never before where the adopter began."""
    return max(now_ms + HANDBACK_SLACK_MS, *adopted_from.values(), 0)
