"""Who calls, and what each caller may do: bearer tokens bound to a principal and its roles.

Pure rules, no I/O, in the bottom layer so that every layer shares them: the MDR stores the token
records, the planner checks readers lists, services.auth enforces the rules on every gRPC call and
the dashboard on every request. A token is 32 random bytes, shown once when made and stored only
as its SHA-256: a secret of that entropy needs no slow hash (there is nothing to guess), as with
GitHub's and Kubernetes' bearer tokens.

Roles (docs/security.md):
  user      submit queries, and list, read and cancel its own
  operator  also list and read every query, and a node's views, queries and status; suspend and
            resume a node's parts
  service   what the placement service does to nodes: deploy, cancel, export and revoke
  admin     everything, and every view (readers lists do not bind it)
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
from dataclasses import dataclass

ROLES = ("user", "operator", "service", "admin")
TOKEN_PREFIX = "hifi_"
PRINCIPAL_RE = re.compile(r"[A-Za-z][A-Za-z0-9_.@-]{0,63}$")

# The role each gRPC method needs (admin may call all). Health checks and reflection are open:
# they say only whether a server is up and what its API is.
METHOD_ROLES = {
    "/hifi.Placement/Submit": "user",
    "/hifi.Placement/Cancel": "user",       # and only its own query, but for an operator (the servicer)
    "/hifi.Placement/List": "user",         # only its own queries, but for an operator
    "/hifi.Placement/Results": "user",      # only its own query, but for an operator
    "/hifi.Placement/Listing": "user",      # the views it may read, the queries it may touch (the servicer)
    "/hifi.Node/Deploy": "service",
    "/hifi.Node/Cancel": "service",
    "/hifi.Node/Suspend": "operator",
    "/hifi.Node/Resume": "operator",
    "/hifi.Node/ListViews": "operator",
    "/hifi.Node/ListQueries": "operator",
    "/hifi.Node/Status": "operator",
}
OPEN_METHOD_PREFIXES = ("/grpc.health.v1.Health/", "/grpc.reflection.")

# roles that include another's rights (admin includes all)
IMPLIED = {"service": {"operator", "user"}, "operator": {"user"}, "user": set()}


class IdentityError(ValueError):
    """A malformed principal, role or token record."""


@dataclass(frozen=True)
class Identity:
    """An authenticated caller."""

    principal: str
    roles: frozenset[str]

    def has(self, role: str) -> bool:
        return "admin" in self.roles or role in self.roles or any(role in IMPLIED.get(r, ()) for r in self.roles)

    def may_touch(self, owner: str) -> bool:
        """Whether it may see, read or cancel a query `owner` submitted: its own, or any when an
        operator or admin."""
        return owner == self.principal or self.has("operator")

    def may_read(self, readers: tuple[str, ...] | list[str]) -> bool:
        """Whether a view whose readers are `readers` (principals, `role:NAME`, or `*`) is open to it."""
        return "admin" in self.roles or readable_by(readers, self.principal, self.roles)


# Who may read a part's intermediate export (a shared partial a parent reads, e.g. producer_<hash>):
# its rows are a protected source's, partly aggregated. Nodes read them over Kafka and the planner
# reuses them by plan, neither through a readers check; a user may not name them in a query.
INTERNAL_READERS = ("role:operator",)

# The topology itself: its standing views are planned with every right (its file is the operator's).
SYSTEM = Identity("topology", frozenset({"admin"}))


def readable_by(readers: tuple[str, ...] | list[str], principal: str, roles: frozenset[str] | set[str] = frozenset()
                ) -> bool:
    """A readers list admits everyone (`*`), the principal by name, or one of its roles (`role:NAME`)."""
    return "*" in readers or principal in readers or any(f"role:{r}" in readers for r in roles)


@dataclass(frozen=True)
class TokenRecord:
    """What the MDR keeps of a token (never the token itself)."""

    principal: str
    roles: tuple[str, ...]
    created_ms: int
    expires_ms: int = 0   # 0: never

    def expired(self, now_ms: int) -> bool:
        return bool(self.expires_ms) and now_ms >= self.expires_ms

    def identity(self) -> Identity:
        return Identity(self.principal, frozenset(self.roles))

    def to_json(self) -> str:
        return json.dumps({"principal": self.principal, "roles": list(self.roles), "created_ms": self.created_ms,
                           "expires_ms": self.expires_ms})

    @classmethod
    def from_json(cls, text: str) -> TokenRecord:
        try:
            found = json.loads(text)
            return cls(str(found["principal"]), tuple(str(r) for r in found["roles"]), int(found["created_ms"]),
                       int(found.get("expires_ms", 0)))
        except (ValueError, KeyError, TypeError) as exc:
            raise IdentityError(f"a malformed token record: {exc}") from None


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def checked_principal(name: str) -> str:
    if not PRINCIPAL_RE.match(name):
        raise IdentityError(f"a principal is a letter then up to 63 letters, digits or _.@- (got {name!r})")
    return name


def checked_readers(readers: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """A readers list as a user gives it: `*`, `role:<a role>` or principals (a string is not a
    list: `alice` would be five principals). Who must name at least one says so (`named_readers`)."""
    if isinstance(readers, str):
        raise IdentityError(f"readers are a list of readers, not the text {readers[:40]!r}")
    for reader in readers:
        if reader == "*":
            continue
        if reader.startswith("role:"):
            if reader.removeprefix("role:") not in ROLES:
                raise IdentityError(f"reader {reader!r}: a role is one of {', '.join(ROLES)}")
            continue
        checked_principal(reader)
    return tuple(dict.fromkeys(readers))


def named_readers(readers: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """Who may read a view, where that must be said (a standing view's readers, an export's
    record): a valid readers list naming at least one (fail closed: an empty one is no one, and
    an older reader of it took it for everyone).

    >>> named_readers(["role:operator"])
    ('role:operator',)
    >>> named_readers([])
    Traceback (most recent call last):
    ...
    wire.identity.IdentityError: a readers list names at least one reader (`*`: everyone, `role:operator`, a principal)
    """
    if not readers:
        raise IdentityError("a readers list names at least one reader (`*`: everyone, `role:operator`, a principal)")
    return checked_readers(readers)


# A query's lane on constrained uplinks (dsp.runtime.uplink: a lane, and its spool, per priority): operators
# may put a query ahead of the topology's views (alerts run at up to a few); a user only behind them.
OPERATOR_PRIORITIES = range(-100, 101)
USER_PRIORITIES = range(-100, 1)


def checked_priority(caller: Identity, priority: int) -> int:
    """A query's priority as `caller` may give it.

    >>> checked_priority(Identity("ann", frozenset({"user"})), -5)
    -5
    >>> try:
    ...     checked_priority(Identity("ann", frozenset({"user"})), 7)
    ... except IdentityError as refused:
    ...     print(refused)
    priority 7: a user's query runs at -100 to 0 (an operator's up to 100)
    >>> checked_priority(Identity("olga", frozenset({"operator"})), 7)
    7
    """
    allowed = OPERATOR_PRIORITIES if caller.has("operator") else USER_PRIORITIES
    if priority not in allowed:
        who = "an operator's" if caller.has("operator") else "a user's"
        raise IdentityError(f"priority {priority}: {who} query runs at {allowed[0]} to {allowed[-1]}"
                            + ("" if caller.has("operator") else f" (an operator's up to {OPERATOR_PRIORITIES[-1]})"))
    return priority


def checked_roles(roles: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    unknown = [r for r in roles if r not in ROLES]
    if unknown or not roles:
        raise IdentityError(f"roles are {', '.join(ROLES)} (got {', '.join(roles) or 'none'})")
    return tuple(dict.fromkeys(roles))


def required_role(method: str) -> str | None:
    """The role `method` (a gRPC full method name) needs; None: open to anyone. A method no
    rule names needs admin (a new method is closed until someone decides who may call it)."""
    if method.startswith(OPEN_METHOD_PREFIXES):
        return None
    return METHOD_ROLES.get(method, "admin")


def authorize(method: str, identity: Identity | None) -> tuple[bool, str]:
    """(allowed, why not): None for an unauthenticated caller."""
    role = required_role(method)
    if role is None:
        return True, ""
    if identity is None:
        return False, "unauthenticated"
    if identity.has(role):
        return True, ""
    return False, f"{identity.principal} may not call {method.rsplit('/', 1)[-1]}: it needs the {role} role"
