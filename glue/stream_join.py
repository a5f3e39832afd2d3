"""A query joining streams (or views): its inputs, and its ON and WHERE conditions sorted into
what each input keeps at its producers, the keys that must be equal, the bounds between the
inputs' times, and what is left for the joined rows. A join nothing bounds in time is refused: it
would keep its state for ever. Pure; the analyzer binds names (glue.analyzer).

A time bound compares two inputs' event time columns, either side maybe moved by an INTERVAL:

>>> from glue.sql.parser import parse
>>> where = parse("SELECT a.x FROM s a JOIN s b ON b.ts BETWEEN a.ts AND a.ts + INTERVAL '30' SECOND").joins[0].on
>>> [time_bound(c, {"a": "ts", "b": "ts"}, lambda text, pos: 30_000) for c in conjuncts_of(where)]
[JoinBound(left='b', right='a', low_ms=None, high_ms=0), JoinBound(left='b', right='a', low_ms=-30000, high_ms=None)]
>>> merged_bounds(_)
[JoinBound(left='b', right='a', low_ms=-30000, high_ms=0)]
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from base.plan import Column, Expr, JoinBound, Window
from base.window_join import contradictory, time_reach, unbounded_pair
from glue.sql import ast
from glue.sql.lexer import Pos, SqlError

Duration = Callable[[str, Pos], int]

BOUND_FORM = "b.ts BETWEEN a.ts AND a.ts + INTERVAL '30' SECOND"


@dataclass(frozen=True)
class JoinInput:
    """One input of a stream join: a stream or view under an alias."""

    alias: str
    source: str
    source_kind: str                      # "stream" | "view"
    source_columns: tuple[Column, ...]
    event_time: str
    source_window: Window | None
    predicate: Expr | None = None         # its own conditions, over its columns: kept at its producers


@dataclass(frozen=True)
class StreamJoin:
    inputs: tuple[JoinInput, ...]
    keys: tuple[tuple[str, str], ...]     # qualified columns (`a.tag_id`) that must be equal
    bounds: tuple[JoinBound, ...]

    @property
    def aliases(self) -> tuple[str, ...]:
        return tuple(i.alias for i in self.inputs)

    def describe(self) -> str:
        """`a JOIN b ON a.x = b.x, b within [0, 30] s of a` (for explain; pairs in FROM order)."""
        order = self.aliases.index
        parts = [" = ".join(sorted(pair, key=lambda column: order(column.split(".")[0]))) for pair in self.keys]
        for bound in merged_bounds(self.bounds):
            if order(bound.left) > order(bound.right):
                bound = _flipped(bound)
            low = "-inf" if bound.low_ms is None else f"{bound.low_ms / 1000:g}"
            high = "+inf" if bound.high_ms is None else f"{bound.high_ms / 1000:g}"
            parts.append(f"{bound.right} within [{low}, {high}] s of {bound.left}")
        return f"{' JOIN '.join(self.aliases)} ON {', '.join(parts) or 'TRUE'}"


def _flipped(bound: JoinBound) -> JoinBound:
    """The same bound said from the other side."""
    return JoinBound(bound.right, bound.left, None if bound.high_ms is None else -bound.high_ms,
                     None if bound.low_ms is None else -bound.low_ms)


def conjuncts_of(node: ast.Node | None) -> list[ast.Node]:
    """The top-level AND terms of a condition."""
    if node is None:
        return []
    if isinstance(node, ast.Binary) and node.op == "AND":
        return conjuncts_of(node.left) + conjuncts_of(node.right)
    return [node]


def intervals_in(node: ast.Node) -> Iterator[ast.Interval]:
    if isinstance(node, ast.Interval):
        yield node
    for child in (getattr(node, name, None) for name in ("left", "right", "operand", "arg")):
        if isinstance(child, ast.Interval | ast.Binary | ast.Unary | ast.Call):
            yield from intervals_in(child)


def _time_side(node: ast.Node, times: dict[str, str], duration: Duration) -> tuple[str, int] | None:
    """(alias, offset ms) when `node` is an input's event time, maybe plus or minus an INTERVAL."""
    if isinstance(node, ast.Name):
        return (node.qualifier, 0) if node.qualifier in times and times[node.qualifier] == node.name else None
    if isinstance(node, ast.Binary) and node.op in ("+", "-"):
        time, interval, sign = node.left, node.right, 1 if node.op == "+" else -1
        if node.op == "+" and isinstance(node.left, ast.Interval):   # INTERVAL '5' SECOND + a.ts
            time, interval = node.right, node.left
        side = _time_side(time, times, duration) if isinstance(interval, ast.Interval) else None
        if side is not None:
            assert isinstance(interval, ast.Interval)
            return side[0], side[1] + sign * duration(interval.text, interval.pos)
    return None


def time_bound(node: ast.Node, times: dict[str, str], duration: Duration) -> JoinBound | None:
    """The bound a comparison of two inputs' times sets (`times`: alias -> its event time
    column), or None when `node` is not one."""
    if not isinstance(node, ast.Binary) or node.op not in ("<", "<=", ">", ">=", "="):
        return None
    left, right = _time_side(node.left, times, duration), _time_side(node.right, times, duration)
    if left is None or right is None or left[0] == right[0]:
        return None
    # time(l) + p  op  time(r) + q   <=>   time(r) - time(l)  op'  p - q
    gap = left[1] - right[1]
    low, high = {"<": (gap + 1, None), "<=": (gap, None), ">": (None, gap - 1), ">=": (None, gap),
                 "=": (gap, gap)}[node.op]
    return JoinBound(left[0], right[0], low, high)


def merged_bounds(bounds: tuple[JoinBound, ...]) -> list[JoinBound]:
    """One bound per pair of inputs (the tightest of what was said of them), in the order first said.

    >>> merged_bounds((JoinBound("a", "b", 0, None), JoinBound("b", "a", -5, None)))
    [JoinBound(left='a', right='b', low_ms=0, high_ms=5)]
    """
    merged: dict[tuple[str, str], JoinBound] = {}
    for bound in bounds:
        pair = (bound.left, bound.right)
        if pair not in merged and (bound.right, bound.left) in merged:   # said the other way round
            pair, bound = (bound.right, bound.left), _flipped(bound)
        held = merged.get(pair)
        if held is not None:
            bound = JoinBound(*pair, _tighter(max, held.low_ms, bound.low_ms),
                              _tighter(min, held.high_ms, bound.high_ms))
        merged[pair] = bound
    return list(merged.values())


def _tighter(pick: Callable[[int, int], int], a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else pick(a, b)


def check_bounded(aliases: tuple[str, ...], bounds: tuple[JoinBound, ...], positions: dict[str, Pos],
                  bound_pos: Pos | None) -> None:
    """Refuse a join some pair of whose inputs nothing bounds in time (directly or through
    others), or whose bounds no rows can meet together."""
    reach = time_reach(aliases, bounds)
    pair = unbounded_pair(aliases, reach)
    if pair is not None:
        first, second = pair
        raise SqlError(f"nothing bounds how far apart in time the rows of {first} and {second} may be, so the "
                       f"join would keep its state for ever: bound them, directly ({BOUND_FORM}) or through "
                       f"another input", positions[second].line, positions[second].column)
    if contradictory(aliases, reach):
        at = bound_pos or positions[aliases[0]]
        raise SqlError("the time bounds of this join contradict each other: no rows can meet them all",
                       at.line, at.column)
