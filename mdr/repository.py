"""The metadata repository (MDR) on Redis: the catalog every node and tool reads.

Key layout (all keys under the prefix, default "hifi:"):

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
  view:<node>.<view>         HASH  name, node, topic, window, definition, plan, columns (JSON),
                                   readers (JSON list; ["*"] = everyone), exported_ms; what the record
                                   says must follow from its key (mdr.catalog.view_record)
  queries                    SET   query ids
  query:<id>                 HASH  text, root, remote (JSON {node: [query ids]}), status, submitted_ms,
                                   result_topic, explain, columns (JSON), tasks (JSON: the placement)
  stats:<node>               HASH  rows_in, cycles_in, samples_in, duplicates, rows_out, dead, late_rows,
                                   input_rate, input_lag_ms, lag_ms, max_event_ms, updated_ms
  stats:<node>:dead:<hour>   SET   "<topic>:<partition>:<offset>" of each refused record of a child's
                                   view already dead-lettered and counted (every reader refuses it),
                                   by the hour it was counted in; gone two hours on (bounded however
                                   many records are refused: the node's readers meet a record within
                                   seconds of each other)
  parts:<node>               HASH  query id -> JSON {status, error, restarts}: the node's query parts
                                   that are not running (failed, with the cause); rewritten each second
  desired:<node>             HASH  query id -> a part as JSON (base.part_spec.PartSpec.to_json): the
                                   query parts the placement service deployed on the node, which the
                                   node runs again after a restart (desired state), each with the
                                   placement service's signature (a node runs no other: services.part_signing)
  retired_topics             ZSET  topic -> when a cancel ended what wrote it (epoch ms), for
                                   services.placement's delete_retired_topics; kept a day (mdr.control)
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
  endpoint:<service>         STR   JSON {grpc, metrics, http} of a service ("node:<id>", "placement",
                                   "dashboard"): where to reach it and scrape its Prometheus metrics
  placement                  STR   the placement service's gRPC address
  changes                    STREAM  one entry per change: kind, op, id (nodes and dashboard watch it)

Every change is one MULTI/EXEC transaction (or one Lua script) that also appends to `changes`. Each
key has one writer (services.redis_acls); nodes, views, adoptions and endpoints are found by their
keys (`Store.ids_of`), not listed in sets every writer could change.

The methods live with their keys: mdr.catalog (nodes to views), mdr.control (queries, users,
tokens, desired state, retired topics, adoptions), mdr.statistics (stats, endpoints, parts'
states); mdr.records holds the values they return. MDR is the three in one.
"""

from __future__ import annotations

import functools
import inspect
import threading
from collections import Counter

import redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from mdr.catalog import CatalogKeys
from mdr.control import ControlKeys
from mdr.records import HISTORY_LENGTH, Adoption, NodeRecord, QueryRecord, ViewRecord, now_ms
from mdr.statistics import StatisticsKeys
from mdr.store import CHANGE_STREAM_MAXLEN

__all__ = ["CHANGE_STREAM_MAXLEN", "HISTORY_LENGTH", "MDR", "Adoption", "NodeRecord", "QueryRecord", "ViewRecord",
           "now_ms"]

# A call that finds Redis gone (restarting: it reloads its append-only file) reconnects with
# backoff, 50 ms doubling to 1 s, for up to ~10 s before it raises.
RECONNECT_TRIES = 14


def _counting(name: str, method):
    @functools.wraps(method)
    def counted(self: MDR, *args, **kwargs):
        with self._operations_lock:
            self.operations[name] += 1
        return method(self, *args, **kwargs)
    return counted


def _count_operations(cls: type) -> type:
    """Count every call of a public method per instance (`operations`): the services' MDR metrics."""
    # its own methods and those of the parts it is made of, each wrapped once
    methods = {name: member for part in reversed(cls.__mro__[:-1]) for name, member in vars(part).items()
               if not name.startswith("_") and name != "k" and inspect.isfunction(member)}
    for name, member in methods.items():
        setattr(cls, name, _counting(name, member))
    return cls


@_count_operations
class MDR(CatalogKeys, ControlKeys, StatisticsKeys):
    """The metadata repository: its catalog, control plane and statistics (one module each)."""

    def __init__(self, client: redis.Redis, prefix: str = "hifi:") -> None:
        self.r = client
        self.p = prefix
        self.url = ""
        self.operations: Counter[str] = Counter()
        self.refused_views: Counter[str] = Counter()   # export keys whose record its key does not vouch for
        self._operations_lock = threading.Lock()
        self._register_scripts(client)

    @classmethod
    def connect(cls, url: str, prefix: str = "hifi:") -> MDR:
        retry = Retry(ExponentialBackoff(cap=1.0, base=0.05), RECONNECT_TRIES)
        client = redis.Redis.from_url(url, decode_responses=True, retry=retry,
                                      retry_on_error=[redis.ConnectionError, redis.TimeoutError])
        mdr = cls(client, prefix)
        mdr.url = url
        return mdr

    # ------------------------------------------------------------ change feed

    def changes(self, last_id: str = "0-0", block_ms: int | None = None, count: int = 100) -> list[tuple[str, dict]]:
        answer = self.r.xread({self.k("changes"): last_id}, count=count, block=block_ms)
        return [(entry_id, fields) for _, entries in answer for entry_id, fields in entries]

    def clear(self) -> None:
        """Remove every key under the prefix (tests and a fresh `hifi up`)."""
        for key in self.r.scan_iter(match=self.p + "*", count=1000):
            self.r.delete(key)
