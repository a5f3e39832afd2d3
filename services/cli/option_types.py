"""The types of the CLI's options (argparse `type=`): each value checked where it is typed, so a
mistake is argparse's one usage line naming the option, never a trace from deep in a command
(`nan` seconds, a trigger of 10^30 ms that the JVM cannot hold, a negative count)."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Any

from wire.identity import OPERATOR_PRIORITIES

INT_MAX = 2**31 - 1     # what the JVM and protobuf's int32 hold
FLOAT_MAX = 1e9         # seconds: ~31 years, below what a thread's wait can take


def bounded(kind: Callable[[str], Any], low: float, high: float | None = None, *, above: bool = False
            ) -> Callable[[str], Any]:
    """A finite `kind` (int or float) from `low` (excluded when `above`) to `high` (default:
    INT_MAX for an int, FLOAT_MAX for a float).

    >>> seconds = bounded(float, 0, above=True)
    >>> seconds("2.5")
    2.5
    >>> seconds("nan")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: 'nan' is not a number above 0
    >>> bounded(int, 0)("99999999999")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: '99999999999' is not a whole number from 0 to 2147483647
    """
    top = high if high is not None else (INT_MAX if kind is int else FLOAT_MAX)
    what = "a whole number" if kind is int else "a number"
    said = f"{what} above {low:g}" if above and high is None and kind is float else \
        f"{what} {'above' if above else 'from'} {low:g} {'and at most' if above else 'to'} {_shown(top)}"

    def parse(text: str) -> Any:
        try:
            value = kind(text.strip())
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and (value > low if above else value >= low) and value <= top):
            raise argparse.ArgumentTypeError(f"{text[:40]!r} is not {said}")
        return value

    parse.__name__ = kind.__name__
    return parse


def _shown(number: float) -> str:
    return str(int(number)) if float(number).is_integer() and abs(number) < 1e15 else f"{number:g}"


def positive(kind: Callable[[str], Any]) -> Callable[[str], Any]:
    """A finite `kind` above zero: seconds, rates, counts of things there must be some of."""
    return bounded(kind, 0, above=True)


SEED = bounded(int, 0, 2**32 - 1)   # what every random generator of the project takes


def port(text: str) -> int:
    """A TCP port as an option (or the environment variable its default comes from) gives it."""
    if not text.isascii() or not text.isdigit() or int(text) > 65535:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a port number (0-65535)")
    return int(text)


def megabytes(text: str) -> float:
    """A positive number of megabytes."""
    try:
        return positive(float)(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a positive number of megabytes") from None


def priority(text: str) -> int:
    """A query's priority as the CLI takes it: a whole number in the range an operator may give
    (wire.identity.OPERATOR_PRIORITIES; the placement service narrows a user's)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a whole number") from None
    if value not in OPERATOR_PRIORITIES:
        raise argparse.ArgumentTypeError(f"{value} is outside {OPERATOR_PRIORITIES[0]} to {OPERATOR_PRIORITIES[-1]}")
    return value
