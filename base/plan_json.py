"""A plan's JSON form (PLAN_FORMAT), as parts travel from the planner to the nodes: encoded by type,
the expressions a query's parts share encoded once; decoded back to the same operators."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import fields, is_dataclass
from typing import Any

from base.plan import (
    Aggregate,
    AggSpec,
    BinOp,
    Changes,
    Col,
    Expr,
    Filter,
    Func,
    JoinBound,
    Lit,
    LookupJoin,
    Match,
    MatchStep,
    Plan,
    PlanError,
    Project,
    Qualify,
    Smooth,
    Source,
    Union_,
    WindowJoin,
)
from wire.windows import Window, WindowError

_OPERATORS = {cls.__name__.rstrip("_"): cls for cls in (Source, Filter, Project, Aggregate, LookupJoin, Union_,
                                                         Smooth, Qualify, Match, WindowJoin, Changes)}


def _encode(value: Any) -> Any:
    """The JSON form of a plan value, by its type (a plan's view name hashes it: a 1 000-node plan
    encodes thousands of parts, so each type goes straight to its encoder). The parts of one query
    share their expressions and column lists (the same objects), so those are encoded once."""
    kind = type(value)
    if kind in _PLAIN:
        return value
    if kind in _SHARED:
        found = _ENCODED.get(id(value))
        if found is not None and found[0] is value:
            return found[1]
        if len(_ENCODED) >= _ENCODED_MAX:
            _ENCODED.clear()
        encoded = _ENCODERS[kind](value)
        _ENCODED[id(value)] = (value, encoded)   # the value kept: its id cannot name another meanwhile
        return encoded
    encoder = _ENCODERS.get(kind)
    if encoder is not None:
        return encoder(value)
    if isinstance(value, tuple | list):
        return [_encode(v) for v in value]
    if is_dataclass(value):
        return _encode_operator(value)
    return value


_PLAIN = (str, int, float, bool, type(None))


_SHARED = (BinOp, Func, tuple)   # immutable, and shared by the parts of a query: encoded once (to_json


_ENCODED: dict[int, tuple[Any, Any]] = {}   # reads the encodings, never changes them)


_ENCODED_MAX = 50_000


def _encode_operator(value: Any) -> dict[str, Any]:
    names = _FIELD_NAMES.get(type(value))
    if names is None:
        names = _FIELD_NAMES[type(value)] = tuple(f.name for f in fields(value))
    body = {name: _leaf_or_encoded(getattr(value, name)) for name in names}
    if isinstance(value, Source) and not value.sample_ms:
        del body["sample_ms"]   # a plan without it keeps the JSON (and the view names) it had
    if isinstance(value, Aggregate) and not value.annotate:
        del body["annotate"]    # likewise
    return {"op": type(value).__name__.rstrip("_"), **body}


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


_ENCODERS: dict[type, Callable[[Any], Any]] = {
    Col: lambda v: {"col": v.name},
    Lit: lambda v: {"lit": v.value},
    BinOp: lambda v: {"op": v.op, "left": _encode(v.left), "right": _encode(v.right)},
    Func: lambda v: {"fn": v.name, "args": [_encode(a) for a in v.args]},
    Window: lambda v: {"range_ms": v.range_ms, "slide_ms": v.slide_ms},
    AggSpec: lambda v: {f.name: getattr(v, f.name) for f in fields(v)},
    tuple: lambda v: [_leaf_or_encoded(x) for x in v],
    list: lambda v: [_leaf_or_encoded(x) for x in v],
}


def _leaf_or_encoded(value: Any) -> Any:
    return value if type(value) in _PLAIN else _encode(value)


def _decode_expr(data: Any) -> Expr:
    if "col" in data:
        return Col(data["col"])
    if "lit" in data:
        return Lit(data["lit"])
    if "fn" in data:
        return Func(data["fn"], tuple(_decode_expr(a) for a in data["args"]))
    return BinOp(data["op"], _decode_expr(data["left"]), _decode_expr(data["right"]))


def _decode(data: dict) -> Plan:
    op = data.get("op")
    if op not in _OPERATORS:
        raise PlanError(f"unknown plan operator {op!r}")
    if op == "Source":
        return Source(tuple(data["topics"]), data["format"], tuple(tuple(c) for c in data["columns"]),
                      data["event_time"], int(data["watermark_ms"]), bool(data.get("markers", False)),
                      Window(**data["window"]) if data.get("window") else None, int(data.get("sample_ms", 0)))
    if op == "Filter":
        return Filter(_decode(data["child"]), _decode_expr(data["predicate"]))
    if op == "Project":
        return Project(_decode(data["child"]), tuple((n, _decode_expr(e)) for n, e in data["outputs"]))
    if op == "Aggregate":
        window = data.get("window")
        return Aggregate(_decode(data["child"]), tuple(data["keys"]),
                         tuple(AggSpec(**spec) for spec in data["aggregates"]),
                         _decode_expr(data["having"]) if data.get("having") else None,
                         Window(**window) if window else None, bool(data.get("annotate", False)))
    if op == "LookupJoin":
        return LookupJoin(_decode(data["child"]), data["relation"], data["on"],
                          tuple(tuple(c) for c in data["columns"]))
    if op == "Qualify":
        return Qualify(_decode(data["child"]), int(data["period_ms"]), int(data.get("from_ms", 0)))
    if op == "Smooth":
        return Smooth(_decode(data["child"]), int(data["epoch_ms"]), float(data["delta"]), int(data["max_window"]),
                      int(data.get("from_ms", 0)))
    if op == "Match":
        steps = tuple(MatchStep(tuple(s["names"]), tuple(_decode_expr(c) for c in s["conditions"]), bool(s["negated"]))
                      for s in data["steps"])
        return Match(_decode(data["child"]), tuple(data["partition"]), steps, int(data["within_ms"]),
                     tuple(tuple(o) for o in data["outputs"]))
    if op == "WindowJoin":
        return WindowJoin(tuple(_decode(child) for child in data["children"]), tuple(data["aliases"]),
                          tuple((left, right) for left, right in data["keys"]),
                          tuple(JoinBound(b["left"], b["right"], b["low_ms"], b["high_ms"]) for b in data["bounds"]),
                          int(data.get("from_ms", 0)))
    if op == "Changes":
        return Changes(_decode(data["child"]), tuple(data["keys"]), int(data["slide_ms"]))
    return Union_(tuple(_decode(child) for child in data["children"]))


def to_json(plan: Plan) -> str:
    return json.dumps(_encode(plan), sort_keys=True)


def from_json(text: str) -> Plan:
    try:
        return _decode(json.loads(text))
    except (AttributeError, KeyError, TypeError, ValueError) as exc:   # not JSON, or not a plan's fields
        raise PlanError(f"malformed plan JSON: {exc}") from exc
    except WindowError as exc:
        raise PlanError(str(exc)) from exc
