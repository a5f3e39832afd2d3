"""The names a compose deployment gives its services and their secrets. Pure.

Shared by the compose file (services.compose) and the broker's users and ACLs
(services.kafka_acls), which must agree on them.

>>> node_service("door1"), secret_variable("REDIS", "node-door1")
('node-door1', 'HIFI_REDIS_PASSWORD_NODE_DOOR1')
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from wire.errors import HiFiError

# The compose services and TLS names HiFi itself takes: a node of one of these ids would be given
# that service's certificate (`placement.key` signs every part) or collide with its container
SERVICES = ("placement", "dashboard", "kafka", "kafka-setup", "redis", "agents", "certs", "prometheus", "grafana",
            "ca", "spark-master", "spark-workers", "admin", "operator")


class DeploymentNameError(HiFiError, ValueError):
    """A topology whose names a deployment cannot give each its own (one line: which, and why)."""


def node_service(node_id: str) -> str:
    return f"node-{node_id}"


def secret_variable(kind: str, user: str) -> str:
    """The environment variable of `user`'s `kind` (REDIS, KAFKA) password."""
    return f"HIFI_{kind}_PASSWORD_" + re.sub(r"[^A-Z0-9]", "_", user.upper())


def name_problems(node_ids: Iterable[str], users: Iterable[str]) -> list[str]:
    """Why the deployment's names would collide: a node id that is a service's own name, two
    users (nodes, readers, services) whose password variables are one (`a-b` and `a_b`, `Alice`
    and `alice`).

    >>> name_problems(["door1", "placement"], [])
    ["node id 'placement' is the name of HiFi's own placement service: choose another"]
    >>> for problem in name_problems([], ["node-a-b", "node-a_b", "alice", "Alice"]):
    ...     print(problem)
    users 'node-a-b' and 'node-a_b' would share one password variable (..._NODE_A_B): rename one
    users 'alice' and 'Alice' would share one password variable (..._ALICE): rename one
    """
    problems = [f"node id {n!r} is the name of HiFi's own {n} service: choose another"
                for n in node_ids if n.lower() in SERVICES]
    seen: dict[str, str] = {}
    for user in users:
        variable = secret_variable("KAFKA", user).removeprefix("HIFI_KAFKA_PASSWORD")
        other = seen.setdefault(variable, user)
        if other != user:
            problems.append(f"users {other!r} and {user!r} would share one password variable (...{variable}): "
                            f"rename one")
    return problems
