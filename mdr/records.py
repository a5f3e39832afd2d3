"""What the MDR's keys hold, as values (mdr.repository documents the key layout)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

HISTORY_LENGTH = 900   # samples per node: 15 minutes at the nodes' one-second gauges


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True)
class NodeRecord:
    id: str
    tier: str
    parent: str
    alternates: tuple[str, ...]
    address: str
    alive: bool
    last_heartbeat_ms: int | None
    capabilities: dict[str, Any] = field(default_factory=dict)
    started_ms: int | None = None   # when the node's current process started
    starts: int = 0                 # how many processes have registered as it (a restart adds one)


@dataclass(frozen=True)
class ViewRecord:
    name: str
    node: str
    topic: str
    window: str
    definition: str
    plan: str
    columns: tuple[tuple[str, str], ...]
    readers: tuple[str, ...]
    exported_ms: int

    @property
    def key(self) -> str:
        return f"{self.node}.{self.name}"

@dataclass(frozen=True)
class QueryRecord:
    id: str
    text: str
    root: str
    remote: dict[str, list[str]]
    status: str
    submitted_ms: int
    result_topic: str = ""
    explain: str = ""
    columns: tuple[str, ...] = ()
    # the placement drawn: [{node, role, query_id, export_as, reused}], leaves first
    tasks: tuple[dict[str, Any], ...] = ()
    principal: str = ""   # who submitted it (its results and its cancel are theirs)
    until_ms: int = 0     # `--until`: the placement cancels it once the windows before have gone out


@dataclass(frozen=True)
class Adoption:
    node: str                      # the dead (or returning) node
    adopter: str                   # where its parts run meanwhile
    since_ms: int
    children: tuple[str, ...]      # the nodes that moved to the adopter
    parts: dict[str, int]          # query id -> the first window start the adopter emits of it
    handback_ms: int | None = None  # the node emits windows from here on, the adopter before
    drained_ms: int | None = None   # when the adopter had emitted everything before the hand-back
