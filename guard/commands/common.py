"""What the measuring commands share: their options, the suite they name, the
announcement before measuring and the files and summary after."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from guard.base import text
from guard.base.errors import BadInput
from guard.commands import report as report_command
from guard.decide.compare import run_verdict
from guard.decide.outcome import CheckVerdict
from guard.measure.runner import ProgressFn
from guard.ops.measure import (
    DEFAULT_SUITE,
    MeasureOptions,
    Preflight,
    load_plugins,
    open_suite,
    preflight,
)
from guard.ops.outputs import check_output_path, previous_path, save_results, write_output
from guard.ops.shards import round_lanes
from guard.report import render, terminal
from guard.store import results
from guard.store.suite import Suite

DEFAULT_OUT = Path("results/guard-results.json")


def write_summary(markdown: str, path: str | None) -> None:
    if path:
        write_output("--markdown", path, markdown)
    text.append_step_summary(markdown)


def check_outputs(args: argparse.Namespace, results_file: bool = True) -> None:
    """Every file the command will write, checked before anything is measured."""
    if results_file:
        check_output_path("--out", args.out or DEFAULT_OUT)
    for option in ("markdown", "html"):
        path = getattr(args, option, None)
        if path:
            check_output_path(f"--{option}", path)


def save_run(args: argparse.Namespace, run: results.RunResult) -> None:
    """Save the measured run where --out says (default: DEFAULT_OUT, the previous file
    there kept beside it) and say where on stderr."""
    out = args.out or DEFAULT_OUT
    kept = save_results(run, out, keep_previous=args.out is None)
    note = f" (the previous results moved to {kept})" if kept else ""
    print(f"[guard] results written to {out}{note}", file=sys.stderr)


def announce(args: argparse.Namespace, suite: Suite, then: str) -> Preflight:
    """Before measuring: say what cannot be decided here and why (``then``: what the
    command still does), so that nobody waits for a verdict that cannot come."""
    pre = preflight(suite, measure_options(args))
    if not pre.blocked:
        return pre
    where = "the CPU" if pre.device == "cpu" else "this GPU"
    if pre.fallback_reason:
        where += f" ({pre.fallback_reason})"
    if pre.decidable:
        print(
            text.one_line(
                f"[guard] gated kernel(s) that cannot run on {where}, so their cases get no "
                f"verdict: {pre.reason()}"
            ),
            file=sys.stderr,
        )
        return pre
    print(
        text.one_line(
            f"[guard] no verdict is possible here: no gated kernel can run on {where}: "
            f"{pre.reason()}. Still {then}."
        ),
        file=sys.stderr,
    )
    return pre


def measure_options(args: argparse.Namespace) -> MeasureOptions:
    return MeasureOptions(
        device=args.device,
        rounds=getattr(args, "rounds", None),
        max_rounds=getattr(args, "max_rounds", None),
        seed=getattr(args, "seed", None),
        fault_modules=tuple(getattr(args, "fault_module", None) or ()),
        sys_path=tuple(getattr(args, "worker_path", None) or ()),
        sanitize=getattr(args, "sanitize", False),
        time_identical=getattr(args, "time_identical", False),
        time_controls=getattr(args, "time_controls", False),
        gpus=round_lanes(
            getattr(args, "gpus", None), getattr(args, "gpu_split", "rounds"), args.device
        ),
        surface=getattr(args, "surface", None) or "changed",
    )


def suite_from(args: argparse.Namespace) -> Suite:
    load_plugins(
        getattr(args, "fault_module", None) or (), getattr(args, "worker_path", None) or ()
    )
    if args.suite == str(DEFAULT_SUITE) and not Path(args.suite).exists():
        # Run outside this repository: say what would work there.
        raise BadInput(
            f"{args.suite}: suite file not found (this directory is not this repository's "
            "root). Give --suite FILE (your own suite), or for a pytest-benchmark suite "
            "`guard compare --against REF --pytest ARGS` (docs/PYTEST.md)"
        )
    return open_suite(args.suite, args.kernels, args.cases)


def fallback_note(run: results.RunResult) -> None:
    reason = run.environment.cpu_fallback_reason
    if reason:
        print(
            f"[guard] no GPU: measured on the CPU instead ({text.one_line(reason)}); "
            "CPU timings say nothing about GPU speed",
            file=sys.stderr,
        )


def finish_run(args: argparse.Namespace, run: results.RunResult) -> None:
    save_run(args, run)
    report_command.append_history(args, run)
    fallback_note(run)
    verdict, why = run_verdict(run)
    headline = verdict.headline(why) if verdict is not CheckVerdict.PASS else ""
    if args.json:
        terminal.emit_json(results.to_json(run))
        if headline:  # stdout stays the results document
            print(text.one_line(headline), file=sys.stderr)
    else:
        terminal.print_table(render.RUN_HEADER, render.run_rows(run))
        if headline:
            print(f"\n{text.one_line(headline)}")
    write_summary(render.run_markdown(run, headline=headline), args.markdown)


# check or run: (suite, options, progress) -> the measured run.
MeasureFn = Callable[[Suite, MeasureOptions, ProgressFn], results.RunResult]


def measure_with(args: argparse.Namespace, operation: MeasureFn, then: str) -> int:
    suite = suite_from(args)
    check_outputs(args)
    announce(args, suite, then)
    progress = terminal.ProgressPrinter(not args.quiet)
    try:
        run = operation(suite, measure_options(args), progress)
    finally:
        progress.close()
    finish_run(args, run)
    return int(run_verdict(run)[0].exit_code)


def add_common(
    p: argparse.ArgumentParser,
    measure: bool = True,
    out_help: str = f"results JSON (default {DEFAULT_OUT}; a file already there is moved to "
    f"{previous_path(DEFAULT_OUT)})",
) -> None:
    p.add_argument("--suite", default=str(DEFAULT_SUITE), help="suite YAML file")
    p.add_argument("--kernels", nargs="+", metavar="NAME", help="only these kernels")
    p.add_argument(
        "--cases",
        nargs="+",
        metavar="NAME",
        help="only these workloads (compare's files and pytest-benchmark runs: case names "
        "or ids, a pytest-benchmark case by its node id, e.g. 'bench/test_x.py::test_y[a]')",
    )
    p.add_argument(
        "--device",
        choices=["auto", "cuda", "cpu"],
        default="auto",
        help="where to run (auto: the GPU if torch sees one, else the CPU)",
    )
    p.add_argument("--json", action="store_true", help="print machine-readable JSON")
    if measure:
        p.add_argument(
            "--rounds", type=terminal.positive_int, help="timing rounds (fresh processes) per arm"
        )
        p.add_argument(
            "--max-rounds",
            type=terminal.positive_int,
            help="ceiling for inconclusive cases (default: the suite's; with --pytest and a "
            "min:N%% threshold, at least 40)",
        )
        p.add_argument("--seed", type=int, help="input seed (default: fresh every run)")
        p.add_argument("--out", type=Path, help=out_help)
        p.add_argument("--markdown", help="also write the Markdown summary here")
        p.add_argument("--history", metavar="DB", help=report_command.HISTORY_HELP)
        p.add_argument("-q", "--quiet", action="store_true", help="no progress output")
        p.add_argument("--fault-module", action="append", help=argparse.SUPPRESS)
        p.add_argument("--worker-path", action="append", help=argparse.SUPPRESS)
