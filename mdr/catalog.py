"""The MDR's catalog: nodes, the mediated schema, receptors and the motes' settings, static
relations and exported views (the planner's and the nodes' shared picture of the hierarchy)."""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from mdr.records import NodeRecord, ViewRecord, now_ms
from mdr.store import Store
from wire.identity import IdentityError, named_readers
from wire.topics import view_topic

log = logging.getLogger("hifi.mdr")


class CatalogKeys(Store):
    refused_views: Counter[str]
    # ------------------------------------------------------------ nodes

    def register_node(self, node_id: str, tier: str, parent: str, alternates: Sequence[str], address: str,
                      capabilities: dict[str, Any] | None = None, started_ms: int | None = None) -> None:
        """Record a node; `started_ms`: when its process started (a new value counts a start; the
        same process registering again, after the MDR lost its data, does not)."""
        started_ms = started_ms or now_ms()
        known = self.r.hget(self.k("node", node_id), "started_ms")
        with self.r.pipeline(transaction=True) as pipe:
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
        ids = self.ids_of("node")
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
        for node in self.ids_of("node"):
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
            pipe.delete(self.k("view", key))
            self._announce(pipe, "view", "revoke", key)
            removed = pipe.execute()[0]
        return bool(removed)

    def views(self, node_id: str | None = None) -> list[ViewRecord]:
        """Every export the MDR holds that its key vouches for (`view_record`): a record another
        writer forged — naming a node, view or topic not its key's, or no valid readers — is
        left out, logged once and counted (`refused_views`)."""
        keys = self.ids_of("view")
        with self.r.pipeline(transaction=False) as pipe:
            for key in keys:
                pipe.hgetall(self.k("view", key))
            answers = pipe.execute()
        records = []
        for key, data in zip(keys, answers, strict=True):
            if not data:
                continue
            record, problem = view_record(key, data)
            if record is None:
                self._refuse_view(key, problem)
            elif node_id is None or record.node == node_id:
                records.append(record)
        return records

    def _refuse_view(self, key: str, problem: str) -> None:
        if key not in self.refused_views:
            log.warning("the MDR's export %s is ignored: %s", key[:200], problem)
        self.refused_views[key] += 1


def view_record(key: str, data: dict[str, str]) -> tuple[ViewRecord | None, str]:
    """The export stored under `view:<key>` as a record, or None and why it cannot be trusted: a
    node may write its own keys only (its Redis user's rules), so what a record says must follow
    from its key — its node and name, its topic (`hifi.view.<node>.<name>`, or none: a
    definition-only view) — and its readers must be a valid, non-empty list (fail closed).

    >>> good = {"name": "v", "node": "d1", "topic": "hifi.view.d1.v", "readers": '["role:operator"]'}
    >>> view_record("d1.v", good)[0].readers
    ('role:operator',)
    >>> view_record("d2.v", {**good, "node": "d2"})[1]
    "its topic 'hifi.view.d1.v' is not its own ('hifi.view.d2.v')"
    >>> view_record("d1.v", {**good, "readers": '"alice"'})[1]
    'its readers are not a list of readers'
    >>> view_record("d1.v", {**good, "readers": '["role:opertor"]'})[1]
    "its readers: reader 'role:opertor': a role is one of user, operator, service, admin"
    """
    node, _, name = key.partition(".")
    if (data.get("node"), data.get("name")) != (node, name):
        return None, f"it names {data.get('node', '')!r}.{data.get('name', '')!r}, not its key"
    topic = data.get("topic", "")
    if topic and topic != view_topic(node, name):
        return None, f"its topic {topic[:120]!r} is not its own ({view_topic(node, name)!r})"
    try:
        readers = json.loads(data["readers"])
        if not isinstance(readers, list) or not all(isinstance(r, str) for r in readers):
            return None, "its readers are not a list of readers"
        readers = named_readers(readers)
        columns = tuple(tuple(c) for c in json.loads(data.get("columns", "[]")))
        exported_ms = int(data.get("exported_ms", 0))
    except KeyError:
        return None, "it names no readers"
    except IdentityError as exc:
        return None, f"its readers: {exc}"
    except (ValueError, TypeError) as exc:
        return None, f"it is malformed ({str(exc)[:120]})"
    return ViewRecord(name=name, node=node, topic=topic, window=data.get("window", ""),
                      definition=data.get("definition", ""), plan=data.get("plan", ""), columns=columns,
                      readers=readers, exported_ms=exported_ms), ""
