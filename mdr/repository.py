"""The metadata repository (MDR) on Redis: the catalog every node and tool reads.

Key layout (all keys under the prefix, default "hifi:"):

  nodes                      SET   node ids
  node:<id>                  HASH  tier, parent, alternates (JSON list), address, capabilities (JSON),
                                   started_ms (when its process started), starts (how many it has had)
  node:<id>:alive            STR   last heartbeat (epoch ms); expires after the heartbeat TTL,
                                   so a node that stops heartbeating turns dead by itself
  streams                    HASH  stream name -> JSON [[attribute, type], ...] (mediated schema)
  receptors                  HASH  receptor id -> JSON {kind, node, location, area}
  told:<node>                HASH  mote id -> JSON {rule, version}: what the edge node's sensor proxy
                                   told each of its motes last (glue.proxy; `always`, `never` or thresholds)
  obeyed:<node>              HASH  raw-topic partition -> JSON {version, read_ms}: the newest sensor proxy
                                   settings the motes' batches obeyed, and when one was last read
  hist:<node>                HASH  "<mote>:<quantity>" -> JSON counts: the newest histogram of the mote's
                                   recent values it sent (wire.histogram), for selectivity estimates
  parameters                 HASH  deployment parameter -> JSON value (strength_T, t1, ...)
  relations                  SET   static relation names
  relation:<name>            HASH  columns (JSON), rows (JSON), replicas (JSON list of node ids)
  views                      SET   "<node>.<view>"
  view:<node>.<view>         HASH  name, node, topic, window, definition, plan, columns (JSON),
                                   readers (JSON list; ["*"] = everyone), exported_ms
  queries                    SET   query ids
  query:<id>                 HASH  text, root, remote (JSON {node: [query ids]}), status, submitted_ms,
                                   result_topic, explain, columns (JSON), tasks (JSON: the placement)
  stats:<node>               HASH  rows_in, cycles_in, samples_in, duplicates, rows_out, dead, late_rows,
                                   input_rate, lag_ms, max_event_ms, updated_ms
  stats:<node>:dead:<hour>   SET   "<topic>:<partition>:<offset>" of each refused record of a child's
                                   view already dead-lettered and counted (every reader refuses it),
                                   by the hour it was counted in; gone two hours on (bounded however
                                   many records are refused: the node's readers meet a record within
                                   seconds of each other)
  parts:<node>               HASH  query id -> JSON {status, error, restarts}: the node's query parts
                                   that are not running (failed, with the cause); rewritten each second
  desired:<node>             HASH  query id -> a part as JSON (dsp.part_spec.PartSpec.to_json): the
                                   query parts the placement service deployed on the node, which the
                                   node runs again after a restart (desired state), each with the
                                   placement service's signature (a node runs no other: services.part_signing)
  retired_topics             ZSET  topic -> when a cancel ended what wrote it (epoch ms): the placement
                                   service deletes it from the broker a grace later (services.placement)
  adoptions                  SET   nodes whose parts run at another node (glue.adoption)
  adoption:<node>            HASH  adopter, since_ms, children (JSON list: the nodes that moved),
                                   parts (JSON {query id: first window start it emits}), handback_ms
                                   (where the node takes its parts back), drained_ms (when the
                                   adopter had emitted everything before it)
  stats:<node>:fence         HASH  "<query>" -> last micro-batch id counted (replays count once; gone on cancel)
  stats:<node>:offsets       HASH  "<topic>:<partition>" -> end of the last raw offset range counted
  stats:<node>:receptors     HASH  "<receptor>:<reads|cycles|weak>" -> readings, read cycles and weak
                                   reads (below the cleaning threshold) the node's data listener took in
  stats:<node>:history       LIST  JSON samples {ms, rows_in, rows_out, dead, input_rate, lag_ms}, the
                                   newest last, capped at HISTORY_LENGTH (the dashboard's charts)
  endpoints                  HASH  service ("node:<id>", "placement", "dashboard") -> JSON {grpc,
                                   metrics, http}: where to reach it and scrape its Prometheus metrics
  placement                  STR   the placement service's gRPC address
  changes                    STREAM  one entry per change: kind, op, id (nodes and dashboard watch it)

Every change is one MULTI/EXEC transaction (or one Lua script) that also appends to `changes`.
"""

