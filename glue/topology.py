"""Topology files (deploy/topologies/*.yaml): load, validate, and answer tree questions. Pure.

Schema (documented in deploy/topologies/README.md):
  name, parameters {name: value}, nodes [{id, tier, parent, alternates, listen, metrics_port}],
  receptors [{id, kind, node, location, area, x, y}], relations [{name, columns, rows, replicas}],
  views [{sql | name + operator, tiers | nodes, materialize, readers, alert, ...operator options}],
  stream_readers {raw stream: [principal | role:NAME]},
  scenario (file or {...})
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import yaml

from base.plan import RAW_STREAMS
from glue.sql import ast
from glue.sql.lexer import SqlError
from glue.sql.parser import parse
from wire.bounded_yaml import BoundedLoader
from wire.errors import HiFiError
from wire.identity import IdentityError, named_readers
from wire.windows import duration_ms

TIERS = ("edge", "aggregation", "core")
RECEPTOR_KINDS = ("rfid", "mote")


class TopologyError(HiFiError):
    """A topology that cannot be run; the message names the file line and the problem."""


MAX_BYTES = 4 << 20   # a topology of thousands of nodes is well under this
class _LineLoader(BoundedLoader):
    """A bounded safe loader (wire.bounded_yaml) that records each mapping's line as the key '__line__'."""


def _construct_mapping(loader: _LineLoader, node: yaml.MappingNode) -> dict[str, Any]:
    mapping = loader.construct_mapping(node, deep=True)
    mapping["__line__"] = node.start_mark.line + 1
    return mapping


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


@dataclass(frozen=True)
class NodeSpec:
    id: str
    tier: str
    parent: str
    alternates: tuple[str, ...]
    listen: str
    line: int
    metrics_port: int = 0    # where the node serves /metrics (0: any free port, recorded in the MDR)
    uplink_bytes_per_s: int = 0   # its link to its parent, emulated (dsp.runtime.uplink); 0: unconstrained
    latency_target_ms: int = 0    # an edge over it triages its input (dsp.triage); 0: always exact


@dataclass(frozen=True)
class ReceptorSpec:
    id: str
    kind: str
    node: str
    location: str
    area: str
    x: float
    y: float
    options: dict[str, Any]


@dataclass(frozen=True)
class RelationSpec:
    name: str
    columns: tuple[tuple[str, str], ...]
    rows: tuple[tuple, ...]
    replicas: tuple[str, ...]


OPERATORS = ("qualify",)   # views SQL cannot say (glue.operators builds their plans)


@dataclass(frozen=True)
class ViewSpec:
    name: str
    sql: str                        # CREATE VIEW <name> AS ..., planned like a user's query ("" for an operator)
    operator: str                   # a named operator (OPERATORS) for what SQL cannot say, else ""
    tiers: tuple[str, ...]
    options: dict[str, Any]         # the operator's options
    definition: str                 # what the view holds: its SQL, or the operator's description
    materialize: bool
    readers: tuple[str, ...]
    nodes: tuple[str, ...] = ()     # placed at these nodes (instead of every node of `tiers`)
    alert: str = ""                 # the dashboard shows its rows as events of this kind ("" for none)
    priority: int = 0               # its lane on constrained uplinks: higher goes first (dsp.runtime.uplink)


