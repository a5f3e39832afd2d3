"""What one principal may hold at the placement service: running queries (views included) and
open result streams, by its most generous role. Beyond them a call is refused with
RESOURCE_EXHAUSTED and every other caller is still served: a result stream holds one of the
service's worker threads while it is open, so without a cap one user's streams stopped
placement for everyone (issue 39)."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from wire.identity import Identity


@dataclass(frozen=True)
class Quota:
    queries: int   # running queries a principal may own; 0: no limit
    streams: int   # result streams it may have open at once; 0: no limit


# by role, the most generous that applies (an admin has none); the placement service has 32
# worker threads, so a user's streams leave most of them to others
QUOTAS: dict[str, Quota] = {"user": Quota(queries=20, streams=4), "operator": Quota(queries=200, streams=16),
                            "admin": Quota(queries=0, streams=0)}


def quota_role(caller: Identity) -> str:
    """The role whose quota `caller` has: its most generous (a caller with none counts as a user).

    >>> quota_role(Identity("ann", frozenset({"user"}))), quota_role(Identity("root", frozenset({"admin"})))
    ('user', 'admin')
    """
    return next((role for role in ("admin", "operator") if caller.has(role)), "user")


def quota_of(caller: Identity) -> Quota:
    return QUOTAS[quota_role(caller)]


def over_queries(caller: Identity, owner: str, running: int) -> str:
    """Why `owner` may not start another query while it runs `running` ("" when it may).

    >>> ann = Identity("ann", frozenset({"user"}))
    >>> over_queries(ann, "ann", 20)
    'ann runs 20 queries, the quota of role user: cancel one first (hifi cancel ID)'
    >>> over_queries(ann, "ann", 19), over_queries(Identity("root", frozenset({"admin"})), "ann", 500)
    ('', '')
    """
    limit = quota_of(caller).queries
    if not limit or running < limit:
        return ""
    return f"{owner} runs {running} queries, the quota of role {quota_role(caller)}: cancel one first (hifi cancel ID)"


def streams_refusal(caller: Identity) -> str:
    """What a caller at its quota of open result streams is told.

    >>> streams_refusal(Identity("ann", frozenset({"user"})))
    'ann has 4 result streams open, the quota of role user: close one first'
    """
    return (f"{caller.principal} has {quota_of(caller).streams} result streams open, the quota of role "
            f"{quota_role(caller)}: close one first")


class StreamSlots:
    """Result streams open per principal."""

    def __init__(self) -> None:
        self._open: dict[str, int] = {}
        self._lock = threading.Lock()

    def take(self, principal: str, limit: int) -> bool:
        """One more stream for `principal`, unless it has `limit` open (0: no limit)."""
        with self._lock:
            held = self._open.get(principal, 0)
            if limit and held >= limit:
                return False
            self._open[principal] = held + 1
            return True

    def give_back(self, principal: str) -> None:
        with self._lock:
            held = self._open.get(principal, 0) - 1
            if held > 0:
                self._open[principal] = held
            else:
                self._open.pop(principal, None)

    def held(self, principal: str) -> int:
        with self._lock:
            return self._open.get(principal, 0)
