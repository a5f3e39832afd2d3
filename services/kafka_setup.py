"""Puts a topology's Kafka users and ACLs (services.kafka_acls) on a broker, idempotently.

One code for both brokers: `hifi up`'s embedded one (services.embedded, as its admin over
SASL_SSL) and compose's (`hifi kafka-setup`, the `kafka-setup` service, on the broker's loopback
listener). A user's SCRAM credential is set anew (the same password: nothing changes for its
clients); an ACL the broker holds already is added once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from glue.topology import Topology
from services.kafka_acls import Acl, acls
from wire.errors import HiFiError

ITERATIONS = 8192   # SCRAM's PBKDF2 rounds (Kafka's minimum 4096)
TIMEOUT_S = 30.0


class KafkaSetupError(HiFiError):
    """The broker refused a user or an ACL; the message names which and why."""


def binding(rule: Acl) -> AclBinding:
    pattern = ResourcePatternType.PREFIXED if rule.prefixed else ResourcePatternType.LITERAL
    resource = ResourceType.GROUP if rule.resource == "group" else ResourceType.TOPIC
    return AclBinding(resource, rule.name, pattern, f"User:{rule.principal}", "*",
                      AclOperation[rule.operation.upper()], AclPermissionType.ALLOW)


def apply(client: Mapping[str, Any], topology: Topology, passwords: Mapping[str, str]) -> int:
    """Set the SCRAM credential of every user in `passwords` and add `acls(topology)` on the broker
    `client` (librdkafka's settings) reaches; the number of ACLs."""
    admin = AdminClient(dict(client))
    upserts = [UserScramCredentialUpsertion(user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, ITERATIONS),
                                            password.encode()) for user, password in passwords.items()]
    if upserts:
        _wait(admin.alter_user_scram_credentials(upserts), "user")
    bindings = list(dict.fromkeys(binding(rule) for rule in acls(topology)))
    _wait(admin.create_acls(bindings), "ACL")
    return len(bindings)


def _wait(futures: Mapping[Any, Any], what: str) -> None:
    for key, future in futures.items():
        try:
            future.result(timeout=TIMEOUT_S)
        except Exception as exc:   # librdkafka's KafkaException: the broker's reason
            raise KafkaSetupError(f"the broker refused {what} {key}: {exc}") from exc
