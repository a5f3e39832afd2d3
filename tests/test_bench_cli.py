"""`hifi bench`: each benchmark's own options (services.bench.registry), `--json` and `hifi bench
report` (services.bench.results, services.bench.publish) over a real run of the planning bench."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from services.bench import results
from services.bench.registry import BENCHES
from services.cli import build_parser


@pytest.mark.parametrize("bench", [b.name for b in BENCHES])
def test_every_bench_parses_its_defaults_and_names_its_own_options(bench):
    args = build_parser().parse_args(["bench", bench])
    assert args.bench.name == bench and args.json is None
    flags = [flag for option in args.bench.options for flag in option.flags]
    assert len(flags) == len(set(flags))


def test_an_option_of_another_bench_or_a_bad_value_is_a_usage_error(capsys):
    for argv in (["bench", "sharing", "--rates", "10"], ["bench", "capacity", "--step", "0"],
                 ["bench", "triage", "--latency-target", "soon"], ["bench", "fanin", "--children", "-4"]):
        with pytest.raises(SystemExit) as exit_:
            build_parser().parse_args(argv)
        assert exit_.value.code == 2
    assert "argument --children: '-4' is not a whole number above 0" in capsys.readouterr().err


def test_json_records_the_figures_and_the_report_pages_them(tmp_path):
    folder, out = tmp_path / "results", tmp_path / "docs" / "benchmarks.md"
    run = subprocess.run([sys.executable, "-c", "from services.cli import main; main()", "bench", "planning",
                          "--queries", "12", "--json", str(folder / "planning.json")],
                         capture_output=True, text=True, timeout=120, cwd=results.REPOSITORY)
    assert run.returncode == 0, run.stderr
    [result] = results.read_folder(str(folder))
    assert result["argv"] == ["planning", "--queries", "12"]
    assert result["figures"]["planning"]["queries"] == 12 and result["machine"]["cores"] == os.cpu_count()
    assert result["text"] in run.stdout and len(result["commit"]) == 40
    (folder / "other.json").write_text(json.dumps({"not": "a result"}))
    report = subprocess.run([sys.executable, "-c", "from services.cli import main; main()", "bench", "report",
                             str(folder), "--out", str(out)], capture_output=True, text=True, timeout=120,
                            cwd=results.REPOSITORY)
    assert report.returncode == 0, report.stderr
    page = out.read_text()
    assert "## planning" in page and result["text"].splitlines()[0] in page and "## Not yet recorded" in page
    assert (out.parent / "img" / "bench-planning.png").stat().st_size > 1000
