"""Admission limits: what a query may cost before anything is deployed, and which names may
become parts of topic names. Pure.

A query over the limits is refused with a positioned error naming the limit and the topology
parameter that sets it (`parameters:` of the topology, loaded into the MDR).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from glue.sql.lexer import Pos, SqlError

# A view's name becomes part of Kafka topics, MDR keys and checkpoint paths.
NAME_PATTERN = re.compile(r"[a-z_][a-z0-9_]{0,99}")


@dataclass(frozen=True)
class Limits:
    """Each field is set by the topology parameter `limit_<field>`."""

    query_chars: int = 65_536       # the text of one statement
    nesting: int = 32               # parentheses, NOT / minus chains, subqueries; and the depth of its tree
    windows_per_row: int = 100      # range / slide: how many windows each row falls in
    window_panes: int = 3_600       # range / pane: the panes a window is assembled from (its state)
    min_pane_ms: int = 100          # the smallest pane (gcd of range and slide) a node runs

    @classmethod
    def from_parameters(cls, parameters: Mapping[str, Any]) -> Limits:
        lowered = {str(k).lower(): v for k, v in parameters.items()}
        found = {}
        for f in fields(cls):
            value = lowered.get(f"limit_{f.name}")
            if value is not None:
                try:
                    found[f.name] = int(value)
                except (TypeError, ValueError):
                    raise SqlError(f"parameter limit_{f.name} must be a whole number (got {value!r})") from None
        return cls(**found)

    def check_text(self, text: str) -> None:
        if len(text) > self.query_chars:
            raise SqlError(f"the query is {len(text)} characters; at most {self.query_chars} are admitted "
                           f"(parameter limit_query_chars)", 1, 1)

    def check_window(self, range_ms: int, slide_ms: int, pos: Pos) -> None:
        pane = _gcd(range_ms, slide_ms)
        per_row = -(-range_ms // slide_ms)
        problem = None
        if per_row > self.windows_per_row:
            problem = (f"range {range_ms} ms / slide {slide_ms} ms puts each row in {per_row} windows; at most "
                       f"{self.windows_per_row} are admitted (parameter limit_windows_per_row)")
        elif range_ms // pane > self.window_panes:
            problem = (f"a window of {range_ms} ms is assembled from {range_ms // pane} panes of {pane} ms; at most "
                       f"{self.window_panes} are admitted (parameter limit_window_panes)")
        elif pane < self.min_pane_ms:
            problem = (f"panes of {pane} ms (the gcd of range and slide) are below the {self.min_pane_ms} ms "
                       f"admitted (parameter limit_min_pane_ms)")
        if problem is not None:
            raise SqlError(f"window over the admission limits: {problem}", pos.line, pos.column)


DEFAULT_LIMITS = Limits()


def _gcd(a: int, b: int) -> int:
    while b:
        a, b = b, a % b
    return a


def check_name(name: str, what: str = "view", pos: Pos | None = None) -> None:
    """A name that becomes part of topic names: lower-case letters, digits and '_', not first a digit."""
    if not NAME_PATTERN.fullmatch(name):
        message = (f"{what} name {name!r} cannot name a topic: use letters, digits and '_' "
                   f"(not first a digit), at most 100")
        raise SqlError(message, pos.line, pos.column) if pos else SqlError(message)