@dataclass
class Topology:
    name: str
    nodes: dict[str, NodeSpec]
    receptors: list[ReceptorSpec]
    relations: list[RelationSpec]
    views: list[ViewSpec]
    parameters: dict[str, Any]
    scenario: dict[str, Any] | str   # a scenario file (relative to this one) or one inline (edge.scenario)
    source: str = ""
    # raw stream -> who may read it (principals, role:NAME); a stream not named is open to all
    stream_readers: dict[str, tuple[str, ...]] = field(default_factory=dict)
    _children: dict[str, list[str]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self._children = {node_id: [] for node_id in self.nodes}
        for spec in self.nodes.values():
            if spec.parent:
                self._children[spec.parent].append(spec.id)

    @property
    def root(self) -> str:
        return next(n.id for n in self.nodes.values() if not n.parent)

    def children(self, node_id: str) -> list[str]:
        return list(self._children[node_id])

    def ancestors(self, node_id: str) -> list[str]:
        chain = []
        parent = self.nodes[node_id].parent
        while parent:
            chain.append(parent)
            parent = self.nodes[parent].parent
        return chain

    def bottom_up(self) -> Iterator[NodeSpec]:
        """Nodes ordered children before parents."""
        return iter(sorted(self.nodes.values(), key=lambda n: -len(self.ancestors(n.id))))

    def edge_nodes(self) -> list[str]:
        return [n.id for n in self.nodes.values() if n.tier == "edge"]

    def receptors_of(self, node_id: str) -> list[ReceptorSpec]:
        return [r for r in self.receptors if r.node == node_id]

    def views_at(self, node_id: str) -> list[ViewSpec]:
        tier = self.nodes[node_id].tier
        return [v for v in self.views if (node_id in v.nodes if v.nodes else tier in v.tiers)]


def _port(value: object, line: int, node_id: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= 65535:
        raise TopologyError(f"line {line}: node {node_id!r}: metrics_port must be a port number 0-65535, not {value!r}")
    return value


def _need(item: dict, key: str, where: str) -> Any:
    if key not in item or item[key] in (None, ""):
        raise TopologyError(f"line {item.get('__line__', '?')}: {where} has no '{key}'")
    return item[key]


def _clean(item: dict) -> dict[str, Any]:
    return {k: v for k, v in item.items() if k != "__line__"}


def parse_topology(text: str, source: str = "<topology>") -> Topology:
    """The topology `text` describes; TopologyError names the line and the problem of anything
    else (never another exception: tests/test_topology.py fuzzes it)."""
    if len(text) > MAX_BYTES:
        raise TopologyError(f"{source}: {len(text):,} characters; a topology is at most {MAX_BYTES:,}")
    try:
        doc = yaml.load(text, Loader=_LineLoader)  # noqa: S506 - _LineLoader is a SafeLoader
    except yaml.YAMLError as exc:
        raise TopologyError(f"{source}: not valid YAML: {_yaml_problem(exc)}") from None
    if not isinstance(doc, dict):
        raise TopologyError(f"{source}: a topology is a mapping with 'nodes', 'receptors', ...")
    for key in ("nodes", "receptors", "relations", "views"):
        _entries(doc, key)
    for key in ("parameters", "stream_readers"):   # (a scenario: a mapping or the path of its file)
        if not isinstance(doc.get(key) or {}, dict):
            raise TopologyError(f"{source}: {key!r} is a mapping, not {_shown(doc[key])}")
    try:
        return _parse(doc, source)
    except (AttributeError, TypeError, ValueError, KeyError, IndexError) as exc:   # a value of the wrong shape
        raise TopologyError(f"{source}: a value is not of the shape a topology's is ({_shown(exc)})") from None


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """Where and what, in one line."""
    mark = getattr(exc, "problem_mark", None)
    problem = " ".join(str(getattr(exc, "problem", None) or exc).split())[:200]
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem}" if mark is not None else problem


def _shown(value: object) -> str:
    return repr(" ".join(str(value).split())[:80])


def _entries(doc: dict, key: str) -> list[dict]:
    """`doc[key]`, checked to be a list of mappings (each a node, receptor, relation or view)."""
    items = doc.get(key) or []
    if not isinstance(items, list):
        raise TopologyError(f"line {doc.get('__line__', 1)}: {key!r} is a list of mappings, not {_shown(items)}")
    for n, item in enumerate(items, 1):
        if not isinstance(item, dict):
            raise TopologyError(f"line {doc.get('__line__', 1)}: {key!r} is a list of mappings; its item {n} "
                                f"is {_shown(item)}")
    return items


def _number(item: dict, key: str, where: str) -> float:
    value = item.get(key, 0.0)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TopologyError(f"line {item.get('__line__', '?')}: {where}: {key} is a number, not {_shown(value)}")
    return float(value)


def _parse(doc: dict, source: str) -> Topology:

    nodes: dict[str, NodeSpec] = {}
    for item in doc.get("nodes") or []:
        node_id = str(_need(item, "id", "a node"))
        line = item["__line__"]
        if not re.fullmatch(r"[A-Za-z0-9_-]+", node_id):
            raise TopologyError(f"line {line}: node id {node_id!r} may hold only letters, digits, '_' and '-'")
        if node_id in nodes:
            raise TopologyError(f"line {line}: duplicate node id {node_id!r} (first at line {nodes[node_id].line})")
        tier = str(_need(item, "tier", f"node {node_id!r}"))
        if tier not in TIERS:
            raise TopologyError(f"line {line}: node {node_id!r} has unknown tier {tier!r} (one of {', '.join(TIERS)})")
        nodes[node_id] = NodeSpec(node_id, tier, str(item.get("parent") or ""),
                                  tuple(str(a) for a in item.get("alternates") or []), str(item.get("listen", "")),
                                  line, _port(item.get("metrics_port", 0), line, node_id),
                                  byte_rate(item.get("uplink"), f"line {line}: node {node_id!r}"),
                                  _latency_target(item.get("latency_target"), tier, f"line {line}: node {node_id!r}"))
    if not nodes:
        raise TopologyError(f"{source}: no nodes")
    for spec in nodes.values():
        for other in (spec.parent, *spec.alternates):
            if other and other not in nodes:
                raise TopologyError(f"line {spec.line}: node {spec.id!r} names unknown parent {other!r}")
    for spec in nodes.values():
        seen = [spec.id]
        parent = spec.parent
        while parent:
            if parent in seen:
                cycle = " -> ".join([*seen, parent])
                raise TopologyError(f"line {spec.line}: node {spec.id!r} is in a parent cycle: {cycle}")
            seen.append(parent)
            parent = nodes[parent].parent
    roots = [n.id for n in nodes.values() if not n.parent]
    if len(roots) != 1:
        raise TopologyError(f"{source}: a topology has exactly one root (a node without parent); found {roots}")

    receptors: list[ReceptorSpec] = []
    seen_receptors: set[str] = set()
    for item in doc.get("receptors") or []:
        rid = str(_need(item, "id", "a receptor"))
        line = item["__line__"]
        owner = str(_need(item, "node", f"receptor {rid!r}"))
        if rid in seen_receptors:
            raise TopologyError(f"line {line}: duplicate receptor id {rid!r}")
        seen_receptors.add(rid)
        if owner not in nodes or nodes[owner].tier != "edge":
            raise TopologyError(f"line {line}: receptor {rid!r} is attached to {owner!r}, which is not an edge node")
        kind = str(item.get("kind", "rfid"))
        if kind not in RECEPTOR_KINDS:
            raise TopologyError(f"line {line}: receptor {rid!r} has unknown kind {kind!r}")
        known = {"id", "kind", "node", "location", "area", "x", "y", "__line__"}
        receptors.append(ReceptorSpec(rid, kind, owner, str(item.get("location", owner)), str(item.get("area", "")),
                                      _number(item, "x", f"receptor {rid!r}"), _number(item, "y", f"receptor {rid!r}"),
                                      {k: v for k, v in item.items() if k not in known}))

    relations = [RelationSpec(str(_need(r, "name", "a relation")),
                              tuple(tuple(c) for c in _need(r, "columns", "relation")),
                              tuple(tuple(row) for row in r.get("rows") or []),
                              tuple(r.get("replicas") or ["*"])) for r in doc.get("relations") or []]

    views = [_view(item, nodes) for item in doc.get("views") or []]
    stream_readers = {}
    for name, readers in _strip_lines(doc.get("stream_readers") or {}).items():
        if name not in RAW_STREAMS:
            raise TopologyError(f"{source}: stream_readers names {name!r}, which is not a raw stream "
                                f"({', '.join(RAW_STREAMS)})")
        if not isinstance(readers, list) or not readers:
            raise TopologyError(f"{source}: stream_readers of {name!r} is a list of principals or role:NAME")
        try:
            stream_readers[str(name)] = named_readers([str(r) for r in readers])
        except IdentityError as exc:
            raise TopologyError(f"{source}: stream_readers of {name!r}: {exc}") from None

    return Topology(name=str(doc.get("name", source)), nodes=nodes, receptors=receptors, relations=relations,
                    views=views, parameters=_clean(doc.get("parameters") or {}),
                    scenario=_strip_lines(doc.get("scenario") or {}), source=source, stream_readers=stream_readers)


def _strip_lines(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_lines(v) for k, v in value.items() if k != "__line__"}
    if isinstance(value, list):
        return [_strip_lines(v) for v in value]
    return value


def load_topology(path: str) -> Topology:
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_BYTES + 1)
        text = data.decode("utf-8")
    except OSError as exc:
        raise TopologyError(f"cannot read topology {path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise TopologyError(f"{path}: not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset "
                            f"{exc.start})") from None
    try:
        return parse_topology(text, path)
    except TopologyError as exc:
        message = str(exc)
        raise TopologyError(message if message.startswith(path) else f"{path}: {message}") from None




