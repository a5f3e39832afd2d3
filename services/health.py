"""The hierarchy's health as plain data, from what the MDR holds: one summary for `hifi status`
and the operations dashboard. Pure: no I/O, every input passed in.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import asdict, dataclass, field

from mdr.repository import MDR, Adoption, NodeRecord, QueryRecord

LAGGING_S = 120.0        # a node whose newest processed event is older than this is lagging
INPUT_LAGGING_S = 30.0   # ... as is one whose input waited this long for it (it falls behind)
STALE_GAUGES_S = 10.0    # ... as is one whose heartbeat lives but whose statistics stopped
SILENT_AFTER_S = 5.0     # a receptor with no read cycle in this long is silent
TRIAGING_S = 10.0        # a node whose reader left records out (Data Triage) this recently is triaging
TIER_ORDER = ("core", "aggregation", "edge")


@dataclass(frozen=True)
class NodeHealth:
    id: str
    tier: str
    parent: str
    state: str               # alive | triaging | lagging | failed | dead
    reason: str              # why it is not alive ("" when alive)
    rows_in: int
    input_rate: float
    lag_s: float
    rows_out: int
    dead_lettered: int
    late_rows: int
    queries: int
    views: tuple[str, ...] = ()
    archive_bytes: int = 0          # written to its archive since it started (dsp.runtime.archive)
    uplink_queued_bytes: int = 0    # waiting for its constrained uplink (dsp.runtime.uplink)
    triaged: int = 0                # records its raw reader left out undecoded (dsp.triage)

    def as_dict(self) -> dict:
        return asdict(self)


def node_health(record: NodeRecord, stats: Mapping[str, float], views: Sequence[str], now_ms: int) -> NodeHealth:
    lag_s = stats.get("lag_ms", 0.0) / 1000
    updated_ms = stats.get("updated_ms")
    failed = int(stats.get("failed_parts", 0))
    if not record.alive:
        state, reason = "dead", "no heartbeat"
    elif failed:
        state, reason = "failed", f"{failed} query part(s) failed (hifi queries names the cause)"
    elif updated_ms is not None and (now_ms - updated_ms) / 1000 > STALE_GAUGES_S:
        state, reason = "lagging", f"no statistics for {(now_ms - updated_ms) / 1000:.0f} s"
    elif lag_s > LAGGING_S:
        state, reason = "lagging", f"newest event {lag_s:.0f} s old"
    elif (input_lag_s := stats.get("input_lag_ms", 0.0) / 1000) > INPUT_LAGGING_S:
        state, reason = "lagging", f"its input waits {input_lag_s:.0f} s for it"
    elif now_ms - stats.get("triaged_at_ms", 0) < TRIAGING_S * 1000:
        state, reason = "triaging", (f"over its latency target: a sample of its input decoded "
                                     f"({int(stats.get('triaged', 0)):,} records left out so far; approximate "
                                     f"queries' windows say so)")
    else:
        state, reason = "alive", ""
    return NodeHealth(record.id, record.tier, record.parent, state, reason, int(stats.get("rows_in", 0)),
                      float(stats.get("input_rate", 0.0)), lag_s, int(stats.get("rows_out", 0)),
                      int(stats.get("dead", 0)), int(stats.get("late_rows", 0)), int(stats.get("running_queries", 0)),
                      tuple(views), int(stats.get("archive_bytes", 0)), int(stats.get("uplink_queued_bytes", 0)),
                      int(stats.get("triaged", 0)))


def query_health(remote: Mapping[str, Sequence[str]], parts: Mapping[str, Mapping[str, Mapping]],
                 status: str, dead: Collection[str] = ()) -> tuple[str, str]:
    """A query's status and cause: FAILED when any of its parts (`remote`: node -> part ids)
    is among its node's failed `parts` (node -> part id -> {error, restarts}); WAITING when a
    node it runs on is `dead` (its parts run again when the node is back: services.node); else
    `status`."""
    failed = [f"{node}/{part}: {parts[node][part].get('error', '')}" for node, ids in remote.items()
              for part in ids if part in parts.get(node, {})]
    if failed:
        return "FAILED", "; ".join(failed)
    down = sorted(node for node in remote if node in dead)
    if down:
        verb = "is" if len(down) == 1 else "are"
        return "WAITING", f"{', '.join(down)} {verb} dead; its parts run again when it is back"
    return status, ""


@dataclass(frozen=True)
class ReceptorRate:
    reads_per_s: float
    cycle_ms: float | None       # mean time between read cycles (None: no cycle in the span)
    weak_share: float | None     # readings below the cleaning threshold / readings
    silent: bool

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class CountsSample:
    """Cumulative per-receptor counts ({receptor: {reads, cycles, weak}}) at a time."""

    ms: int
    counts: Mapping[str, Mapping[str, int]] = field(default_factory=dict)


def receptor_rates(earlier: CountsSample, later: CountsSample) -> dict[str, ReceptorRate]:
    """Each receptor's rates between two samples of its cumulative counts."""
    seconds = max((later.ms - earlier.ms) / 1000, 1e-9)
    rates = {}
    for receptor, now in later.counts.items():
        before = earlier.counts.get(receptor, {})
        reads = now.get("reads", 0) - before.get("reads", 0)
        cycles = now.get("cycles", 0) - before.get("cycles", 0)
        weak = now.get("weak", 0) - before.get("weak", 0)
        rates[receptor] = ReceptorRate(reads / seconds, 1000 * seconds / cycles if cycles else None,
                                       weak / reads if reads else None,
                                       silent=cycles == 0 and seconds >= SILENT_AFTER_S)
    return rates


