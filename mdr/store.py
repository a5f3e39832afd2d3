"""What every part of the MDR stands on: its Redis client, its key prefix and the change feed."""

from __future__ import annotations

import redis

from mdr.records import now_ms

CHANGE_STREAM_MAXLEN = 10_000


class Store:
    """Keys under one prefix of one Redis (mdr.repository documents their layout)."""

    r: redis.Redis
    p: str

    def k(self, *parts: str) -> str:
        return self.p + ":".join(parts)

    def _announce(self, pipe: redis.client.Pipeline, kind: str, op: str, ident: str) -> None:
        """Append a change to `changes` in the same transaction (nodes and the dashboard watch it)."""
        pipe.xadd(self.k("changes"), {"kind": kind, "op": op, "id": ident, "ms": now_ms()},
                  maxlen=CHANGE_STREAM_MAXLEN, approximate=True)
