"""An edge node's sensor proxy (Fjords): tells the node's motes, over hifi.control.<node>, which
samples its running query parts can use (glue.proxy), whenever that changes, and records what each
mote was told in the MDR (`hifi motes` shows it). The agents follow the topic (edge.control)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable

from base.plan import Plan
from glue.proxy import mote_fields, mote_rules
from mdr.repository import MDR, now_ms
from wire.kafka import clients, producers
from wire.receptor_settings import ReceptorSettings, Rule, describe
from wire.topics import control_topic

log = logging.getLogger("hifi.proxy")

EXPECTED_FOR_S = 60.0     # an expected part not deployed by then is forgotten (its query failed elsewhere)
OBEY_TIMEOUT_S = 10.0     # how long a prepare waits for the motes to obey (agent tick + data listener batch: ~2 s)
SILENT_AFTER_MS = 5_000   # no sensor batch read for this long: no mote is sending, nothing to wait for


class SensorProxy:
    def __init__(self, node_id: str, bootstrap: str, mdr: MDR) -> None:
        self.node_id, self.bootstrap, self.mdr = node_id, bootstrap, mdr
        self.version = 0
        self._told: tuple[dict[str, Rule], dict[str, tuple[str, ...]]] | None = None
        self._expected: dict[str, tuple[Plan, float]] = {}   # query id -> (plan, forgotten at, monotonic)
        self._lock = threading.Lock()

    def expect(self, query_id: str, plan: Plan) -> None:
        """Count `plan` among the parts the motes serve until it is deployed (`forget`) or for
        EXPECTED_FOR_S."""
        with self._lock:
            self._expected[query_id] = (plan, time.monotonic() + EXPECTED_FOR_S)

    def forget(self, query_id: str) -> None:
        with self._lock:
            self._expected.pop(query_id, None)

    def wait_obeyed(self, version: int) -> bool:
        """Wait until the motes' batches obey settings `version` (or newer); False when they did
        not within OBEY_TIMEOUT_S. Returns at once when no sensor batch was read lately."""
        deadline = time.monotonic() + OBEY_TIMEOUT_S
        while True:
            obeyed, read_ms = self.mdr.obeyed(self.node_id)
            if obeyed >= version or now_ms() - read_ms > SILENT_AFTER_MS:
                return True
            if time.monotonic() > deadline:
                log.warning("node %s: its motes did not confirm settings version %d in %.0f s (newest obeyed: %d)",
                            self.node_id, version, OBEY_TIMEOUT_S, obeyed)
                return False
            time.sleep(0.1)

    def motes(self) -> list[str]:
        return sorted(rid for rid, info in self.mdr.receptors().items()
                      if info.get("kind") == "mote" and info.get("node") == self.node_id)

    def update(self, plans: Iterable[Plan]) -> ReceptorSettings | None:
        """Publish the motes' rules for the parts `plans` if they changed; the settings sent, if any."""
        motes = self.motes()
        if not motes:
            return None
        with self._lock:
            now = time.monotonic()
            self._expected = {q: (plan, until) for q, (plan, until) in self._expected.items() if until > now}
            plans = [*plans, *(plan for plan, _ in self._expected.values())]
        rules, fields = mote_rules(plans, motes), mote_fields(plans, motes)
        with self._lock:
            if (rules, fields) == self._told:
                return None
            self.version = max(now_ms(), self.version + 1)   # a restarted node's settings are newer still
            settings = ReceptorSettings(self.node_id, self.version, now_ms(), rules, fields)
            key, value = settings.encode()
            producer = clients.shared_producer(self.bootstrap)
            producers.deliver(producer, [producer.send(control_topic(self.node_id), key=key, value=value)])
            self._told = (rules, fields)
            self.mdr.put_told(self.node_id, {mote: {"rule": describe(rule), "fields": list(fields[mote]),
                                                    "version": self.version} for mote, rule in rules.items()})
        log.info("node %s: told its motes (version %d): %s", self.node_id, self.version,
                 "; ".join(f"{mote} {describe(rule)}, {', '.join(fields[mote]) or 'every quantity'}"
                           for mote, rule in rules.items()))
        return settings
