"""The supply-chain world the receptors observe: where every tag truly is at any time. Pure.

The minimal world: `tags` tags, each at one location (or "away") per dwell period; periods are
aligned to the epoch, so with a dwell that is a multiple of the query window a tag never changes
place inside a window. Placement is a deterministic function of (seed, tag, period).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

AWAY = "away"


@dataclass(frozen=True)
class World:
    seed: int
    tag_ids: tuple[str, ...]
    locations: tuple[str, ...]
    dwell_ms: int
    away_share: float = 0.2   # chance a tag is at no location during a period

    def _unit(self, tag_id: str, period: int) -> float:
        digest = hashlib.blake2b(f"{self.seed}:{tag_id}:{period}".encode(), digest_size=8).digest()
        return int.from_bytes(digest, "big") / 2**64

    def location_of(self, tag_id: str, t_ms: int) -> str:
        u = self._unit(tag_id, t_ms // self.dwell_ms)
        if u < self.away_share or not self.locations:
            return AWAY
        share = (u - self.away_share) / (1.0 - self.away_share)
        return self.locations[min(int(share * len(self.locations)), len(self.locations) - 1)]

    def tags_at(self, location: str, t_ms: int) -> list[str]:
        return [tag for tag in self.tag_ids if self.location_of(tag, t_ms) == location]


def sgtin_like_ids(count: int, company: int = 614141, item: int = 812345) -> tuple[str, ...]:
    """Tag ids in the pure-identity URI form of SGTIN (company prefix, item reference, serial)."""
    return tuple(f"urn:epc:id:sgtin:{company}.{item}.{serial}" for serial in range(1, count + 1))