def _view(item: dict[str, Any], nodes: dict[str, NodeSpec]) -> ViewSpec:
    """A view entry: HiFi SQL (`sql: CREATE VIEW name AS ...`), or a named operator (`name`, `operator`)."""
    line = item["__line__"]
    sql = str(item.get("sql") or "").strip()
    operator = str(item.get("operator") or "")
    if sql and operator:
        raise TopologyError(f"line {line}: a view is either `sql` or an `operator`, not both")
    if sql:
        name = _created_view(sql, line)
        if item.get("name") not in (None, name):
            raise TopologyError(f"line {line}: view {item['name']!r}: its SQL creates {name!r}")
    else:
        name = str(_need(item, "name", "a view"))
        if operator not in OPERATORS:
            raise TopologyError(f"line {line}: view {name!r} needs `sql: CREATE VIEW {name} AS ...` "
                                f"(or an operator: {', '.join(OPERATORS)})")
    placed = [str(n) for n in item.get("nodes") or []]
    unknown = [n for n in placed if n not in nodes]
    if unknown:
        raise TopologyError(f"line {line}: view {name!r} placed at unknown node(s) {', '.join(unknown)}")
    tiers = sorted({nodes[n].tier for n in placed}) if placed else item.get("tiers") or [item.get("tier")]
    for tier in tiers:
        if tier not in TIERS:
            raise TopologyError(f"line {line}: view {name!r} placed at unknown tier {tier!r}")
    known = {"name", "sql", "operator", "tiers", "tier", "nodes", "definition", "materialize", "readers", "alert",
             "priority"}
    priority = item.get("priority", 0)
    if not isinstance(priority, int) or isinstance(priority, bool):
        raise TopologyError(f"line {line}: view {name!r}: priority {priority!r} is not a whole number")
    return ViewSpec(name, sql, operator, tuple(tiers), {k: v for k, v in _clean(item).items() if k not in known},
                    sql or str(item.get("definition", "")).strip(), bool(item.get("materialize", True)),
                    _view_readers(item, name, line), tuple(placed), str(item.get("alert") or ""), priority)


