"""A part: one piece of a query (or of a standing view) on one node, as one value from the planner to the runtime.

The planner (glue.rewrite.distribute) makes a query's parts bottom up; the placement service adds
what the submission decides (readers, where the inputs start, the past it answers from, its
priority), sends each to its node as a `DeployRequest` (`to_proto`) and records it as the node's
desired state in the MDR (`to_json`); the node deploys it from either (`from_proto`, `from_json`),
from its topology's standing views, or from a dead node it adopts (`owner`); the runtime
(dsp.runtime.shared) runs it. Pure: plain data and its encodings, no I/O.

>>> from base.plan import Source, RAW_RFID_SOURCE_COLUMNS
>>> plan = Source(("hifi.raw.door1",), "rfid", RAW_RFID_SOURCE_COLUMNS, "ts", 1000)
>>> part = PartSpec("q1", plan, "hifi.results.q1", node="door1", role="final", priority=2)
>>> PartSpec.from_json("q1", part.to_json(), "door1") == part
True
>>> PartSpec.from_proto(part.to_proto(), "door1") == part
True

What the placement service signs (services.part_signing) is `signed_bytes`: the part as its node
runs it, the node and id included, so a part signed for one node or id is no part of another,
and it is the same bytes whichever form carried it:

>>> from dataclasses import replace
>>> PartSpec.from_proto(part.to_proto(), "door1").signed_bytes() == part.signed_bytes()
True
>>> replace(part, node="door2").signed_bytes() == part.signed_bytes()
False
>>> signature_in(part.to_json(signature=b"\\x01\\x02")), signature_in(part.to_json())
(b'\\x01\\x02', b'')
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field

from base.plan import PLAN_FORMAT, Plan
from base.plan_json import from_json, to_json
from protos import hifi_pb2
from wire.errors import HiFiError
from wire.identity import INTERNAL_READERS
from wire.topics import part_topic


class PartError(HiFiError):
    """A part a node may not run as given (its plan's form, the topic it would write)."""


@dataclass(frozen=True)
class PartSpec:
    query_id: str              # the part's id on its node: `q<hex>`, `view.<name>`, `<owner>:<id>`
    plan: Plan
    topic: str                 # where its output goes: the view it exports, else its query's results
    node: str = ""             # where it runs
    role: str = "view"         # smooth | producer | merge | window | final (planner), view (a node's own)
    export_as: str = ""        # the view its output is exported as ("" for a query's results)
    readers: tuple[str, ...] = INTERNAL_READERS   # who may read that view
    definition: str = ""       # the HiFi SQL that defines that view (a CREATE VIEW's last part)
    start_offsets: dict[str, int] = field(default_factory=dict)   # "topic:partition" -> first offset read
    history_from_ms: int | None = None   # a part over the past: first fed the node's archive from then on
    priority: int = 0          # its lane on the node's constrained uplink (dsp.runtime.uplink): higher first
    owner: str = ""            # the dead node it runs for (adopted: services.adoption), else ""
    reused: bool = False       # planner only: an equal part runs there already (not deployed again)

    def __hash__(self) -> int:   # start_offsets is a dict: a part is known by where and what it is
        return hash((self.node, self.query_id))

    def _fields(self) -> dict:
        return {"plan": to_json(self.plan), "topic": self.topic, "role": self.role, "export_as": self.export_as,
                "readers": list(self.readers), "definition": self.definition, "start_offsets": self.start_offsets,
                "history_from_ms": self.history_from_ms, "priority": self.priority, "owner": self.owner}

    def to_json(self, signature: bytes = b"") -> str:
        """The desired-state form (the MDR's `desired:<node>`), with the placement service's
        signature when given; the node is the hash it is kept in."""
        found = self._fields()
        if signature:
            found["signature"] = base64.b64encode(signature).decode()
        return json.dumps(found)

    def signed_bytes(self) -> bytes:
        """What the placement service signs: every field its node acts on, in one canonical form."""
        return json.dumps({**self._fields(), "node": self.node, "query_id": self.query_id},
                          sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, query_id: str, text: str, node: str) -> PartSpec:
        """The part the MDR's desired state of `node` keeps under `query_id`. Entries written before
        parts had one form (no `topic`: an `output_topic`, "" when exported) are read alike."""
        data = json.loads(text)
        topic = data.get("topic") or part_topic(node, query_id, data.get("export_as", ""),
                                                data.get("output_topic", ""))
        return cls(query_id, from_json(data["plan"]), topic, node, data.get("role", "view"),
                   data.get("export_as", ""), tuple(data.get("readers") or INTERNAL_READERS),
                   data.get("definition", ""), dict(data.get("start_offsets") or {}),
                   data.get("history_from_ms"), int(data.get("priority", 0)), data.get("owner", ""))

    def to_proto(self, prepare: bool = False, signature: bytes = b"") -> hifi_pb2.DeployRequest:
        return hifi_pb2.DeployRequest(
            query_id=self.query_id, plan=hifi_pb2.Plan(format=PLAN_FORMAT, body=to_json(self.plan)),
            export_as=self.export_as, output_topic=self.topic, readers=list(self.readers),
            definition=self.definition, start_offsets=self.start_offsets, prepare=prepare,
            history_from_ms=self.history_from_ms or 0, priority=self.priority, role=self.role,
            signature=signature)

    @classmethod
    def from_proto(cls, request: hifi_pb2.DeployRequest, node: str) -> PartSpec:
        """The part a Deploy asks `node` to run; PartError (PlanError) when its plan is not one."""
        if request.plan.format != PLAN_FORMAT:
            raise PartError(f"plan format must be {PLAN_FORMAT!r}")
        topic = request.output_topic or part_topic(node, request.query_id, request.export_as)
        return cls(request.query_id, from_json(request.plan.body), topic, node, request.role or "view",
                   request.export_as, tuple(request.readers) or INTERNAL_READERS, request.definition,
                   dict(request.start_offsets), request.history_from_ms or None, request.priority)


def signature_in(text: str) -> bytes:
    """The placement service's signature a desired-state entry carries (b"" for none)."""
    try:
        return base64.b64decode(json.loads(text).get("signature") or "", validate=True)
    except (ValueError, AttributeError):
        return b""
