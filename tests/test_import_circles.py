"""No module of the project imports, through any chain of imports, a module that imports it: a
circle means two modules that cannot be read, tested or moved apart. Every import counts, those
inside functions too (an import moved into a function to dodge a circle keeps the circle). Pure:
the sources are read as text, nothing is imported."""

from __future__ import annotations

import ast
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("hifi", "services", "glue", "dsp", "base", "mdr", "edge", "wire", "protos")


def _modules() -> dict[str, str]:
    """module name -> its file, for every source file of the project's packages."""
    found = {}
    for package in PACKAGES:
        for folder, _, files in os.walk(os.path.join(ROOT, package)):
            for name in files:
                if name.endswith(".py"):
                    path = os.path.join(folder, name)
                    dotted = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
                    found[dotted.removesuffix(".__init__")] = path
    return found


def _imports(path: str, modules: dict[str, str]) -> set[str]:
    """The project's modules the file at `path` imports (`from a import b`: a.b if it is a module)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(open(path, encoding="utf-8").read(), path)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.update(f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in modules else node.module
                         for alias in node.names)
    return {name for name in names if name in modules}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The groups of two or more modules that reach each other (Tarjan's strongly connected components).

    >>> circles({"a": {"b"}, "b": {"a", "c"}, "c": set()})
    [['a', 'b']]
    >>> circles({"a": {"b"}, "b": {"c"}, "c": set()})
    []
    """
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(start: str) -> None:   # iterative: an import chain may be deeper than Python's recursion
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        while work:
            module, edges = work[-1]
            for target in edges:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    work.append((target, iter(sorted(graph[target]))))
                    break
                if target in stack:
                    low[module] = min(low[module], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[module])
                if low[module] == index[module]:
                    group = []
                    while True:
                        member = stack.pop()
                        group.append(member)
                        if member == module:
                            break
                    if len(group) > 1:
                        found.append(sorted(group))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return sorted(found)


def test_no_module_of_the_project_is_in_an_import_circle():
    modules = _modules()
    graph = {name: _imports(path, modules) - {name} for name, path in modules.items()}
    assert sum(len(targets) for targets in graph.values()) > 500, "the imports were not read"
    assert circles(graph) == []


def test_a_planted_circle_is_found():
    modules = _modules()
    graph = {name: _imports(path, modules) - {name} for name, path in modules.items()}
    graph["wire.kafka.config"] = graph["wire.kafka.config"] | {"wire.kafka.clients"}
    assert any({"wire.kafka.config", "wire.kafka.clients"} <= set(c) for c in circles(graph))
