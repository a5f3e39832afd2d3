"""A benchmark's result as a file: `hifi bench <name> --json FILE` writes its figures with what a
reader needs to compare them — the machine, the git commit, the date, the command line.

    {"bench": "pipeline", "date": "2026-11-27T02:10:00+00:00", "commit": "efbd499…", "dirty": false,
     "machine": {"cores": 2, "memory_gb": 23.5, "cpu": "…", "python": "3.11.7"},
     "argv": ["pipeline", "--duration", "60"], "text": "<the printed table>", "figures": {…}}
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
import os
import platform
import subprocess
from typing import Any

REPOSITORY = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def plain(value: Any) -> Any:
    """`value` as JSON can hold it: dataclasses and mappings as objects, sequences as lists, tuples
    as lists, numbers that are not finite as None.

    >>> from dataclasses import dataclass
    >>> @dataclass
    ... class Step:
    ...     rate: float
    ...     lag: tuple[float, ...]
    >>> plain([Step(1e4, (0.5, float("inf")))])
    [{'rate': 10000.0, 'lag': [0.5, None]}]
    """
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [plain(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=REPOSITORY, capture_output=True, text=True,
                              timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def machine() -> dict[str, Any]:
    """What ran it: cores, memory, the processor's name, Python."""
    memory_kb = 0
    cpu = platform.processor()
    try:
        with open("/proc/meminfo") as fh:
            memory_kb = int(next(line for line in fh if line.startswith("MemTotal")).split()[1])
        with open("/proc/cpuinfo") as fh:
            cpu = next((line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")), cpu)
    except (OSError, StopIteration):
        pass
    return {"cores": os.cpu_count(), "memory_gb": round(memory_kb / 2**20, 1), "cpu": cpu,
            "python": platform.python_version()}


def command_line(argv: list[str], bench: str) -> list[str]:
    """The bench's own arguments, as typed, without where its figures were written.

    >>> command_line(["hifi", "bench", "sharing", "--counts", "1", "10", "--json", "r.json"], "sharing")
    ['sharing', '--counts', '1', '10']
    """
    rest = argv[argv.index(bench) + 1:] if bench in argv else []
    kept: list[str] = [bench]
    skip = False
    for arg in rest:
        if skip or arg.startswith("--json="):
            skip = False
            continue
        skip = arg == "--json"
        if not skip:
            kept.append(arg)
    return kept


def record(bench: str, argv: list[str], text: str, figures: Any) -> dict[str, Any]:
    return {"bench": bench, "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "commit": _git("rev-parse", "HEAD"), "dirty": bool(_git("status", "--porcelain", "--untracked-files=no")),
            "machine": machine(), "argv": argv, "text": text, "figures": plain(figures)}


def write(path: str, result: dict[str, Any]) -> None:
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    with open(path, "w") as fh:
        json.dump(result, fh, indent=1)
        fh.write("\n")


def read_folder(folder: str) -> list[dict[str, Any]]:
    """Every result file in `folder` (*.json with a "bench"), oldest first."""
    results = []
    for name in sorted(os.listdir(folder)):
        if name.endswith(".json"):
            with open(os.path.join(folder, name)) as fh:
                result = json.load(fh)
            if isinstance(result, dict) and "bench" in result:
                results.append(result)
    return sorted(results, key=lambda r: r.get("date", ""))
