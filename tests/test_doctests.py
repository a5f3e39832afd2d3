"""Every example in a module's docstrings holds: the doctests of the pure rules (the planner's
passes, the window algebra, topic names, parts) run with the suite, so an example cannot rot."""

from __future__ import annotations

import doctest
import importlib
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ("hifi", "wire", "mdr", "base", "dsp", "glue", "services", "edge")
WITH_EXAMPLES = sorted(
    ".".join(path.relative_to(ROOT).with_suffix("").parts)
    for package in PACKAGES for path in (ROOT / package).rglob("*.py") if ">>> " in path.read_text())


def test_the_modules_with_examples_are_found():
    assert len(WITH_EXAMPLES) >= 10, WITH_EXAMPLES


@pytest.mark.parametrize("module", WITH_EXAMPLES)
def test_the_examples_of(module: str):
    found = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert found.attempted > 0 and found.failed == 0, f"{module}: {found.failed} of {found.attempted} examples fail"
