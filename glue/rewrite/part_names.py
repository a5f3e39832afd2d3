"""A part's name: its role and a hash of its plan's JSON (`producer_<12 hex>`), so the same plan at
a node has the same name and a later query reuses the running part. Pure.

A query over a large tree has a part of one role at every node on the way (a producer at each
door, a merge at each warehouse) whose plans differ only in the topics their one source reads.
`PartNames` encodes the first of a role and names the others from its text, their topics put in:
the same text (and name) as encoding each anew, which is most of planning a 1 000-node query.
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import fields

from base.plan import Plan, Source
from base.plan_json import to_json


class PartNames:
    """Names the parts of one query (see the module)."""

    def __init__(self) -> None:
        self._first: dict[str, tuple[Plan, str, str]] = {}   # role -> its first plan, its topics' text, its text

    def name(self, role: str, plan: Plan) -> str:
        return f"{role}_{hashlib.sha1(self._text(role, plan).encode()).hexdigest()[:12]}"

    def _text(self, role: str, plan: Plan) -> str:
        first = self._first.get(role)
        if first is not None:
            model, topics, text = first
            if _same_but_topics(plan, model):
                return text.replace(topics, _topics_text(_one_source(plan).topics))   # type: ignore[union-attr]
        text = to_json(plan)
        source = _one_source(plan)
        if first is None and source is not None and text.count(_topics_text(source.topics)) == 1:
            self._first[role] = (plan, _topics_text(source.topics), text)
        return text


def _topics_text(topics: tuple[str, ...]) -> str:
    """How a Source's topics read in its plan's JSON (to_json: sorted keys, default separators)."""
    return f'"topics": {json.dumps(list(topics))}'


def _one_source(plan: Plan) -> Source | None:
    """The plan's source when it has one and each operator on the way one child."""
    while not isinstance(plan, Source):
        plan = getattr(plan, "child", None)   # type: ignore[assignment]
        if plan is None:   # a union or a join: several children
            return None
    return plan


def _same_but_topics(plan: Plan, model: Plan) -> bool:
    """Whether `plan` is `model` but for the topics its one source reads (`model` has one source)."""
    while True:
        if type(plan) is not type(model):
            return False
        skip = "topics" if isinstance(plan, Source) else "child"
        for name in _names(type(plan)):
            mine, theirs = getattr(plan, name), getattr(model, name)
            if name != skip and mine is not theirs and mine != theirs:   # the parts share most of theirs
                return False
        if isinstance(plan, Source):
            return True
        plan, model = plan.child, model.child   # type: ignore[union-attr]


@functools.cache
def _names(kind: type) -> tuple[str, ...]:
    return tuple(f.name for f in fields(kind))
