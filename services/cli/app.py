"""The `hifi` command's parser and entry point: every command group's parsers in the order
`hifi --help` lists them, the profile chosen, one line for a user's mistake."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence

from services.cli import admin, bench, observe, query, run, serve
from services.cli.serve import become_from_standby
from wire.errors import HiFiError

# every command's parser, in the order `hifi --help` lists them
COMMANDS: tuple[Callable[[argparse._SubParsersAction], None], ...] = (
    run.add_up, observe.add_nodes, observe.add_views, observe.add_motes, observe.add_status, serve.add_dashboard,
    serve.add_node, serve.add_placement, observe.add_health, admin.add_deploy, query.add_query, admin.add_certs,
    serve.add_kafka_setup, admin.add_users, query.add_queries, query.add_cancel, run.add_agents, bench.add_bench,
)
DESCRIPTIONS = {**run.DESCRIPTIONS, **observe.DESCRIPTIONS, **serve.DESCRIPTIONS, **admin.DESCRIPTIONS,
                **query.DESCRIPTIONS, **bench.DESCRIPTIONS}

# after every command: where the commands that talk to a running hierarchy find it
EPILOG = (
    '`hifi nodes`, `views`, `status`, `dashboard`, `queries`, `query` and `cancel` talk to the running '
    '`hifi up` (its endpoints are in `~/.hifi/run.json`), or to the MDR `HIFI_REDIS_URL` names and the '
    'placement service `HIFI_PLACEMENT` names; with a placement named (or a profile) and no '
    '`HIFI_REDIS_URL`, `nodes`, `views`, `motes` and `status` ask the placement service with your token '
    '(the views you may read, the queries you may touch), so a user with only a token lists too. '
    'A profile names a deployment once: '
    '`~/.config/hifi/config.toml` (or `$HIFI_CONFIG`) holds a table per profile, `[prod]` with '
    '`placement = "host:50050"`, `tls_dir = "~/prod-tls"` (its `ca.pem`) and `token = "hifi_..."`, '
    'what `HIFI_PLACEMENT`, `HIFI_TLS_DIR` and `HIFI_TOKEN` would say; `hifi --profile prod query ...` '
    '(or `HIFI_PROFILE=prod`) uses it, and a `[default]` table serves when none is named. Exit codes: 0 '
    'done (`hifi up` and the services also when stopped by a signal), 2 refused or failed — a mistake in '
    'what was asked (an option, a statement, a file) or a server that said no or cannot be reached — with '
    'one line that says why, 130 interrupted before it could stop cleanly.'
)


def use_profile(name: str) -> None:
    """The chosen profile's settings as the process's HIFI_PLACEMENT / HIFI_TLS_DIR / HIFI_TOKEN:
    one named (`--profile`) over what the environment says, the implicit one under it."""
    from hifi.profiles import profile_settings

    for variable, value in profile_settings(name).items():
        if name:
            os.environ[variable] = value
        else:
            os.environ.setdefault(variable, value)


def version() -> str:
    """The installed package's version (pyproject.toml's), or what a source tree without it is."""
    from importlib import metadata

    try:
        return metadata.version("hifi")
    except metadata.PackageNotFoundError:
        return "(not installed)"


def build_parser() -> argparse.ArgumentParser:
    """`hifi`'s parser: each command's own from COMMANDS, in the order `hifi --help` lists them."""
    parser = argparse.ArgumentParser(prog="hifi", description="HiFi: hierarchical high fan-in stream middleware",
                                     epilog=EPILOG)
    parser.add_argument("--version", action="version", version=f"hifi {version()}")
    parser.add_argument("--profile", default="", metavar="NAME",
                        help="the deployment to reach: a profile of ~/.config/hifi/config.toml (its placement "
                             "address, certificates, token; docs/cli.md). Default $HIFI_PROFILE, else its "
                             "`default` profile if it has one, else the running `hifi up`")
    sub = parser.add_subparsers(dest="command", required=True)
    for add in COMMANDS:
        add(sub)
    for name, command in sub.choices.items():   # what each does, in prose (docs/cli.md shows it too)
        command.description = DESCRIPTIONS.get(name, command.description)
    return parser


def standby_args(argv: Sequence[str]) -> argparse.Namespace:
    """`hifi node --standby`: once the spare knows which node it becomes (services.cli.serve), its
    arguments parsed again under that node's environment."""
    become_from_standby()
    return build_parser().parse_args([a for a in argv if a != "--standby"])


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        use_profile(args.profile)
        if getattr(args, "standby", False):
            args = standby_args(argv if argv is not None else sys.argv[1:])
        return int(args.func(args) or 0)
    except HiFiError as exc:   # a user's mistake or a missing server: the reason, never a stack trace
        print(f"hifi: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