class RateWindow:
    """Successive samples of cumulative receptor counts; rates over the last `span_ms` or more
    (the oldest sample kept while younger than that). Not thread-safe: one per caller."""

    def __init__(self, span_ms: int = 5_000) -> None:
        self.span_ms = span_ms
        self.samples: list[CountsSample] = []

    def add(self, sample: CountsSample) -> dict[str, ReceptorRate]:
        self.samples.append(sample)
        while len(self.samples) > 2 and sample.ms - self.samples[1].ms >= self.span_ms:
            self.samples.pop(0)
        return receptor_rates(self.samples[0], sample) if len(self.samples) > 1 else {}


def tier_series(histories: Mapping[str, Sequence[Mapping[str, float]]], tiers: Mapping[str, str],
                since_ms: int) -> dict[str, list[dict[str, float]]]:
    """Per tier and whole second since `since_ms`: the tier's summed input rate (rows/s) and its
    largest lag (s), from each node's history samples ({ms, input_rate, lag_ms})."""
    buckets: dict[str, dict[int, dict[str, float]]] = {}
    for node, samples in histories.items():
        tier = tiers.get(node)
        if tier is None:
            continue
        for sample in samples:
            if sample["ms"] < since_ms:
                continue
            second = int(sample["ms"] // 1000)
            slot = buckets.setdefault(tier, {}).setdefault(second, {"rate": 0.0, "lag_s": 0.0, "nodes": 0})
            slot["rate"] += sample.get("input_rate", 0.0)
            slot["lag_s"] = max(slot["lag_s"], sample.get("lag_ms", 0.0) / 1000)
            slot["nodes"] += 1
    return {tier: [{"t": second * 1000, "rate": round(slot["rate"], 3), "lag_s": round(slot["lag_s"], 3)}
                   for second, slot in sorted(by_second.items())]
            for tier, by_second in buckets.items()}


def tiers_top_down(nodes: Sequence[NodeHealth]) -> list[NodeHealth]:
    """Core first, edges last; within a tier by id."""
    return sorted(nodes, key=lambda n: (TIER_ORDER.index(n.tier) if n.tier in TIER_ORDER else 9, n.id))


def moves(adoptions: Mapping[str, Adoption], clock: Callable[[int], str]) -> dict[str, tuple[str, str]]:
    """Node -> (the node it now reports to or runs at, a note) for every node a re-parenting moved
    (services.adoption): the children of an adopted node, and the adopted node itself."""
    found: dict[str, tuple[str, str]] = {}
    for node, adoption in adoptions.items():
        if adoption.drained_ms:
            note = f"taking its parts back from {adoption.adopter}"
        elif adoption.handback_ms:
            note = f"parts at {adoption.adopter}; takes them back from {clock(adoption.handback_ms)}"
        else:
            note = f"parts at {adoption.adopter} since {clock(adoption.since_ms)}"
        found[node] = (adoption.adopter, note)
        for child in adoption.children:
            if not adoption.drained_ms:
                found[child] = (adoption.adopter, f"moved to {adoption.adopter} ({node} dead)")
    return found


def query_states(mdr: MDR, queries: list[QueryRecord]) -> dict[str, tuple[str, str]]:
    """query id -> (status, cause): FAILED with the cause when a part of it failed on a node,
    WAITING when a node it runs on is dead (query_health)."""
    parts = mdr.part_states({node for q in queries for node in q.remote})
    records = mdr.nodes()
    alive = {n.id for n in records if n.alive}
    # a dead node whose parts a live node adopted (services.adoption) holds nothing up
    adopted = {node for node, found in mdr.adoptions().items() if found.adopter in alive and not found.drained_ms}
    dead = {n.id for n in records if not n.alive} - adopted
    return {q.id: query_health(q.remote, parts, q.status, dead) for q in queries}
