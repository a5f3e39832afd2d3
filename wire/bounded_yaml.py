"""YAML the project reads from its users (topologies, scenarios): safe, and refused with its line
where it would exhaust the reader — aliases (a few nested ones expand to billions of entries) and
deep nesting."""

from __future__ import annotations

from typing import Any

import yaml

MAX_DEPTH = 64        # nesting: a topology's or a scenario's deepest is ~6


class BoundedLoader(yaml.SafeLoader):
    """A safe loader that refuses aliases and nesting deeper than MAX_DEPTH (a MarkedYAMLError)."""

    def compose_node(self, parent, index):  # type: ignore[no-untyped-def]
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark
            raise yaml.MarkedYAMLError(problem="no YAML aliases (*name) here: write the value out",
                                       problem_mark=mark)
        depth = getattr(self, "_depth", 0)
        if depth >= MAX_DEPTH:
            raise yaml.MarkedYAMLError(problem=f"nested more than {MAX_DEPTH} deep",
                                       problem_mark=self.peek_event().start_mark)
        self._depth = depth + 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth = depth


def load_bounded(text: str) -> Any:
    """`text` as YAML through BoundedLoader (yaml.YAMLError when it is not, or too much)."""
    return yaml.load(text, Loader=BoundedLoader)  # noqa: S506 - BoundedLoader is a SafeLoader