from __future__ import annotations

import functools
import inspect
import json
import threading
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from wire.identity import TokenRecord

CHANGE_STREAM_MAXLEN = 10_000
HISTORY_LENGTH = 900   # samples per node: 15 minutes at the nodes' one-second gauges
# A call that finds Redis gone (restarting: it reloads its append-only file) reconnects with
# backoff, 50 ms doubling to 1 s, for up to ~10 s before it raises.
RECONNECT_TRIES = 14

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
# way each time it runs (dsp.kafka_source), and its tasks may finish in any order. The bounds are
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


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True)
class NodeRecord:
    id: str
    tier: str
    parent: str
    alternates: tuple[str, ...]
    address: str
    alive: bool
    last_heartbeat_ms: int | None
    capabilities: dict[str, Any] = field(default_factory=dict)
    started_ms: int | None = None   # when the node's current process started
    starts: int = 0                 # how many processes have registered as it (a restart adds one)


@dataclass(frozen=True)
class ViewRecord:
    name: str
    node: str
    topic: str
    window: str
    definition: str
    plan: str
    columns: tuple[tuple[str, str], ...]
    readers: tuple[str, ...]
    exported_ms: int

    @property
    def key(self) -> str:
        return f"{self.node}.{self.name}"

@dataclass(frozen=True)
class QueryRecord:
    id: str
    text: str
    root: str
    remote: dict[str, list[str]]
    status: str
    submitted_ms: int
    result_topic: str = ""
    explain: str = ""
    columns: tuple[str, ...] = ()
    # the placement drawn: [{node, role, query_id, export_as, reused}], leaves first
    tasks: tuple[dict[str, Any], ...] = ()
    principal: str = ""   # who submitted it (its results and its cancel are theirs)
    until_ms: int = 0     # `--until`: the placement cancels it once the windows before have gone out


@dataclass(frozen=True)
class Adoption:
    node: str                      # the dead (or returning) node
    adopter: str                   # where its parts run meanwhile
    since_ms: int
    children: tuple[str, ...]      # the nodes that moved to the adopter
    parts: dict[str, int]          # query id -> the first window start the adopter emits of it
    handback_ms: int | None = None  # the node emits windows from here on, the adopter before
    drained_ms: int | None = None   # when the adopter had emitted everything before the hand-back


def _counting(name: str, method):
    @functools.wraps(method)
    def counted(self: MDR, *args, **kwargs):
        with self._operations_lock:
            self.operations[name] += 1
        return method(self, *args, **kwargs)
    return counted


def _count_operations(cls: type) -> type:
    """Count every call of a public method per instance (`operations`): the services' MDR metrics."""
    for name, member in list(vars(cls).items()):
        if not name.startswith("_") and name != "k" and inspect.isfunction(member):
            setattr(cls, name, _counting(name, member))
    return cls


