"""Fuzzed HiFi SQL, down to the nodes' evaluators: statements mutated from valid ones (a token
dropped, doubled, swapped or replaced by a keyword, an operator, a huge or odd literal) are each
either refused with one line naming its position and the problem, or planned and run bottom-up
over the doors' readings without an error. No other exception, ever: what the planner accepts,
a node can evaluate (a part that fails there restarts instead of the query being refused).
Seeded: every run draws the same statements. Pure."""

from __future__ import annotations

import random
import re

import pytest

from glue.analyzer import analyze
from glue.limits import DEFAULT_LIMITS
from glue.planner import plan_query
from glue.sql.lexer import SqlError
from tests.test_equivalence import CATALOG, feeding, readings, run_bottom_up, standing_tasks

SEEDS = [
    "SELECT receptor_id, count(*) AS n FROM rfid_stream [range by '2 seconds'] GROUP BY receptor_id",
    "SELECT location, count(DISTINCT tag_id) AS tags FROM rfid_stream [range by '4 seconds', slide by '2 seconds'] "
    "JOIN receptor_locations USING (receptor_id) WHERE read_strength >= 0.5 GROUP BY location HAVING count(*) > 2",
    "SELECT tag_id, avg(read_strength) AS s, max(read_strength) - min(read_strength) AS spread FROM rfid_stream "
    "[range by '3 seconds'] GROUP BY tag_id",
    "SELECT tag_id, ts FROM rfid_stream WHERE receptor_id IN ('door1-r1', 'door2-r2') AND NOT read_strength < 0.2",
    "SELECT product(tag_id) AS p, count(*) AS n FROM rfid_stream [range by '2 seconds'] GROUP BY p",
    "SELECT location, tag_estimate(tag_id) AS n FROM rfid_stream [range by '4 seconds'] "
    "JOIN receptor_locations USING (receptor_id) GROUP BY location",
    "SELECT receptor_id, count(*) AS n FROM smoothed_rfid_stream [range by '4 seconds'] GROUP BY receptor_id "
    "EMIT CHANGES",
    "SELECT count(*) AS n FROM rfid_stream [range by '2 seconds'] HAVING count(*) > 3 EMIT CHANGES",
]
VOCABULARY = ["SELECT", "FROM", "WHERE", "GROUP", "BY", "HAVING", "AND", "OR", "NOT", "IN", "JOIN", "USING",
              "DISTINCT", "EMIT", "CHANGES", "count", "sum", "avg", "min", "max", "tag_estimate", "product", "(",
              ")", ",", "*", "+", "-", "/", "=", "<", ">=", "!=", "[", "]", "'", "''", "0", "-1", "1e309",
              "9223372036854775808", "0.5", "'x'", "'\u00e9\u20ac'", "'\ud800'", "tag_id", "ts", "read_strength",
              "window_start", "rfid_stream", "receptor_stream", "location", "range", "slide", "'0 seconds'",
              "'99999999999 days'", "NULL", "TRUE", ";", "--", "AS", "a.tag_id"]
TOKEN = re.compile(r"'[^']*'|\d+\.\d+|\w+|!=|>=|<=|[^\s\w]")
CASES = 600


# a token replaced by one of its kind: what still parses, and must then plan and run or be refused
ALIKE = [["0", "-1", "0.5", "1e308", "9223372036854775807", "2", "100000"],
         ["'door1-r1'", "''", "'\u00e9\u20ac'", "'x' || 'y'", "'2 seconds'", "'0.001 seconds'", "'1 day'"],
         ["tag_id", "receptor_id", "read_strength", "ts", "antenna", "location", "window_start", "n"],
         ["count", "sum", "avg", "min", "max", "tag_estimate", "tag_estimate_low", "product", "indicator"],
         ["+", "-", "*", "/", "=", "!=", "<", ">=", "AND", "OR"]]


def _alike(token: str, rng: random.Random) -> str | None:
    kind = next((k for k in ALIKE if token in k), None)
    if kind is None and token.startswith("'"):
        kind = ALIKE[1]
    if kind is None and token.replace(".", "").isdigit():
        kind = ALIKE[0]
    return rng.choice(kind) if kind else None


def _mutated(rng: random.Random) -> str:
    tokens = TOKEN.findall(rng.choice(SEEDS))
    if rng.random() < 0.5:   # one of a kind replaced: mostly still a statement
        i = rng.randrange(len(tokens))
        alike = _alike(tokens[i], rng)
        if alike is not None:
            tokens[i] = alike
            return " ".join(tokens)
    for _ in range(rng.randint(1, 3)):
        i = rng.randrange(len(tokens))
        action = rng.randrange(4)
        if action == 0 and len(tokens) > 2:
            del tokens[i]
        elif action == 1:
            tokens.insert(i, tokens[i])
        elif action == 2:
            j = rng.randrange(len(tokens))
            tokens[i], tokens[j] = tokens[j], tokens[i]
        else:
            tokens[i] = rng.choice(VOCABULARY)
    return " ".join(tokens)


def _statements() -> list[str]:
    rng = random.Random(20261204)
    return [_mutated(rng) for _ in range(CASES)]


def test_every_fuzzed_statement_is_refused_in_one_line_or_runs_on_the_nodes():
    by_edge = readings(0)
    refused = ran = 0
    for text in _statements():
        try:
            plan = plan_query(analyze(text, CATALOG), CATALOG, "q")
        except SqlError as error:
            message = str(error)
            assert "\n" not in message and len(message) < DEFAULT_LIMITS.query_chars + 200, (text, message)
            assert "Traceback" not in message and message.strip(), (text, message)
            refused += 1
            continue
        try:
            run_bottom_up(feeding(standing_tasks(), [(t.topic, t.plan) for t in plan.tasks]), by_edge, batches=3)
        except Exception as error:  # noqa: BLE001 - what the test is for
            pytest.fail(f"planned, then failed on a node: {text!r}: {error!r}")
        ran += 1
    assert refused > CASES // 3 and ran > 25, (refused, ran)   # both kinds of statement were drawn
