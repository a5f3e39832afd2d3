"""The MDR's control plane: queries, service users, tokens, the nodes' desired state, retired
topics and adoptions (what the placement service and admins write)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import redis

from mdr.records import Adoption, QueryRecord, now_ms
from mdr.store import Store
from wire.identity import TokenRecord

RETIRED_KEPT_MS = 24 * 3_600_000   # a retired topic is remembered a day (then left to the broker's retention)


class ControlKeys(Store):
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
        """Note `topics` as written no more since `at_ms` (services.placement may delete them), and
        forget those retired RETIRED_KEPT_MS before it."""
        if topics:
            with self.r.pipeline(transaction=True) as pipe:
                pipe.zadd(self.k("retired_topics"), dict.fromkeys(topics, at_ms))
                # bounded however many queries are cancelled: nothing deletes them by itself yet
                pipe.zremrangebyscore(self.k("retired_topics"), "-inf", f"({at_ms - RETIRED_KEPT_MS}")
                pipe.execute()

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
            self._announce(pipe, "adoption", "end", node_id)
            pipe.execute()

    def adoptions(self) -> dict[str, Adoption]:
        """Node -> its adoption, for every node whose parts run (or ran until a hand-back) elsewhere."""
        ids = self.ids_of("adoption")
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
