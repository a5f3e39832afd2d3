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

    def ids_of(self, kind: str, nested: bool = False) -> list[str]:
        """The ids of the `<kind>:<id>` keys there are, sorted (`nested`: ids may hold a ":"; else
        keys beside them, `node:<id>:alive`, are not ids). Who writes a record is its key's owner
        (the writers' Redis rules), so the records are found by their keys, not listed in a shared
        set any writer could change (a node removing another's entry)."""
        head = self.k(kind) + ":"
        found = (key[len(head):] for key in self.r.scan_iter(match=f"{head}*", count=1000))
        return sorted({i for i in found if nested or ":" not in i})

    def _announce(self, pipe: redis.client.Pipeline, kind: str, op: str, ident: str) -> None:
        """Append a change to `changes` in the same transaction (nodes and the dashboard watch it)."""
        pipe.xadd(self.k("changes"), {"kind": kind, "op": op, "id": ident, "ms": now_ms()},
                  maxlen=CHANGE_STREAM_MAXLEN, approximate=True)
