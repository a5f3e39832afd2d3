"""`hifi bench NAME` (one entry of services.bench.registry each) and `hifi bench report`."""

from __future__ import annotations

import argparse
import os
import sys

from services.bench.registry import BENCHES
from services.cli.common import CLIError, progress, say, stop_spark

# what each command does, in prose: its --help description and its part of docs/cli.md
DESCRIPTIONS: dict[str, str] = {
    'bench': (
        'run one benchmark and print its figures (`hifi bench --help` lists them, `hifi bench NAME --help` '
        'gives its own options); `--json` also writes the figures with the machine, the git commit and the '
        'date; `report` turns a folder of such files into the [benchmarks page](benchmarks.md). What each one'
        ' measures and how: [how the benchmarks measure](benchmark-methods.md)'
    ),
}


def add_bench(sub: argparse._SubParsersAction) -> None:
    bench = sub.add_parser("bench", help="benchmarks that print figures (and write them with --json)")
    benches = bench.add_subparsers(dest="which", required=True, metavar="BENCH")
    for entry in BENCHES:
        one = benches.add_parser(entry.name, help=entry.summary, description=entry.summary)
        for flag in entry.options:
            one.add_argument(*flag.flags, **flag.settings)
        one.add_argument("--json", metavar="FILE", default=None,
                         help="also write the figures, the machine, the git commit and the date to FILE")
        one.set_defaults(func=cmd_bench, bench=entry)
    report = benches.add_parser("report", help="turn a folder of --json results into docs/benchmarks.md",
                                description="turn a folder of `hifi bench <name> --json` results into a page "
                                            "with a chart per benchmark and the field's published figures")
    report.add_argument("folder", help="the result files (*.json)")
    report.add_argument("--out", default="docs/benchmarks.md", help="the page to write (default docs/benchmarks.md)")
    report.set_defaults(func=cmd_bench_report)


def cmd_bench(args: argparse.Namespace) -> int:
    """`hifi bench <name>`: run it (services.bench.registry), print its table, write --json."""
    from services.bench import results

    outcome = args.bench.run(args)
    say(outcome.text)
    if args.json:
        results.write(args.json, results.record(args.which, results.command_line(sys.argv, args.which),
                                                outcome.text, outcome.figures))
        progress(f"figures written to {args.json}")
    if args.bench.spark:
        stop_spark()
    return 0


def cmd_bench_report(args: argparse.Namespace) -> int:
    """`hifi bench report FOLDER`: docs/benchmarks.md from the result files in FOLDER."""
    from services.bench import publish, results

    if not os.path.isdir(args.folder):
        raise CLIError(f"no such folder: {args.folder}")
    found = results.read_folder(args.folder)
    if not found:
        raise CLIError(f"no result files in {args.folder} (write them with `hifi bench <name> --json FILE`)")
    written = publish.report(found, args.out, args.folder)
    say(f"{args.out}: {len(written)} benchmarks ({', '.join(written)}) from {len(found)} result files")
    return 0
