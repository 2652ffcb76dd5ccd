"""``guard baseline refresh`` and ``guard warm-cache``."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from guard.base import text
from guard.base.errors import ExitCode
from guard.commands import report as report_command
from guard.commands.common import (
    add_common,
    check_outputs,
    measure_options,
    save_run,
    suite_from,
    write_summary,
)
from guard.ops.baseline import refresh_baseline
from guard.ops.measure import DEFAULT_BASELINES, DEFAULT_SUITE
from guard.ops.resources import warm_cache
from guard.report import terminal


def cmd_baseline_refresh(args: argparse.Namespace, argv: Sequence[str]) -> int:
    suite = suite_from(args)
    check_outputs(args, results_file=bool(args.out))
    progress = terminal.ProgressPrinter(not args.quiet)
    try:
        outcome = refresh_baseline(
            suite, args.dir, opts=measure_options(args), progress=progress, allow_cpu=args.allow_cpu
        )
    finally:
        progress.close()
    if args.out:
        save_run(args, outcome.run)
    report_command.append_history(args, outcome.run)
    rows = [
        [
            c.case_id,
            text.fmt_time(c.old_median),
            text.fmt_time(c.new_median),
            text.fmt_ratio(c.ratio),
        ]
        for c in outcome.changes
    ]
    if args.json:
        terminal.emit_json(
            {
                "path": str(outcome.path),
                "changes": [
                    {"id": c.case_id, "old_median_s": c.old_median, "new_median_s": c.new_median}
                    for c in outcome.changes
                ],
            }
        )
    else:
        terminal.print_table(
            ["case", "old median", "new median", "new/old"],
            rows,
            title=f"baseline written: {outcome.path}",
        )
    md = (
        f"## Baseline refreshed: {text.md_code(outcome.path)}\n\n"
        + text.md_table(["case", "old median", "new median", "new/old"], rows)
        + "\n"
    )
    write_summary(md, args.markdown)
    return 0


def cmd_warm_cache(args: argparse.Namespace, argv: Sequence[str]) -> int:
    suite = suite_from(args)
    progress = terminal.ProgressPrinter(not args.quiet)
    try:
        outcome = warm_cache(
            suite,
            args.dest,
            opts=measure_options(args),
            progress=progress,
            with_resources=not args.no_resources,
        )
    finally:
        progress.close()
    lines = [
        f"trusted cache written: {outcome.path} ({outcome.cases} case(s), {outcome.seconds:.0f} s)",
        *(f"failed to build: {f}" for f in outcome.failed),
    ]
    if outcome.resources:
        lines.append(f"compiler resources not cached: {outcome.resources}")
    if args.json:
        terminal.emit_json(
            {
                "path": str(outcome.path),
                "cases": outcome.cases,
                "failed": list(outcome.failed),
                "resources": outcome.resources,
                "seconds": outcome.seconds,
            }
        )
    else:
        print("\n".join(text.one_line(line) for line in lines))
    return int(ExitCode.INFRA) if outcome.failed else 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "warm-cache",
        help="build every case of the suite and its surface into a trusted compile cache",
        description="For a trusted job on main (nightly, baseline refresh): build this "
        "tree's kernels for every case of the suite and its surface, and their compiler "
        "resources, into a fresh cache, then replace DEST with it whole. The PR check "
        "reads it (python -m guard.ci --trusted-cache DEST), copying it for each tree, and "
        "never writes it.",
    )
    p.add_argument("dest", type=Path, metavar="DEST", help="the cache folder to (re)write")
    p.add_argument(
        "--no-resources",
        action="store_true",
        help="build the kernels only, not their compiler resources (nvcc -Xptxas -v)",
    )
    p.add_argument("--suite", default=str(DEFAULT_SUITE), help="suite YAML file")
    p.add_argument("--kernels", nargs="+", metavar="NAME", help="only these kernels")
    p.add_argument("--cases", nargs="+", metavar="NAME", help="only these workloads")
    p.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    p.add_argument("--json", action="store_true", help="print machine-readable JSON")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress output")
    p.add_argument("--fault-module", action="append", help=argparse.SUPPRESS)
    p.add_argument("--worker-path", action="append", help=argparse.SUPPRESS)
    p.set_defaults(func=cmd_warm_cache)

    p = sub.add_parser("baseline", help="manage baselines")
    bsub = p.add_subparsers(dest="baseline_command", required=True)
    r = bsub.add_parser("refresh", help="rerun the suite here and rewrite baselines/<gpu>.json")
    add_common(r, out_help="also write the measured results JSON here (a copy of the baseline)")
    r.add_argument("--dir", default=str(DEFAULT_BASELINES), help="baseline folder")
    r.add_argument("--allow-cpu", action="store_true", help="allow a CPU baseline")
    r.set_defaults(func=cmd_baseline_refresh)
