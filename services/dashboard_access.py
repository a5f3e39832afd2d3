"""Who sees what on the dashboard: login sessions (a cookie for a token, in memory) and the part
of a snapshot a caller may see."""

from __future__ import annotations

import secrets
import threading
import time

from wire.identity import INTERNAL_READERS, Identity

SESSION_COOKIE = "hifi_session"


SESSION_S = 12 * 3600   # a session ends after this, or as soon as its token is removed or expires


class Sessions:
    """Login sessions: a random id (the cookie) -> the token it was opened with. Kept in memory: a
    restarted dashboard asks its users to log in again."""

    def __init__(self) -> None:
        self._sessions: dict[str, tuple[str, float]] = {}
        self._lock = threading.Lock()

    def open(self, token: str) -> str:
        session = secrets.token_urlsafe(32)
        with self._lock:
            now = time.monotonic()
            self._sessions = {k: v for k, v in self._sessions.items() if v[1] > now}
            self._sessions[session] = (token, now + SESSION_S)
        return session

    def token(self, session: str) -> str:
        with self._lock:
            found = self._sessions.get(session)
        return found[0] if found and found[1] > time.monotonic() else ""

    def close(self, session: str) -> None:
        with self._lock:
            self._sessions.pop(session, None)


def visible_to(snapshot: dict, identity: Identity) -> dict:
    """The part of a snapshot a caller may see: its own queries (an operator: all), the views it
    may read and the events of those (an alert's row is its view's; a dead letter is the
    operators'); the hierarchy's health is everyone's, each node's views in it but those it may
    read left out (a view's name says what is watched: `people_in_danger`)."""
    readers = {f"{v['node']}.{v['name']}": v["readers"] for v in snapshot["views"]}

    def readable(node: str, name: str) -> bool:
        return identity.may_read(readers.get(f"{node}.{name}", INTERNAL_READERS))

    return {**snapshot,
            "nodes": [{**n, "views": [v for v in n.get("views", ()) if readable(n["id"], v)]}
                      for n in snapshot.get("nodes", ())],
            "events": [e for e in snapshot["events"] if identity.may_read(readers.get(e.get("view", ""),
                                                                                      INTERNAL_READERS))],
            "queries": [q for q in snapshot["queries"] if identity.may_touch(q["principal"])],
            "views": [{k: v for k, v in view.items() if k != "readers"} for view in snapshot["views"]
                      if identity.may_read(readers[f"{view['node']}.{view['name']}"])]}
