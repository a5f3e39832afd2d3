"""How every client of this process reaches the broker: its security settings, in kafka-python's
names and in librdkafka's."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

CLIENT_VARIABLES = ("HIFI_KAFKA_USERNAME", "HIFI_KAFKA_PASSWORD", "HIFI_KAFKA_CA")   # what client_security reads


def client_security(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """SASL/SCRAM settings of every client of this process, from HIFI_KAFKA_USERNAME and
    HIFI_KAFKA_PASSWORD (compose's broker takes no other client; services.kafka_acls says what each
    user may do), over TLS checked against the CA file HIFI_KAFKA_CA names, if any (as compose and
    the embedded broker do: services.embedded sets them); none without a user (a PLAINTEXT broker).

    >>> client_security({"HIFI_KAFKA_USERNAME": "agents", "HIFI_KAFKA_PASSWORD": "p", "HIFI_KAFKA_CA": "/t/ca.pem"})
    ... # doctest: +NORMALIZE_WHITESPACE
    {'security_protocol': 'SASL_SSL', 'sasl_mechanism': 'SCRAM-SHA-512', 'sasl_plain_username': 'agents',
     'sasl_plain_password': 'p', 'ssl_cafile': '/t/ca.pem'}
    >>> client_security({"HIFI_KAFKA_USERNAME": "agents"})["security_protocol"], client_security({})
    ('SASL_PLAINTEXT', {})
    """
    environ = os.environ if environ is None else environ
    user, ca = environ.get("HIFI_KAFKA_USERNAME", ""), environ.get("HIFI_KAFKA_CA", "")
    if not user:
        return {}
    return {"security_protocol": "SASL_SSL" if ca else "SASL_PLAINTEXT", "sasl_mechanism": "SCRAM-SHA-512",
            "sasl_plain_username": user, "sasl_plain_password": environ.get("HIFI_KAFKA_PASSWORD", ""),
            **({"ssl_cafile": ca} if ca else {})}


_LIBRDKAFKA_SECURITY = {"security_protocol": "security.protocol", "sasl_mechanism": "sasl.mechanism",
                        "sasl_plain_username": "sasl.username", "sasl_plain_password": "sasl.password",
                        "ssl_cafile": "ssl.ca.location"}


def librdkafka_client(bootstrap: str) -> dict[str, Any]:
    """librdkafka's settings to reach the broker as every client of the project does (its security)."""
    return {"bootstrap.servers": bootstrap, **{_LIBRDKAFKA_SECURITY[k]: v for k, v in client_security().items()}}
