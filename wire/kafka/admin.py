"""Topics made and deleted (kafka-python's admin client). Topic names are built by wire.topics
(DESIGN §3), never by hand."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

from kafka import KafkaAdminClient
from kafka.admin import NewTopic
from kafka.errors import TopicAlreadyExistsError

from wire.kafka.config import client_security


def ensure_topics(bootstrap: str, topics: Sequence[str], partitions: int = 1) -> None:
    """Create the topics that do not exist yet (idempotent)."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="hifi-admin", **client_security())
    try:
        existing = set(admin.list_topics())
        missing = [t for t in dict.fromkeys(topics) if t not in existing]
        if missing:
            with contextlib.suppress(TopicAlreadyExistsError):
                admin.create_topics([NewTopic(t, partitions, 1) for t in missing])
    finally:
        admin.close()


def delete_topics(bootstrap: str, topics: Sequence[str]) -> list[str]:
    """Delete those of `topics` that exist; those of `topics` gone now (deleted, or there was none).
    Raises KafkaError when the broker refuses or cannot be reached. A process's own producers forget
    them first: wire.kafka.clients.delete_topics."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="hifi-admin", **client_security())
    try:
        existing = set(admin.list_topics())
        present = [t for t in dict.fromkeys(topics) if t in existing]
        if present:
            admin.delete_topics(present)
        return list(dict.fromkeys(topics))
    finally:
        admin.close()
