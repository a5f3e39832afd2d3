"""docs/cli.md is generated from `hifi`'s parser (services.cli.reference), and every command and
option of the parser says what it does."""

import argparse
import pathlib

from services.cli import build_parser
from services.cli.reference import options, render, subcommands

PAGE = pathlib.Path(__file__).resolve().parent.parent / "docs" / "cli.md"


def _every(parser: argparse.ArgumentParser, name: str = "hifi"):
    for sub, (helped, command) in subcommands(parser).items():
        yield f"{name} {sub}", helped or command.description, command
        yield from _every(command, f"{name} {sub}")


def test_the_cli_reference_is_what_the_parser_says():
    assert PAGE.read_text() == render(build_parser()), \
        "docs/cli.md is stale: .venv/bin/python -m services.cli.reference > docs/cli.md"


def test_every_command_and_option_says_what_it_does():
    commands = list(_every(build_parser()))
    assert len(commands) >= 30   # 17 commands and the benchmarks
    assert [name for name, said, _ in commands if not (said or "").strip()] == []
    silent = [f"{name} {'/'.join(a.option_strings) or a.dest}" for name, _, command in commands
              for a in options(command) if not (a.help or "").strip() or a.help == argparse.SUPPRESS]
    assert silent == []
