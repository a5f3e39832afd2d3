"""The MDR's runtime statistics: each node's counts (fenced: a replayed batch or range counts once),
gauges, history, dead letters counted once, its parts' states and the services' endpoints."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

import redis

from mdr.records import HISTORY_LENGTH, now_ms
from mdr.store import Store

_FENCED_INCR = """
local last = tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '-1')
local batch = tonumber(ARGV[2])
if batch <= last then return 0 end
redis.call('HSET', KEYS[2], ARGV[1], batch)
for i = 3, #ARGV, 2 do
  redis.call('HINCRBY', KEYS[1], ARGV[i], ARGV[i + 1])
end
return 1
"""

# A range is counted once, by its exact bounds: a reader's micro-batch is split into ranges the same
# way each time it runs (dsp.spark.kafka_source), and its tasks may finish in any order. The bounds are
# kept an hour (a replay follows its failure within seconds).
_RANGE_INCR = """
local now = tonumber(redis.call('TIME')[1])
if redis.call('ZADD', KEYS[2], 'NX', now, ARGV[1]) == 0 then return 0 end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - 3600)
local newest = tonumber(ARGV[2])
if newest > tonumber(redis.call('HGET', KEYS[1], 'max_event_ms') or '0') then
  redis.call('HSET', KEYS[1], 'max_event_ms', newest)
end
local node_end = 4 + 2 * tonumber(ARGV[3])
for i = 4, #ARGV, 2 do
  redis.call('HINCRBY', i < node_end and KEYS[1] or KEYS[3], ARGV[i], ARGV[i + 1])
end
return 1
"""


_COUNT_NEW = """
local added = {}
for i = 1, #ARGV do
  if redis.call('SISMEMBER', KEYS[3], ARGV[i]) == 0 and redis.call('SADD', KEYS[2], ARGV[i]) == 1 then
    table.insert(added, ARGV[i])
  end
