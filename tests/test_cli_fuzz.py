"""Every option of every `hifi` command, given hostile values, is taken or refused by argparse in
one usage line naming it (exit code 2), never a trace, and no number taken is one a command
cannot use (`nan`, infinite, beyond what the JVM's int holds). A seeded generator over the
parser's own options, so an option added later is fuzzed too."""

from __future__ import annotations

import argparse
import math
import random

import pytest

from services.cli import build_parser

HOSTILE = ["nan", "inf", "-inf", "-1", "0", "0.0", "1e400", "-1e-400", "99999999999999999999", "2147483648",
           "4294967296", "", " ", "\x00", "\udcff", "\u00b2", "\uff11\uff12", "0x10", "1_000", "--", "-5e3",
           "%s%n", "1" * 5000, "'; touch x; '", "1.5", "7", "60"]


def _parsers(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()):
    """(argv prefix, parser) of every command and subcommand."""
    yield prefix, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _parsers(child, (*prefix, name))


def _fillers(parser: argparse.ArgumentParser) -> list[str]:
    """A harmless value for each positional the command requires."""
    return ["x" for a in parser._actions if not a.option_strings and a.required
            and not isinstance(a, argparse._SubParsersAction) and a.nargs != 0]


def _cases(seed: int = 65, per_option: int = 6):
    rng = random.Random(seed)
    for prefix, parser in _parsers(build_parser()):
        for action in parser._actions:
            if not action.option_strings or action.nargs == 0 or isinstance(action, argparse._HelpAction):
                continue
            for value in rng.sample(HOSTILE, per_option) + [rng.choice(HOSTILE) + rng.choice(HOSTILE)]:
                yield [*prefix, action.option_strings[-1], value, *_fillers(parser)], action.dest


def _usable(value) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return True
    return math.isfinite(value) and abs(value) <= 2**32


def test_every_option_takes_a_usable_value_or_says_why_in_one_line(capsys):
    cases = list(_cases())
    assert len(cases) > 500, "the parser's options were not found"
    refused = 0
    for argv, dest in cases:
        try:
            parsed = build_parser().parse_args(argv)
        except SystemExit as done:
            err = capsys.readouterr().err.strip().splitlines()
            assert done.code == 2 and err and err[-1].startswith("hifi") and ": error: " in err[-1], (argv, err)
            refused += 1
            continue
        value = getattr(parsed, dest)
        for one in value if isinstance(value, list) else [value]:
            assert _usable(one), f"hifi {' '.join(argv[:3])!r} took {one!r}"
    assert refused > len(cases) // 4, "hostile values were mostly taken: the generator lost its teeth"


@pytest.mark.parametrize("argv, says", [
    (["status", "--interval", "nan"], "argument --interval: 'nan' is not a number above 0"),
    (["up", "--trigger-ms", "1e30"], "argument --trigger-ms: '1e30' is not a whole number above 0 and at most"),
    (["up", "--trigger-ms", "99999999999"], "'99999999999' is not a whole number above 0 and at most 2147483647"),
    (["node", "--id", "x", "--metrics-port", "\u00b2"], "'²' is not a port number"),
    (["agents", "--seed", "-1"], "'-1' is not a whole number from 0 to 4294967295"),
])
def test_values_a_command_once_failed_on_are_one_line(argv, says, capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(argv)
    assert says in capsys.readouterr().err