@_count_operations
class MDR:
    def __init__(self, client: redis.Redis, prefix: str = "hifi:") -> None:
        self.r = client
        self.p = prefix
        self.url = ""
        self.operations: Counter[str] = Counter()
        self._operations_lock = threading.Lock()
        self._fenced_incr = client.register_script(_FENCED_INCR)
        self._range_incr = client.register_script(_RANGE_INCR)
        self._count_new = client.register_script(_COUNT_NEW)

    @classmethod
    def connect(cls, url: str, prefix: str = "hifi:") -> MDR:
        retry = Retry(ExponentialBackoff(cap=1.0, base=0.05), RECONNECT_TRIES)
        client = redis.Redis.from_url(url, decode_responses=True, retry=retry,
                                      retry_on_error=[redis.ConnectionError, redis.TimeoutError])
        mdr = cls(client, prefix)
        mdr.url = url
        return mdr

    def k(self, *parts: str) -> str:
        return self.p + ":".join(parts)

    def _announce(self, pipe: redis.client.Pipeline, kind: str, op: str, ident: str) -> None:
        pipe.xadd(self.k("changes"), {"kind": kind, "op": op, "id": ident, "ms": now_ms()},
                  maxlen=CHANGE_STREAM_MAXLEN, approximate=True)

    # ------------------------------------------------------------ nodes

    def register_node(self, node_id: str, tier: str, parent: str, alternates: Sequence[str], address: str,
                      capabilities: dict[str, Any] | None = None, started_ms: int | None = None) -> None:
        """Record a node; `started_ms`: when its process started (a new value counts a start; the
        same process registering again, after the MDR lost its data, does not)."""
        started_ms = started_ms or now_ms()
        known = self.r.hget(self.k("node", node_id), "started_ms")
        with self.r.pipeline(transaction=True) as pipe:
            pipe.sadd(self.k("nodes"), node_id)
            pipe.hset(self.k("node", node_id), mapping={
                "tier": tier, "parent": parent or "", "alternates": json.dumps(list(alternates)),
                "address": address, "capabilities": json.dumps(capabilities or {}), "started_ms": started_ms,
            })
            if known != str(started_ms):
                pipe.hincrby(self.k("node", node_id), "starts", 1)
            self._announce(pipe, "node", "register", node_id)
            pipe.execute()

    def heartbeat(self, node_id: str, ttl_ms: int) -> bool:
        """Mark the node alive for `ttl_ms`; whether the MDR still holds its registration (a
        Redis that lost its data, or was cleared, does not: the node registers again)."""
        with self.r.pipeline(transaction=False) as pipe:
            pipe.set(self.k("node", node_id, "alive"), now_ms(), px=ttl_ms)
            pipe.exists(self.k("node", node_id))
            return bool(pipe.execute()[1])

    def mark_down(self, node_id: str) -> None:
        with self.r.pipeline(transaction=True) as pipe:
            pipe.delete(self.k("node", node_id, "alive"))
            self._announce(pipe, "node", "down", node_id)
            pipe.execute()

    def nodes(self) -> list[NodeRecord]:
        ids = sorted(self.r.smembers(self.k("nodes")))
        with self.r.pipeline(transaction=False) as pipe:
            for node_id in ids:
                pipe.hgetall(self.k("node", node_id))
                pipe.get(self.k("node", node_id, "alive"))
            answers = pipe.execute()
        records = []
        for node_id, data, beat in zip(ids, answers[0::2], answers[1::2], strict=True):
            records.append(NodeRecord(
                id=node_id, tier=data.get("tier", ""), parent=data.get("parent", ""),
                alternates=tuple(json.loads(data.get("alternates", "[]"))), address=data.get("address", ""),
                alive=beat is not None, last_heartbeat_ms=int(beat) if beat else None,
                capabilities=json.loads(data.get("capabilities", "{}")),
                started_ms=int(data["started_ms"]) if data.get("started_ms") else None,
                starts=int(data.get("starts", 0)),
            ))
        return records

    def node(self, node_id: str) -> NodeRecord | None:
        return next((n for n in self.nodes() if n.id == node_id), None)

    # ------------------------------------------------------------ schema and static relations

    def _put_json_hash(self, key: str, mapping: dict[str, Any]) -> None:
        """Replace a whole HASH of JSON values at once."""
        with self.r.pipeline(transaction=True) as pipe:
            pipe.delete(self.k(key))
            if mapping:
                pipe.hset(self.k(key), mapping={name: json.dumps(value) for name, value in mapping.items()})
            self._announce(pipe, key, "put", str(len(mapping)))
            pipe.execute()

    def put_receptors(self, receptors: dict[str, dict[str, Any]]) -> None:
        self._put_json_hash("receptors", receptors)

    def receptors(self) -> dict[str, dict[str, Any]]:
        return {rid: json.loads(info) for rid, info in self.r.hgetall(self.k("receptors")).items()}

    def put_told(self, node_id: str, told: dict[str, dict[str, Any]]) -> None:
        """What the node's sensor proxy told its motes: {mote: {rule, version}}."""
        self._put_json_hash(f"told:{node_id}", told)

    def told(self, node_id: str) -> dict[str, dict[str, Any]]:
        return {mote: json.loads(info) for mote, info in self.r.hgetall(self.k("told", node_id)).items()}

    def put_obeyed(self, node_id: str, partition: int, version: int) -> None:
        """The newest settings of the node's sensor proxy that the motes' batches in one partition of
        its raw topic obeyed, and when such a batch was last read (one field per partition: a
        partition's ranges are read in order, so no field goes back)."""
        self.r.hset(self.k("obeyed", node_id), str(partition), json.dumps({"version": version, "read_ms": now_ms()}))

    def obeyed(self, node_id: str) -> tuple[int, int]:
        """(the newest settings version the node's motes obeyed, when a sensor batch was last read); (0, 0): none."""
        seen = [json.loads(v) for v in self.r.hvals(self.k("obeyed", node_id))]
        return max((s["version"] for s in seen), default=0), max((s["read_ms"] for s in seen), default=0)

    def put_histograms(self, node_id: str, histograms: dict[tuple[str, str], list[int]]) -> None:
        """The newest histograms of recent values the node's motes sent (wire.histogram)."""
        self.r.hset(self.k("hist", node_id), mapping={f"{receptor}:{quantity}": json.dumps(counts)
                                                      for (receptor, quantity), counts in histograms.items()})

    def histograms(self) -> dict[tuple[str, str], list[int]]:
        """Every edge node's motes' histograms: (receptor, quantity) -> counts."""
        found = {}
        for node in self.r.smembers(self.k("nodes")):
            for field_name, counts in self.r.hgetall(self.k("hist", node)).items():
                receptor, _, quantity = field_name.rpartition(":")
                found[(receptor, quantity)] = json.loads(counts)
        return found

    def put_parameters(self, parameters: dict[str, Any]) -> None:
        self._put_json_hash("parameters", parameters)

    def parameters(self) -> dict[str, Any]:
        return {name: json.loads(value) for name, value in self.r.hgetall(self.k("parameters")).items()}

    def define_stream(self, name: str, attributes: Sequence[tuple[str, str]]) -> None:
        with self.r.pipeline(transaction=True) as pipe:
            pipe.hset(self.k("streams"), name, json.dumps([list(a) for a in attributes]))
            self._announce(pipe, "stream", "define", name)
            pipe.execute()

    def put_stream_readers(self, readers: dict[str, Sequence[str]]) -> None:
        """Who may read each raw stream (a stream not named: everyone)."""
        self._put_json_hash("stream_readers", {name: list(r) for name, r in readers.items()})

    def stream_readers(self) -> dict[str, tuple[str, ...]]:
        return {name: tuple(json.loads(r)) for name, r in self.r.hgetall(self.k("stream_readers")).items()}

    def streams(self) -> dict[str, list[tuple[str, str]]]:
        return {name: [tuple(a) for a in json.loads(attrs)]
                for name, attrs in self.r.hgetall(self.k("streams")).items()}

    def set_placement_address(self, address: str) -> None:
        self.r.set(self.k("placement"), address)

    def placement_address(self) -> str:
        """The placement service's gRPC address ("" when none registered)."""
        return self.r.get(self.k("placement")) or ""

    def put_relation(self, name: str, columns: Sequence[tuple[str, str]], rows: Iterable[Sequence[Any]],
                     replicas: Sequence[str]) -> None:
        with self.r.pipeline(transaction=True) as pipe:
            pipe.sadd(self.k("relations"), name)
            pipe.hset(self.k("relation", name), mapping={
                "columns": json.dumps([list(c) for c in columns]), "rows": json.dumps([list(r) for r in rows]),
                "replicas": json.dumps(list(replicas)),
            })
            self._announce(pipe, "relation", "put", name)
            pipe.execute()

    def relation(self, name: str) -> tuple[list[tuple[str, str]], list[tuple], list[str]] | None:
        data = self.r.hgetall(self.k("relation", name))
        if not data:
            return None
        return ([tuple(c) for c in json.loads(data["columns"])], [tuple(r) for r in json.loads(data["rows"])],
                json.loads(data["replicas"]))

    def relation_names(self) -> list[str]:
        return sorted(self.r.smembers(self.k("relations")))

    def relations_at(self, node_id: str) -> dict[str, list[tuple]]:
        """Rows of every static relation replicated at `node_id`."""
        result = {}
        for name in self.relation_names():
            found = self.relation(name)
            if found and ("*" in found[2] or node_id in found[2]):
                result[name] = found[1]
        return result

    # ------------------------------------------------------------ views

    def export_view(self, view: ViewRecord) -> None:
        with self.r.pipeline(transaction=True) as pipe:
            pipe.sadd(self.k("views"), view.key)
            pipe.hset(self.k("view", view.key), mapping={
                "name": view.name, "node": view.node, "topic": view.topic, "window": view.window,
                "definition": view.definition, "plan": view.plan,
                "columns": json.dumps([list(c) for c in view.columns]),
                "readers": json.dumps(list(view.readers)), "exported_ms": view.exported_ms,
            })
            self._announce(pipe, "view", "export", view.key)
            pipe.execute()

    def revoke_view(self, node_id: str, name: str) -> bool:
        key = f"{node_id}.{name}"
        with self.r.pipeline(transaction=True) as pipe:
            pipe.srem(self.k("views"), key)
            pipe.delete(self.k("view", key))
            self._announce(pipe, "view", "revoke", key)
            removed = pipe.execute()[0]
        return bool(removed)

    def views(self, node_id: str | None = None) -> list[ViewRecord]:
        keys = sorted(self.r.smembers(self.k("views")))
        with self.r.pipeline(transaction=False) as pipe:
            for key in keys:
                pipe.hgetall(self.k("view", key))
            answers = pipe.execute()
        records = [ViewRecord(
            name=d["name"], node=d["node"], topic=d["topic"], window=d.get("window", ""),
            definition=d.get("definition", ""), plan=d.get("plan", ""),
            columns=tuple(tuple(c) for c in json.loads(d.get("columns", "[]"))),
            readers=tuple(json.loads(d.get("readers", '["*"]'))), exported_ms=int(d.get("exported_ms", 0)),
        ) for d in answers if d]
        return [v for v in records if node_id is None or v.node == node_id]

    # ------------------------------------------------------------ queries

    def put_query(self, query: QueryRecord) -> None:
        with self.r.pipeline(transaction=True) as pipe:
            pipe.sadd(self.k("queries"), query.id)
            pipe.hset(self.k("query", query.id), mapping={
                "text": query.text, "root": query.root, "remote": json.dumps(query.remote),
                "status": query.status, "submitted_ms": query.submitted_ms, "result_topic": query.result_topic,
                "explain": query.explain, "columns": json.dumps(list(query.columns)),
                "tasks": json.dumps(list(query.tasks)), "principal": query.principal, "until_ms": query.until_ms,
            })
            self._announce(pipe, "query", "put", query.id)
            pipe.execute()

    def drop_query(self, query_id: str) -> None:
        with self.r.pipeline(transaction=True) as pipe:
            pipe.srem(self.k("queries"), query_id)
            pipe.delete(self.k("query", query_id))
            self._announce(pipe, "query", "drop", query_id)
            pipe.execute()

    def queries(self) -> list[QueryRecord]:
        result = []
        for query_id in sorted(self.r.smembers(self.k("queries"))):
            d = self.r.hgetall(self.k("query", query_id))
            if d:
                result.append(QueryRecord(query_id, d["text"], d["root"], json.loads(d["remote"]), d["status"],
                                          int(d["submitted_ms"]), d.get("result_topic", ""), d.get("explain", ""),
                                          tuple(json.loads(d.get("columns", "[]"))),
                                          tuple(json.loads(d.get("tasks", "[]"))), d.get("principal", ""),
                                          int(d.get("until_ms", 0))))
        return result

    # ------------------------------------------------------------ service users (services.redis_acls)

    def set_user(self, user: str, password: str, rules: Sequence[str]) -> bool:
        """Make (or make again) the Redis user `user` with `password` and ACL `rules`, saved to the
        server's ACL file (an embedded Redis keeps one: services.embedded). False, and no user made,
        when this connection may not manage users or the server keeps no ACL file (a user it
        forgot at its next restart would lock its service out)."""
        try:
            self.r.execute_command("ACL", "SETUSER", user, "reset", "on", f">{password}", *rules)
        except redis.ResponseError:
            return False
        try:
            self.r.execute_command("ACL", "SAVE")
        except redis.ResponseError:
            self.r.execute_command("ACL", "DELUSER", user)
            return False
        return True

    # ------------------------------------------------------------ tokens (services.identity)

    def put_token(self, digest: str, record: TokenRecord) -> None:
        """Keep a token as its SHA-256 `digest` (the token itself is never stored)."""
        self.r.hset(self.k("tokens"), digest, record.to_json())

    def token(self, digest: str) -> TokenRecord | None:
        found = self.r.hget(self.k("tokens"), digest)
        return TokenRecord.from_json(found) if found else None

    def tokens(self) -> dict[str, TokenRecord]:
        """digest -> record, every token."""
        return {digest: TokenRecord.from_json(text) for digest, text in self.r.hgetall(self.k("tokens")).items()}

    def drop_tokens(self, principal: str) -> int:
        """Remove every token of `principal`; how many there were."""
        digests = [d for d, record in self.tokens().items() if record.principal == principal]
        return self.r.hdel(self.k("tokens"), *digests) if digests else 0

    # ------------------------------------------------------------ desired state

    def put_desired(self, parts: Mapping[str, Mapping[str, str]]) -> None:
        """Record query parts that should run: {node: {query id: the part as JSON}}."""
        with self.r.pipeline(transaction=True) as pipe:
            for node_id, specs in parts.items():
                if specs:
                    pipe.hset(self.k("desired", node_id), mapping=dict(specs))
                    self._announce(pipe, "desired", "put", node_id)
            pipe.execute()

    def drop_desired(self, node_id: str, query_ids: Sequence[str]) -> None:
        if query_ids:
            with self.r.pipeline(transaction=True) as pipe:
                pipe.hdel(self.k("desired", node_id), *query_ids)
                self._announce(pipe, "desired", "drop", node_id)
                pipe.execute()

    def desired(self, node_id: str) -> dict[str, str]:
        """The query parts that should run on the node: query id -> the part as JSON."""
        return self.r.hgetall(self.k("desired", node_id))

    def retire_topics(self, topics: Sequence[str], at_ms: int) -> None:
        """Note `topics` as written no more since `at_ms` (deleted later: services.placement)."""
        if topics:
            self.r.zadd(self.k("retired_topics"), dict.fromkeys(topics, at_ms))

    def retired_topics(self, before_ms: int) -> list[str]:
        """The topics retired before `before_ms`."""
        return list(self.r.zrangebyscore(self.k("retired_topics"), "-inf", f"({before_ms}"))

    def forget_retired(self, topics: Sequence[str]) -> None:
        if topics:
            self.r.zrem(self.k("retired_topics"), *topics)

    # ------------------------------------------------------------ adoption (re-parenting)

    def claim_adoption(self, node_id: str, adopter: str, children: Sequence[str]) -> bool:
        """Record that `adopter` runs the dead node's parts; False when another node claimed them."""
        if not self.r.hsetnx(self.k("adoption", node_id), "adopter", adopter):
            return False
        with self.r.pipeline(transaction=True) as pipe:
            pipe.sadd(self.k("adoptions"), node_id)
            pipe.hset(self.k("adoption", node_id),
                      mapping={"since_ms": now_ms(), "children": json.dumps(list(children)), "parts": "{}"})
            self._announce(pipe, "adoption", "claim", node_id)
            pipe.execute()
        return True

    def update_adoption(self, node_id: str, parts: dict[str, int] | None = None, handback_ms: int | None = None,
                        drained_ms: int | None = None) -> None:
        fields: dict[str, Any] = {}
        if parts is not None:
            fields["parts"] = json.dumps(parts)
        if handback_ms is not None:
            fields["handback_ms"] = handback_ms
        if drained_ms is not None:
            fields["drained_ms"] = drained_ms
        with self.r.pipeline(transaction=True) as pipe:
            pipe.hset(self.k("adoption", node_id), mapping=fields)
            self._announce(pipe, "adoption", "update", node_id)
            pipe.execute()

    def end_adoption(self, node_id: str) -> None:
        with self.r.pipeline(transaction=True) as pipe:
            pipe.delete(self.k("adoption", node_id))
            pipe.srem(self.k("adoptions"), node_id)
            self._announce(pipe, "adoption", "end", node_id)
            pipe.execute()

    def adoptions(self) -> dict[str, Adoption]:
        """Node -> its adoption, for every node whose parts run (or ran until a hand-back) elsewhere."""
        ids = sorted(self.r.smembers(self.k("adoptions")))
        with self.r.pipeline(transaction=False) as pipe:
            for node_id in ids:
                pipe.hgetall(self.k("adoption", node_id))
            answers = pipe.execute()
        return {node_id: Adoption(node_id, d["adopter"], int(d.get("since_ms", 0)),
                                  tuple(json.loads(d.get("children", "[]"))),
                                  {q: int(ms) for q, ms in json.loads(d.get("parts", "{}")).items()},
                                  int(d["handback_ms"]) if d.get("handback_ms") else None,
                                  int(d["drained_ms"]) if d.get("drained_ms") else None)
                for node_id, d in zip(ids, answers, strict=True) if d.get("adopter")}

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

    def record_history(self, node_id: str, sample: dict[str, float]) -> None:
        """Append one timestamped sample of the node's statistics (the oldest fall off)."""
        with self.r.pipeline(transaction=True) as pipe:
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
            pipe.hset(self.k("endpoints"), service, json.dumps(endpoints))
            self._announce(pipe, "endpoints", "put", service)
            pipe.execute()

    def endpoints(self) -> dict[str, dict[str, str]]:
        return {service: json.loads(value) for service, value in self.r.hgetall(self.k("endpoints")).items()}

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
            pipe.delete(self.k("parts", node_id))
            if states:
                pipe.hset(self.k("parts", node_id), mapping={q: json.dumps(v) for q, v in states.items()})
            pipe.execute()

    def part_states(self, node_ids: Iterable[str]) -> dict[str, dict[str, dict[str, Any]]]:
        """node -> its failed query parts (see put_part_states), for the given nodes."""
        nodes = list(node_ids)
        with self.r.pipeline(transaction=False) as pipe:
            for node in nodes:
                pipe.hgetall(self.k("parts", node))
            found = pipe.execute()
        return {node: {q: json.loads(v) for q, v in parts.items()} for node, parts in zip(nodes, found, strict=True)}

    # ------------------------------------------------------------ change feed

    def changes(self, last_id: str = "0-0", block_ms: int | None = None, count: int = 100) -> list[tuple[str, dict]]:
        answer = self.r.xread({self.k("changes"): last_id}, count=count, block=block_ms)
        return [(entry_id, fields) for _, entries in answer for entry_id, fields in entries]

    def clear(self) -> None:
        """Remove every key under the prefix (tests and a fresh `hifi up`)."""
        for key in self.r.scan_iter(match=self.p + "*", count=1000):
            self.r.delete(key)
