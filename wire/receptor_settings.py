"""What an edge node's sensor proxy tells its motes, and how a mote obeys. Pure.

A mote's rule is a disjunction of clauses, each a conjunction of bounds on the sample's own
quantities (`temperature > 45`) and perhaps a period (`every 6 s`: the sample's time a multiple of
it, a query's `sample every`): the mote sends a sample when any clause holds. One empty clause
holds always (every sample is sent); no clause at all: no running query needs the mote, and it
sends nothing. Thresholds of this form are what a mote can check before it transmits (Fjords'
sensor proxy, TinyDB's pushed-down predicates); the proxy (glue.proxy) derives them from the
running queries so that every query still gets every sample it could use.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from protos import hifi_pb2

Bound = tuple[str, str, float]        # (quantity, op, value); ("", "every", P): a sample time multiple of P ms
Clause = tuple[Bound, ...]
Rule = tuple[Clause, ...]

ALWAYS: Rule = ((),)
NEVER: Rule = ()
EVERY = "every"   # a query's `sample every`: the mote samples on that period only

COMPARISONS: dict[str, Callable[[float, float], bool]] = {
    "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "=": operator.eq, "!=": operator.ne,
}


def wants(rule: Rule, values: Mapping[str, float], t_ms: int = 0) -> bool:
    """Whether a mote under `rule` sends a sample of `values` taken at `t_ms` (a quantity it lacks
    meets no bound)."""
    return any(all(t_ms % value == 0 if op == EVERY else quantity in values and
                   COMPARISONS[op](values[quantity], value) for quantity, op, value in clause) for clause in rule)


def describe(rule: Rule) -> str:
    """As a person reads it: `always`, `never`, or the clauses in SQL."""
    if rule == ALWAYS:
        return "always"
    if rule == NEVER:
        return "never"
    return " OR ".join("(" + " AND ".join(f"every {v / 1000:g} s" if op == EVERY else f"{q} {op} {v:g}"
                                          for q, op, v in clause) + ")" for clause in rule)


@dataclass(frozen=True)
class ReceptorSettings:
    """One edge node's settings for its motes; a mote not named sends every sample."""

    node: str
    version: int
    issued_ms: int
    rules: Mapping[str, Rule]
    fields: Mapping[str, tuple[str, ...]] = field(default_factory=dict)   # per mote; () or absent: all

    def rule(self, receptor_id: str) -> Rule:
        return self.rules.get(receptor_id, ALWAYS)

    def sent(self, receptor_id: str, values: Mapping[str, float]) -> dict[str, float]:
        """What of a sample's values the mote sends: the quantities the queries read."""
        wanted = self.fields.get(receptor_id, ())
        return {q: v for q, v in values.items() if q in wanted} if wanted else dict(values)

    def encode(self) -> tuple[bytes, bytes]:
        """(key, value) of its control-topic record: keyed by the node, so the latest one holds."""
        msg = hifi_pb2.ReceptorSettings(node=self.node, version=self.version, issued_ms=self.issued_ms)
        for receptor_id, rule in sorted(self.rules.items()):
            mote = msg.motes.add(receptor_id=receptor_id, fields=self.fields.get(receptor_id, ()))
            for clause in rule:
                added = mote.clauses.add()
                for quantity, op, value in clause:
                    added.bounds.add(quantity=quantity, op=op, value=value)
        return self.node.encode(), msg.SerializeToString()

    @classmethod
    def decode(cls, value: bytes) -> ReceptorSettings:
        """Raises ValueError for a record that is not a well-formed settings message."""
        msg = hifi_pb2.ReceptorSettings()
        try:
            msg.ParseFromString(value)
        except Exception as exc:  # noqa: BLE001 - protobuf's DecodeError and friends
            raise ValueError(f"undecodable ReceptorSettings: {exc}") from exc
        rules = {m.receptor_id: tuple(tuple((b.quantity, b.op, b.value) for b in c.bounds) for c in m.clauses)
                 for m in msg.motes}
        unknown = {b[1] for rule in rules.values() for clause in rule for b in clause} - {*COMPARISONS, EVERY}
        if unknown:
            raise ValueError(f"ReceptorSettings of {msg.node!r}: unknown comparison(s) {sorted(unknown)}")
        return cls(msg.node, msg.version, msg.issued_ms, rules, {m.receptor_id: tuple(m.fields) for m in msg.motes
                                                                  if m.fields})
