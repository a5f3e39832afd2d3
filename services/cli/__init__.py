"""The `hifi` command line, one module per command group, each with its commands' parsers,
help and work: `run` (up, agents), `observe` (nodes, views, motes, status, health), `serve` (node,
placement, dashboard, kafka-setup), `query` (query, queries, cancel), `admin` (deploy, certs,
users), `bench`; `app` puts them in one parser; `common` is what they share, `option_types` the
types of their options, `reference` the page docs/cli.md generated from the parser.
`hifi --help` and `hifi COMMAND --help` document every option.

`main`, `build_parser` and `standby_args` are `app`'s, loaded when first asked for: the benchmarks'
registry uses `option_types`, and importing the package must not import every command group."""

from __future__ import annotations

from typing import Any

__all__ = ["build_parser", "main", "standby_args"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from services.cli import app

        return getattr(app, name)
    raise AttributeError(f"module 'services.cli' has no attribute {name!r}")
