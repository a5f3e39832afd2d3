"""An edge node's sensor proxy (Fjords): tells the node's motes, over hifi.control.<node>, which
samples its running query parts can use (glue.proxy), whenever that changes, and records what each
mote was told in the MDR (`hifi motes` shows it). The agents follow the topic (edge.control)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable

from dsp.plan import Plan
from glue.proxy import mote_fields, mote_rules
from mdr.repository import MDR, now_ms
from wire import bus
from wire.receptor_settings import ReceptorSettings, Rule, describe
from wire.topics import control_topic

log = logging.getLogger("hifi.proxy")


class SensorProxy:
    def __init__(self, node_id: str, bootstrap: str, mdr: MDR) -> None:
        self.node_id, self.bootstrap, self.mdr = node_id, bootstrap, mdr
        self.version = 0
        self._told: tuple[dict[str, Rule], dict[str, tuple[str, ...]]] | None = None
        self._lock = threading.Lock()

    def motes(self) -> list[str]:
        return sorted(rid for rid, info in self.mdr.receptors().items()
                      if info.get("kind") == "mote" and info.get("node") == self.node_id)

    def update(self, plans: Iterable[Plan]) -> ReceptorSettings | None:
        """Publish the motes' rules for the parts `plans` if they changed; the settings sent, if any."""
        motes = self.motes()
        if not motes:
            return None
        plans = list(plans)
        rules, fields = mote_rules(plans, motes), mote_fields(plans, motes)
        with self._lock:
            if (rules, fields) == self._told:
                return None
            self.version = max(now_ms(), self.version + 1)   # a restarted node's settings are newer still
            settings = ReceptorSettings(self.node_id, self.version, now_ms(), rules, fields)
            key, value = settings.encode()
            producer = bus.shared_producer(self.bootstrap)
            bus.deliver(producer, [producer.send(control_topic(self.node_id), key=key, value=value)])
            self._told = (rules, fields)
            self.mdr.put_told(self.node_id, {mote: {"rule": describe(rule), "fields": list(fields[mote]),
                                                    "version": self.version} for mote, rule in rules.items()})
        log.info("node %s: told its motes (version %d): %s", self.node_id, self.version,
                 "; ".join(f"{mote} {describe(rule)}, {', '.join(fields[mote]) or 'every quantity'}"
                           for mote, rule in rules.items()))
        return settings
