"""The HiFi SQL syntax tree: plain frozen dataclasses, every node with its position. Pure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Union

from glue.sql.lexer import Pos


@dataclass(frozen=True)
class Name:
    """A column reference, maybe qualified (`rs.tag_id`), or a deployment parameter."""

    name: str
    qualifier: str | None
    pos: Pos


@dataclass(frozen=True)
class Literal:
    value: Any
    pos: Pos


@dataclass(frozen=True)
class Binary:
    op: str          # = != < <= > >= + - * / AND OR
    left: Node
    right: Node
    pos: Pos


@dataclass(frozen=True)
class Unary:
    op: str          # NOT | -
    operand: Node
    pos: Pos


@dataclass(frozen=True)
class InList:
    operand: Node
    values: tuple[Node, ...]
    negated: bool
    pos: Pos


@dataclass(frozen=True)
class Call:
    """An aggregate call: count(*), count(DISTINCT x), sum(x), ...; or a scalar function: product(x)."""

    name: str
    arg: Node | None     # None for count(*)
    distinct: bool
    pos: Pos


@dataclass(frozen=True)
class CompareAll:
    """`left op ALL (subquery)` — the paper's arbitration form."""

    op: str
    left: Node
    subquery: Select
    pos: Pos


@dataclass(frozen=True)
class Interval:
    """`INTERVAL '30' SECOND` or `INTERVAL '30 seconds'` (a duration, or a parameter naming one):
    only in a bound between two joined inputs' times."""

    text: str
    pos: Pos


Node = Union[Name, Literal, Binary, Unary, InList, Call, CompareAll, Interval]  # noqa: UP007


@dataclass(frozen=True)
class WindowClause:
    """`[range by 'R', slide by 'S', sample every 'P', approximate]`, or `[adaptive epoch 'E', delta D]` (range
    holds the epoch)."""

    range: str
    slide: str | None
    pos: Pos
    range_pos: Pos
    slide_pos: Pos | None
    adaptive: bool = False
    delta: float | None = None
    delta_pos: Pos | None = None
    sample: str | None = None        # `, sample every 'P'`: the source's samples on that period only
    sample_pos: Pos | None = None
    approximate_pos: Pos | None = None   # `, approximate`: windows say whether Data Triage sampled them


@dataclass(frozen=True)
class SourceRef:
    name: str
    alias: str | None
    window: WindowClause | None
    pos: Pos


@dataclass(frozen=True)
class JoinClause:
    source: SourceRef
    using: tuple[str, ...]
    on: Node | None
    pos: Pos


@dataclass(frozen=True)
class SelectItem:
    expr: Node
    alias: str | None
    pos: Pos


@dataclass(frozen=True)
class PatternStep:
    """One step of an event pattern: a defined name, or several in any order (`AND(b, c)`); a
    negated step (`NOT b`) is one no row may match there."""

    names: tuple[str, ...]
    negated: bool
    pos: Pos


@dataclass(frozen=True)
class Define:
    name: str
    condition: Node
    pos: Pos


@dataclass(frozen=True)
class PatternClause:
    """`PATTERN SEQ(a, NOT b, c) WITHIN '30 seconds' PARTITION BY tag_id DEFINE a AS ..., ...`."""

    steps: tuple[PatternStep, ...]
    within: str | None
    within_pos: Pos | None
    partition: tuple[Name, ...]
    defines: tuple[Define, ...]
    pos: Pos


@dataclass(frozen=True)
class ChangesClause:
    """`EMIT CHANGES [BY col, ...]`: a row when a key's condition starts and one when it ends,
    instead of every window's rows."""

    by: tuple[Name, ...]
    pos: Pos


@dataclass(frozen=True)
class Select:
    items: tuple[SelectItem, ...]   # empty tuple means `*`
    source: SourceRef
    joins: tuple[JoinClause, ...]
    where: Node | None
    group_by: tuple[Name, ...]
    having: Node | None
    pos: Pos
    pattern: PatternClause | None = None
    changes: ChangesClause | None = None


@dataclass(frozen=True)
class CreateView:
    name: str
    select: Select
    pos: Pos
    name_pos: Pos | None = None


Statement = Union[Select, CreateView]  # noqa: UP007
