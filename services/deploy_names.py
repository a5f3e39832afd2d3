"""The names a compose deployment gives its services and their secrets. Pure.

Shared by the compose file (services.compose) and the broker's users and ACLs
(services.kafka_acls), which must agree on them.

>>> node_service("door1"), secret_variable("REDIS", "node-door1")
('node-door1', 'HIFI_REDIS_PASSWORD_NODE_DOOR1')
"""

from __future__ import annotations

import re


def node_service(node_id: str) -> str:
    return f"node-{node_id}"


def secret_variable(kind: str, user: str) -> str:
    """The environment variable of `user`'s `kind` (REDIS, KAFKA) password."""
    return f"HIFI_{kind}_PASSWORD_" + re.sub(r"[^A-Z0-9]", "_", user.upper())