def _view_readers(item: dict, name: str, line: int) -> tuple[str, ...]:
    """Who may read a standing view: the operators (and admins) when the file says nothing — a
    view is opened to users by naming them, never by leaving it out; a `readers` it gives must be
    a non-empty list of readers (`[]`, `null` or `alice` are refused, not read as `*`)."""
    if "readers" not in item:
        return ("role:operator",)
    readers = item["readers"]
    if not isinstance(readers, list) or not all(isinstance(r, str) for r in readers):
        raise TopologyError(f"line {line}: view {name!r}: readers is a list, e.g. [role:operator, alice] "
                            f"(got {str(readers)[:60]!r})")
    try:
        return named_readers(readers)
    except IdentityError as exc:
        raise TopologyError(f"line {line}: view {name!r}: readers: {exc}") from None


_RATE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(b|bytes|kb|mb)?\s*(?:/\s*s|per second)?\s*", re.IGNORECASE)
_RATE_UNITS = {"": 1, "b": 1, "bytes": 1, "kb": 1000, "mb": 1_000_000}


def byte_rate(value: object, where: str) -> int:
    """Bytes per second of an `uplink: 20 KB/s` (a bare number: bytes/s; absent: 0, unconstrained)."""
    if value in (None, "", 0):
        return 0
    match = _RATE.fullmatch(str(value))
    if not match or float(match.group(1)) <= 0:
        raise TopologyError(f"{where}: uplink {value!r} is not a byte rate (write e.g. '20 KB/s', '1 MB/s')")
    return int(float(match.group(1)) * _RATE_UNITS[(match.group(2) or "").lower()])


def _latency_target(value: object, tier: str, where: str) -> int:
    """Milliseconds of a `latency_target: 2 seconds` (absent: 0, no Data Triage); edges only,
    whose raw readers triage."""
    if value in (None, "", 0):
        return 0
    if tier != "edge":
        raise TopologyError(f"{where}: latency_target is for edge nodes (their raw readers triage), not {tier}")
    try:
        target = duration_ms(value if isinstance(value, int | float) else str(value))
    except HiFiError:
        target = 0
    if target <= 0:
        raise TopologyError(f"{where}: latency_target {value!r} is not a positive duration (write e.g. '2 seconds')")
    return target


def _created_view(sql: str, line: int) -> str:
    try:
        statement = parse(sql)
    except SqlError as exc:
        raise TopologyError(f"line {line}: view SQL: {exc}") from None
    if not isinstance(statement, ast.CreateView):
        raise TopologyError(f"line {line}: a view's sql is a CREATE VIEW <name> AS SELECT ... statement")
    return statement.name
