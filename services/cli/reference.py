"""docs/cli.md, generated from `hifi`'s parser (services.cli): every command with what it does,
its usage and a table of its options, each one's help text. One source of truth: the parser; a
test fails when the file differs from what this renders, or when a command or an option has no
help. Regenerate with `.venv/bin/python -m services.cli.reference > docs/cli.md`."""

from __future__ import annotations

import argparse

HEADER = """# The hifi command

After set-up it is `.venv/bin/hifi` (or `hifi` with the venv activated). `hifi COMMAND --help`
says the same as this page, which is generated from it (`services/cli/reference.py`).
"""


def subcommands(parser: argparse.ArgumentParser) -> dict[str, tuple[str, argparse.ArgumentParser]]:
    """A parser's commands: name -> (its one-line help, its parser), in the order `--help` lists them."""
    found: dict[str, tuple[str, argparse.ArgumentParser]] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            found.update((name, (helps.get(name, ""), command)) for name, command in action.choices.items())
    return found


def options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """A parser's arguments and options but its help and its commands."""
    return [a for a in parser._actions if not isinstance(a, argparse._HelpAction | argparse._SubParsersAction)]


def _text(text: str) -> str:
    """`text` on one line for Markdown: an angle bracket outside code is shown, not taken for HTML.

    >>> _text("default: <state dir>/x, `<node>.log`")
    'default: &lt;state dir>/x, `<node>.log`'
    """
    pieces = " ".join(text.split()).split("`")
    return "`".join(piece.replace("<", "&lt;") if i % 2 == 0 else piece for i, piece in enumerate(pieces))


def _cell(text: str) -> str:
    return _text(text).replace("|", "\\|")


def _option(action: argparse.Action) -> str:
    """`--flag VALUE` (or a positional's name) as `--help` shows it.

    >>> parser = argparse.ArgumentParser()
    >>> since, keep = parser.add_argument("--since", metavar="T"), parser.add_argument("--keep", action="store_true")
    >>> _option(since), _option(keep)
    ('`--since T`', '`--keep`')
    """
    if not action.option_strings:
        return f"`{action.metavar or action.dest}`"
    value = "" if action.nargs == 0 else f" {action.metavar or action.dest.upper()}"
    return "`" + ", ".join(action.option_strings) + value + "`"


def _help(action: argparse.Action) -> str:
    text = action.help or ""
    return text % {"default": action.default, "prog": ""} if "%(" in text else text


def _section(name: str, helped: str, parser: argparse.ArgumentParser, level: int) -> list[str]:
    lines = [f"{'#' * level} `{name}`", "", " ".join(parser.format_usage().removeprefix("usage: ").split()), ""]
    lines[2] = f"`{lines[2]}`"
    said = parser.description or helped   # the prose, else the one line `hifi --help` gives
    if said:
        lines += [_text(said), ""]
    rows = options(parser)
    if rows:
        lines += ["| option | what it does |", "|---|---|"]
        lines += [f"| {_cell(_option(a))} | {_cell(_help(a))} |" for a in rows]
        lines.append("")
    for sub, (sub_help, command) in subcommands(parser).items():
        lines += _section(f"{name} {sub}", sub_help, command, level + 1)
    return lines


def render(parser: argparse.ArgumentParser) -> str:
    """The whole page."""
    lines = [HEADER]
    for name, (helped, command) in subcommands(parser).items():
        lines += _section(f"hifi {name}", helped, command, 2)
    if parser.epilog:
        lines += [_text(parser.epilog), ""]
    return "\n".join(lines).rstrip() + "\n"


if __name__ == "__main__":
    from services.cli import build_parser

    print(render(build_parser()), end="")
