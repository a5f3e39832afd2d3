"""The receptors' side of the control path: the latest settings each edge node's sensor proxy
published (wire.receptor_settings), followed by the agent that drives its motes.

A record that does not decode, or names another node than its topic's, is refused and counted:
a mote keeps the settings it had. Settings never go back to an older version.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from wire.kafka import admin, consumers
from wire.receptor_settings import ALWAYS, ReceptorSettings, Rule
from wire.topics import control_topic

log = logging.getLogger(__name__)
CONTROL_FETCH_WAIT_MS = 50


class ControlFollower:
    def __init__(self, bootstrap: str, nodes: Sequence[str]) -> None:
        self._node_of = {control_topic(node): node for node in nodes}
        admin.ensure_topics(bootstrap, list(self._node_of))
        # a fetch the broker holds open ends within one tick: new settings arrive at the next poll
        self._consumer = consumers.make_consumer(bootstrap, fetch_max_wait_ms=CONTROL_FETCH_WAIT_MS)
        partitions = consumers.partitions_of(self._consumer, list(self._node_of))
        self._consumer.assign(partitions)
        self._consumer.seek_to_beginning(*partitions)
        self.settings: dict[str, ReceptorSettings] = {}
        self.refused = 0

    def poll(self) -> None:
        """Take what arrived since the last call, without waiting (the agent calls it every tick)."""
        for records in self._consumer.poll(timeout_ms=0).values():
            for record in records:
                node = self._node_of.get(record.topic, "")
                try:
                    settings = ReceptorSettings.decode(record.value or b"")
                    if settings.node != node:
                        raise ValueError(f"settings of node {settings.node!r} on {record.topic}")
                except ValueError as exc:
                    self.refused += 1
                    log.warning("receptor settings refused at %s offset %d: %s", record.topic, record.offset, exc)
                    continue
                current = self.settings.get(node)
                if current is None or settings.version >= current.version:
                    self.settings[node] = settings

    def rule(self, node: str, receptor_id: str) -> Rule:
        settings = self.settings.get(node)
        return settings.rule(receptor_id) if settings is not None else ALWAYS

    def sent(self, node: str, receptor_id: str, values: dict[str, float]) -> dict[str, float]:
        settings = self.settings.get(node)
        return settings.sent(receptor_id, values) if settings is not None else values

    def version(self, node: str) -> int:
        settings = self.settings.get(node)
        return settings.version if settings is not None else 0

    def close(self) -> None:
        self._consumer.close()
