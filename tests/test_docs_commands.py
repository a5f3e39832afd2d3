"""The docs cannot drift from the code: every `hifi` command line and every SQL statement in
README.md and docs/*.md goes through the CLI's own argument parser and HiFi's SQL parser.

A command line in a shell block must parse whole; one in the prose (often a mention: `hifi certs`,
`hifi query --principal`) must name a real command and only options that command has. A
statement (an `sql` block, the statement of a `hifi query`, or a `SELECT`/`CREATE VIEW` in the
prose that names its source) must parse, unless it elides (`...`, `<column>`).
docs/benchmark-history.md is a record of past runs, their commands as they were then."""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest

from glue.sql.parser import parse
from services.cli import build_parser
from wire.errors import HiFiError

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").glob("*.md") if p.name != "benchmark-history.md")]
FENCE = re.compile(r"```(\w*)\n(.*?)```", re.S)
SPAN = re.compile(r"(?<!`)`([^`]+)`(?!`)")
HIFI = re.compile(r"(?:^|[\s;(])((?:\S*/)?hifi\s.*)", re.S)
ELIDED = re.compile(r"\.\.\.|…|<[a-z][a-z _-]*>")
PARSER = build_parser()


def shell_lines(body: str) -> list[str]:
    """A shell block's commands: continuation lines joined, a quoted argument kept across lines."""
    return [line.strip() for line in re.split(r"\n(?=\S)", body.replace("\\\n", " ")) if line.strip()]


def command_words(text: str) -> list[str] | None:
    """The words after `hifi` of a shell command that runs it (after `docker compose exec x`,
    before a pipe or `&&`), or None when it runs no `hifi`."""
    found = HIFI.search(text)
    if found is None:
        return None
    words = shlex.split(found.group(1), comments=True)
    for end in ("|", "&&", ";", ">", "2>&1"):
        if end in words:
            words = words[:words.index(end)]
    return words[1:]


def subparser(words: list[str]) -> tuple[argparse.ArgumentParser, list[str]]:
    """The parser of the (sub)command `words` name, and the words left after its name."""
    parser, rest = PARSER, list(words)
    while rest:
        actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not actions or rest[0] not in actions[0].choices:
            break
        parser, rest = actions[0].choices[rest[0]], rest[1:]
    return parser, rest


def unknown_options(words: list[str]) -> list[str]:
    """The options `words` give that their command does not have (a mention's check)."""
    parser, rest = subparser(words)
    if any(isinstance(a, argparse._SubParsersAction) for a in parser._actions):
        return []   # no command named (`hifi bench <name> --json`): nothing to check against
    known = {option for action in parser._actions for option in action.option_strings}
    given = [w.strip("[]").split("=")[0] for w in rest if w.strip("[]").startswith("-")]
    return [option for option in given if option not in known]


def parse_error(words: list[str]) -> str:
    """Why the CLI's parser refuses `words` ("" when it takes them)."""
    printed = io.StringIO()
    try:
        with contextlib.redirect_stderr(printed), contextlib.redirect_stdout(io.StringIO()):
            PARSER.parse_args(words)
    except SystemExit as exit_:
        return printed.getvalue().strip().splitlines()[-1] if exit_.code else ""
    return ""


def statement_of(words: list[str]) -> str | None:
    if words[:1] != ["query"]:
        return None
    with contextlib.suppress(SystemExit), contextlib.redirect_stderr(io.StringIO()):
        return PARSER.parse_args(words).sql
    return None


def page_items(page: Path) -> tuple[list[tuple[str, list[str]]], list[tuple[str, list[str]]], list[str]]:
    """A page's command lines in shell blocks, those in its prose (each as (text, words)), and its
    statements."""
    text = page.read_text()
    whole, mentions, statements = [], [], []
    for language, body in FENCE.findall(text):
        if language == "sql":
            statements.append(body)
        elif language in ("sh", "bash", "console", "shell", ""):
            whole += [(line, words) for line in shell_lines(body) if (words := command_words(line)) is not None]
    for span in SPAN.findall(FENCE.sub("", text)):
        line = " ".join(span.split())
        if re.match(r"(SELECT|CREATE VIEW)\b", line, re.I) and re.search(r"\bFROM\b", line, re.I):
            statements.append(line)
        with contextlib.suppress(ValueError):
            if (words := command_words(line)) is not None:
                mentions.append((line, words))
    statements += [sql for _, words in whole + mentions if (sql := statement_of(words))]
    return whole, mentions, [s for s in statements if not ELIDED.search(s)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_command_line_and_statement_in_the_docs_parses(page: Path) -> None:
    whole, mentions, statements = page_items(page)
    wrong = [f"{line!r}: {error}" for line, words in whole if (error := parse_error(words))]
    wrong += [f"{line!r}: no option {', '.join(unknown)} (hifi {' '.join(words[:2])})"
              for line, words in mentions if (unknown := unknown_options(words))]
    wrong += [f"{line!r}: no command {words[0]!r}" for line, words in mentions
              if words and not words[0].startswith("-") and subparser(words)[0] is PARSER
              and not re.fullmatch(r"[A-Z]+|<\w+>", words[0])]
    for sql in statements:
        try:
            parse(sql)
        except HiFiError as exc:
            wrong.append(f"{' '.join(sql.split())[:100]!r}: {exc}")
    assert not wrong, f"{page.name}:\n" + "\n".join(wrong)


def test_the_docs_check_finds_what_it_claims_to() -> None:
    """The extraction itself: a shell block's command, a mention's unknown option, a statement."""
    page = ROOT / "docs" / "sql.md"
    whole, mentions, statements = page_items(page)
    assert any(words[:1] == ["query"] for _, words in whole)
    assert len(statements) >= 10
    assert parse_error(["query", "--no-such-flag", "SELECT 1"]).endswith("--no-such-flag")
    assert unknown_options(["bench", "capacity", "--readings", "5"]) == ["--readings"]
    assert unknown_options(["bench", "capacity", "[--spark-cluster]"]) == []


def test_the_dashboards_example_query_parses() -> None:
    page = (ROOT / "services" / "dashboard_assets" / "index.html").read_text()
    examples = re.findall(r'placeholder="((?:SELECT|CREATE VIEW)[^"]+)"', page)
    assert examples, "the query box shows an example"
    for sql in examples:
        parse(sql)