end
if #added > 0 then
  redis.call('HINCRBY', KEYS[1], 'dead', #added)
  redis.call('PEXPIRE', KEYS[2], 2 * 3600000)
end
return added
"""


class StatisticsKeys(Store):
    def _register_scripts(self, client: redis.Redis) -> None:
        self._fenced_incr = client.register_script(_FENCED_INCR)
        self._range_incr = client.register_script(_RANGE_INCR)
        self._count_new = client.register_script(_COUNT_NEW)

    # ------------------------------------------------------------ runtime statistics

    def add_counts(self, node_id: str, query_id: str, batch_id: int, counts: dict[str, int]) -> bool:
        """Add a micro-batch's counts once: a replayed batch id of the same query adds nothing."""
        args: list[Any] = [query_id, batch_id]
        for name, value in counts.items():
            args += [name, int(value)]
        return bool(self._fenced_incr(keys=[self.k("stats", node_id), self.k("stats", node_id, "fence")],
                                      args=args))

    def forget_part(self, node_id: str, query_id: str) -> None:
        """Drop a cancelled part's fence (a field per part ever run would pile up; a part deployed
        again under the same id counts from its first batch)."""
        self.r.hdel(self.k("stats", node_id, "fence"), query_id)

    def add_range_counts(self, node_id: str, topic: str, partition: int, start: int, end: int,
                         max_event_ms: int, counts: dict[str, int],
                         receptor_counts: dict[str, int] | None = None) -> bool:
        """Add what a node consumed from offsets [start, end) of a partition, once: a replay of a
        range already counted adds nothing (a range of other bounds is another range). Also raises
        the node's newest event time seen.
        `receptor_counts`: {"<receptor>:<reads|cycles|weak>": n}, the same range per receptor."""
        args: list[Any] = [f"{topic}:{partition}:{start}:{end}", max_event_ms, len(counts)]
        for name, value in [*counts.items(), *(receptor_counts or {}).items()]:
            args += [name, int(value)]
        return bool(self._range_incr(keys=[self.k("stats", node_id), self.k("stats", node_id, "ranges"),
                                           self.k("stats", node_id, "receptors")], args=args))

    def receptor_stats(self, node_id: str) -> dict[str, dict[str, int]]:
        """{receptor: {"reads": n, "cycles": n, "weak": n}} as the node's data listener counted them."""
        found: dict[str, dict[str, int]] = {}
        for field_name, value in self.r.hgetall(self.k("stats", node_id, "receptors")).items():
            receptor, _, what = field_name.rpartition(":")
            found.setdefault(receptor, {"reads": 0, "cycles": 0, "weak": 0})[what] = int(value)
        return found

    def put_round(self, node_id: str, part_states: dict[str, dict[str, Any]], gauges: dict[str, float],
                  sample: dict[str, float]) -> None:
        """A node's round of statistics in one transaction: its parts' states (put_part_states),
        its gauges (set_gauges) and one timestamped sample appended to its history (the oldest
        fall off). One round trip, not three: 33 nodes of one process put theirs every second
        (services.node_gauges)."""
        with self.r.pipeline(transaction=True) as pipe:
            self._put_part_states(pipe, node_id, part_states)
            pipe.hset(self.k("stats", node_id), mapping={**gauges, "updated_ms": now_ms()})
            pipe.rpush(self.k("stats", node_id, "history"), json.dumps({"ms": now_ms(), **sample}))
            pipe.ltrim(self.k("stats", node_id, "history"), -HISTORY_LENGTH, -1)
            pipe.execute()

    def history(self, node_id: str, limit: int = HISTORY_LENGTH) -> list[dict[str, float]]:
        """The node's newest `limit` samples, oldest first."""
        return [json.loads(s) for s in self.r.lrange(self.k("stats", node_id, "history"), -limit, -1)]

    # ------------------------------------------------------------ service endpoints

    def put_endpoints(self, service: str, endpoints: dict[str, str]) -> None:
        """Where `service` ("node:<id>", "placement", "dashboard") is reached: grpc, metrics, http."""
        with self.r.pipeline(transaction=True) as pipe:
            pipe.set(self.k("endpoint", service), json.dumps(endpoints))
            self._announce(pipe, "endpoints", "put", service)
            pipe.execute()

    def endpoints(self) -> dict[str, dict[str, str]]:
        services = self.ids_of("endpoint", nested=True)
        values = self.r.mget([self.k("endpoint", s) for s in services]) if services else []
        return {service: json.loads(value) for service, value in zip(services, values, strict=True) if value}

    def set_gauges(self, node_id: str, gauges: dict[str, float]) -> None:
        self.r.hset(self.k("stats", node_id), mapping={**gauges, "updated_ms": now_ms()})

    def stats(self, node_id: str) -> dict[str, float]:
        return {k: float(v) for k, v in self.r.hgetall(self.k("stats", node_id)).items()}

    def input_rates(self, node_ids: Sequence[str]) -> dict[str, float]:
        """node -> the rows per second it reads now (its `input_rate` gauge), for nodes that report one."""
        with self.r.pipeline(transaction=False) as pipe:
            for node in node_ids:
                pipe.hget(self.k("stats", node), "input_rate")
            found = pipe.execute()
        return {node: float(rate) for node, rate in zip(node_ids, found, strict=True) if rate is not None}

    def count_dead_letters(self, node_id: str, keys: Sequence[str], at_ms: int | None = None) -> list[str]:
        """Count the refused records `keys` into the node's `dead`, each once (within this hour and
        the one before); returns those not counted before (the ones still to dead-letter)."""
        if not keys:
            return []
        hour = (now_ms() if at_ms is None else at_ms) // 3_600_000
        return list(self._count_new(keys=[self.k("stats", node_id), self.k("stats", node_id, "dead", str(hour)),
                                          self.k("stats", node_id, "dead", str(hour - 1))], args=keys))

    def put_part_states(self, node_id: str, states: dict[str, dict[str, Any]]) -> None:
        """The node's query parts that are not running, with why (replaces what was there)."""
        with self.r.pipeline(transaction=True) as pipe:
            self._put_part_states(pipe, node_id, states)
            pipe.execute()

    def _put_part_states(self, pipe, node_id: str, states: dict[str, dict[str, Any]]) -> None:
        pipe.delete(self.k("parts", node_id))
        if states:
            pipe.hset(self.k("parts", node_id), mapping={q: json.dumps(v) for q, v in states.items()})

    def part_states(self, node_ids: Iterable[str]) -> dict[str, dict[str, dict[str, Any]]]:
        """node -> its failed query parts (see put_part_states), for the given nodes."""
        nodes = list(node_ids)
        with self.r.pipeline(transaction=False) as pipe:
            for node in nodes:
                pipe.hgetall(self.k("parts", node))
            found = pipe.execute()
        return {node: {q: json.loads(v) for q, v in parts.items()} for node, parts in zip(nodes, found, strict=True)}
