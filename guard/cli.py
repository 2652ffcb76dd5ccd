"""The ``guard`` command: parse, call one core function, render. Nothing else.

Exit codes: 0 pass, 1 regression or wrong results, 2 bad input or configuration,
3 infrastructure (no GPU where one is required, build failure, crash, timeout).
"""

from __future__ import annotations

import argparse
import io
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from guard import cli_bisect, cli_init, cli_merge, cli_publish, cli_report, core
from guard.base import text
from guard.base.errors import BadInput, ExitCode, GuardError
from guard.decide.compare import Comparison, no_gated_checked, run_verdict
from guard.decide.outcome import CheckVerdict
from guard.measure.runner import ProgressFn
from guard.report import render, terminal
from guard.store import results
from guard.store.suite import Suite, TimingPlan

DEFAULT_OUT = Path("results/guard-results.json")


# --------------------------------------------------------------------------- output


def _write_summary(markdown: str, path: str | None) -> None:
    if path:
        core.write_output("--markdown", path, markdown)
    text.append_step_summary(markdown)


def _check_outputs(args: argparse.Namespace, results_file: bool = True) -> None:
    """Every file the command will write, checked before anything is measured."""
    if results_file:
        core.check_output_path("--out", args.out or DEFAULT_OUT)
    for option in ("markdown", "html"):
        path = getattr(args, option, None)
        if path:
            core.check_output_path(f"--{option}", path)


def _save_results(args: argparse.Namespace, run: results.RunResult) -> None:
    """Save the measured run where --out says (default: DEFAULT_OUT, the previous file
    there kept beside it) and say where on stderr."""
    out = args.out or DEFAULT_OUT
    kept = core.save_results(run, out, keep_previous=args.out is None)
    note = f" (the previous results moved to {kept})" if kept else ""
    print(f"[guard] results written to {out}{note}", file=sys.stderr)


def _announce(args: argparse.Namespace, suite: Suite, then: str) -> core.Preflight:
    """Before measuring: say what cannot be decided here and why (``then``: what the
    command still does), so that nobody waits for a verdict that cannot come."""
    pre = core.preflight(suite, _opts(args))
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


# --------------------------------------------------------------------------- commands


def _opts(args: argparse.Namespace) -> core.MeasureOptions:
    return core.MeasureOptions(
        device=args.device,
        rounds=getattr(args, "rounds", None),
        max_rounds=getattr(args, "max_rounds", None),
        seed=getattr(args, "seed", None),
        fault_modules=tuple(getattr(args, "fault_module", None) or ()),
        sys_path=tuple(getattr(args, "worker_path", None) or ()),
        sanitize=getattr(args, "sanitize", False),
        time_identical=getattr(args, "time_identical", False),
        time_controls=getattr(args, "time_controls", False),
        gpus=cli_merge.round_lanes(args),
        surface=getattr(args, "surface", None) or "changed",
    )


def _suite(args: argparse.Namespace) -> Suite:
    core.load_plugins(
        getattr(args, "fault_module", None) or (), getattr(args, "worker_path", None) or ()
    )
    if args.suite == str(core.DEFAULT_SUITE) and not Path(args.suite).exists():
        # Run outside this repository: say what would work there.
        raise BadInput(
            f"{args.suite}: suite file not found (this directory is not this repository's "
            "root). Give --suite FILE (your own suite), or for a pytest-benchmark suite "
            "`guard compare --against REF --pytest ARGS` (docs/PYTEST.md)"
        )
    return core.open_suite(args.suite, args.kernels, args.cases)


def _fallback_note(run: results.RunResult) -> None:
    reason = run.environment.cpu_fallback_reason
    if reason:
        print(
            f"[guard] no GPU: measured on the CPU instead ({text.one_line(reason)}); "
            "CPU timings say nothing about GPU speed",
            file=sys.stderr,
        )


def cmd_list(args: argparse.Namespace) -> int:
    if args.coverage:
        return _list_coverage(args)
    rows = core.list_cases(_suite(args), args.device)
    if args.json:
        terminal.emit_json([{"id": i, "kernel": k, "availability": a} for i, k, a in rows])
    else:
        terminal.print_table(["case", "kernel", "availability"], [list(r) for r in rows])
    return 0


def _list_coverage(args: argparse.Namespace) -> int:
    """``guard list --coverage``: each gated kernel's launch paths, and those that no
    case of the suite or its surface runs (exit 1 when there are any)."""
    from guard.measure import coverage

    kernels_ = coverage.coverage(_suite(args), args.arch)
    if args.json:
        terminal.emit_json(
            [
                {
                    "kernel": k.kernel,
                    "arch": k.arch,
                    "paths": sorted(k.paths),
                    "run_by_cases": sorted(k.by_cases & k.paths),
                    "run_with_surface": sorted(k.by_surface & k.paths),
                    "missing": list(k.missing),
                }
                for k in kernels_
            ]
        )
    else:
        rows = [
            [k.kernel, path, "case" if path in k.by_cases else "surface" if path in k.by_surface
             else "MISSING"]
            for k in kernels_
            for path in sorted(k.paths)
        ]  # fmt: skip
        terminal.print_table(["kernel", "launch path", "run by"], rows)
        for k in kernels_:
            print(k.line())
    return 1 if any(k.missing for k in kernels_) else 0


def _finish_run(args: argparse.Namespace, run: results.RunResult) -> None:
    _save_results(args, run)
    cli_report.append_history(args, run)
    _fallback_note(run)
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
    _write_summary(render.run_markdown(run, headline=headline), args.markdown)


# core.check or core.run: (suite, options, progress) -> the measured run.
MeasureFn = Callable[[Suite, core.MeasureOptions, ProgressFn], results.RunResult]


def _measure(args: argparse.Namespace, operation: MeasureFn, then: str) -> int:
    suite = _suite(args)
    _check_outputs(args)
    _announce(args, suite, then)
    progress = terminal.ProgressPrinter(not args.quiet)
    try:
        run = operation(suite, _opts(args), progress)
    finally:
        progress.close()
    _finish_run(args, run)
    return int(run_verdict(run)[0].exit_code)


def cmd_check(args: argparse.Namespace) -> int:
    return _measure(args, core.check, "checking the correctness of the other kernels")


def cmd_run(args: argparse.Namespace) -> int:
    return _measure(args, core.run, "checking and timing the other kernels")


def _render_comparison(args: argparse.Namespace, comparison: Comparison) -> int:
    if args.json:
        terminal.emit_json(render.comparison_json(comparison))
    else:
        terminal.print_table(
            render.comparison_header(comparison),
            render.comparison_rows(comparison),
            title=f"{comparison.baseline.label} -> {comparison.candidate.label}",
        )
        for case_id, why in render.case_reasons(comparison):
            print(f"why: {text.one_line(case_id)}: {text.one_line(why)}")
        for diff in comparison.environment_diff:
            print(f"environment differs: {diff[0]}: baseline {diff[1]!r}, here {diff[2]!r}")
        for note in comparison.notes:
            print(f"note: {text.one_line(note)}")
        for c in comparison.cases:
            for change in c.resource_changes:
                print(f"resources: {text.one_line(c.case_id)}: {text.one_line(change)}")
        print(text.one_line(comparison.headline))
    text.emit_commands(render.annotations(comparison.outcome()))
    _write_summary(render.comparison_markdown(comparison), args.markdown)
    if args.html:
        from guard.report import report

        core.write_output("--html", args.html, report.html_report(comparison.candidate, comparison))
    return int(comparison.exit_code)


# ---------------------------------------------- pytest-benchmark suites (docs/PYTEST.md)


def _pytest_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("pytest-benchmark suites (docs/PYTEST.md)")
    g.add_argument(
        "--baseline-runs",
        nargs="+",
        metavar="PATH",
        help="saved pytest-benchmark runs (files or folders, e.g. .benchmarks/...): one round each",
    )
    g.add_argument(
        "--candidate-runs", nargs="+", metavar="PATH", help="the candidate's saved runs, as above"
    )
    g.add_argument(
        "--threshold",
        metavar="median:N%",
        help="smallest slowdown worth failing a pytest-benchmark case for (default: min:5%% "
        "with --pytest, each round by its fastest sample, which decides on a CPU shared "
        "with other work; median:5%% for saved runs, each round by its median)",
    )
    g.add_argument(
        "--pytest",
        nargs=argparse.REMAINDER,
        metavar="ARGS",
        help="with --against REF: run this project's pytest-benchmark suite (pytest ARGS; "
        "the rest of the line) in fresh processes for REF's tree and this one, interleaved",
    )


def _compare_pytest(args: argparse.Namespace) -> int:
    """``--baseline-runs``/``--candidate-runs`` or ``--against REF --pytest ARGS``."""
    runs = args.baseline_runs or args.candidate_runs
    if args.files or args.baseline or args.baseline_ref:
        raise GuardError("--baseline-runs, --candidate-runs and --pytest take no other baseline")
    suite_path = Path(args.suite)
    plan = core.open_suite(suite_path).timing if suite_path.is_file() else TimingPlan()
    if runs:
        if args.pytest is not None or args.against:
            raise GuardError("give either saved runs or --against REF --pytest ARGS")
        if not (args.baseline_runs and args.candidate_runs):
            raise GuardError("--baseline-runs and --candidate-runs go together")
        _check_outputs(args, results_file=False)
        comparison = core.compare_pytest_runs(
            args.baseline_runs,
            args.candidate_runs,
            alpha=args.alpha,
            plan=plan,
            threshold=args.threshold,
            cases=args.cases or (),
        )
        return _render_comparison(args, comparison)
    if not args.against:
        raise GuardError("--pytest ARGS needs --against REF (the tree to compare with)")
    # Another project's checkout: nothing is written into it unless asked (--out).
    _check_outputs(args, results_file=args.out is not None)
    progress = terminal.ProgressPrinter(not args.quiet)
    try:
        comparison = core.compare_against_pytest(
            args.against,
            args.pytest,
            opts=_opts(args),
            progress=progress,
            plan=plan if args.alpha is None else replace(plan, alpha=args.alpha),
            threshold=args.threshold,
            cases=args.cases or (),
        )
    finally:
        progress.close()
    if args.out is not None:
        _save_results(args, comparison.candidate)
    cli_report.append_history(args, comparison.candidate)
    return _render_comparison(args, comparison)


def cmd_compare(args: argparse.Namespace) -> int:
    if args.baseline_runs or args.candidate_runs or args.pytest is not None:
        return _compare_pytest(args)
    if args.files:
        if len(args.files) != 2:
            raise GuardError("compare takes two files (BASELINE CANDIDATE) or none")
        if args.against or args.baseline or args.baseline_ref:
            raise GuardError("give either two files or --against/--baseline/--baseline-ref")
        _check_outputs(args, results_file=False)
        # The suite's margin, drift and alpha decide; two files compared outside a
        # checkout (no suite file at the default path) get the default plan's.
        default = args.suite == str(core.DEFAULT_SUITE) and not Path(args.suite).is_file()
        # --cases picks the files' cases (a pytest node id too), not the suite's.
        plan = TimingPlan() if default else core.open_suite(args.suite).timing
        comparison = core.compare_files(
            args.files[0], args.files[1], args.alpha, plan, cases=args.cases or ()
        )
        return _render_comparison(args, comparison)

    suite = _suite(args)
    _check_outputs(args)
    cli_merge.sharding_options(args)
    then = (
        "checking the correctness of the other kernels"
        + ("" if args.time_controls else ", not timing them (--time-controls times them)")
        + (", and comparing the compiled kernels' resources" if args.against else "")
    )
    progress = terminal.ProgressPrinter(not args.quiet)
    try:
        if args.against:
            _announce(args, suite, then)
            if args.shard or cli_merge.cases_over_gpus(args):  # shards (cli_merge)
                comparison = cli_merge.compare_sharded(
                    args, suite, _opts(args), progress, args.argv
                )
            else:
                comparison = core.compare_against(
                    suite, args.against, opts=_opts(args), progress=progress
                )
            _save_results(args, comparison.candidate)
            cli_report.append_history(args, comparison.candidate)
            return _render_comparison(args, comparison)
        baseline: results.RunResult | None
        if args.baseline:
            baseline, missing = results.load(args.baseline), ""
        else:
            baseline, missing = core.find_baseline(args.baselines, args.device, args.baseline_ref)
        if _announce(args, suite, then).decidable and missing:
            print(
                text.one_line(f"[guard] no verdict is possible: {missing} Measuring anyway."),
                file=sys.stderr,
            )
        outcome = core.compare_with_baseline(
            suite,
            baseline,
            missing_reason=missing,
            opts=_opts(args),
            progress=progress,
            confirm_ref=args.confirm_against,
        )
    finally:
        progress.close()
    _save_results(args, outcome.candidate)
    cli_report.append_history(args, outcome.candidate)
    _fallback_note(outcome.candidate)
    if outcome.comparison is None:
        if args.json:
            terminal.emit_json(
                {
                    "headline": outcome.headline,
                    "reason": outcome.decision[1],
                    "exit_code": int(outcome.exit_code),
                    "results": results.to_json(outcome.candidate),
                }
            )
        else:
            terminal.print_table(render.RUN_HEADER, render.run_rows(outcome.candidate))
            print(f"\n{text.one_line(outcome.headline)}")
        summary = render.run_markdown(outcome.candidate, headline=outcome.headline)
        _write_summary(summary, args.markdown)
        title = "No verdict" if no_gated_checked(outcome.candidate) else "No baseline"
        text.annotate("warning", title, outcome.no_verdict_reason)
        return int(outcome.exit_code)
    return _render_comparison(args, outcome.comparison)


def cmd_baseline_refresh(args: argparse.Namespace) -> int:
    suite = _suite(args)
    _check_outputs(args, results_file=bool(args.out))
    progress = terminal.ProgressPrinter(not args.quiet)
    try:
        outcome = core.refresh_baseline(
            suite, args.dir, opts=_opts(args), progress=progress, allow_cpu=args.allow_cpu
        )
    finally:
        progress.close()
    if args.out:
        _save_results(args, outcome.run)
    cli_report.append_history(args, outcome.run)
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
    _write_summary(md, args.markdown)
    return 0


def cmd_warm_cache(args: argparse.Namespace) -> int:
    suite = _suite(args)
    progress = terminal.ProgressPrinter(not args.quiet)
    try:
        outcome = core.warm_cache(
            suite,
            args.dest,
            opts=_opts(args),
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


# --------------------------------------------------------------------------- parser


def _common(
    p: argparse.ArgumentParser,
    measure: bool = True,
    out_help: str = f"results JSON (default {DEFAULT_OUT}; a file already there is moved to "
    f"{core.previous_path(DEFAULT_OUT)})",
) -> None:
    p.add_argument("--suite", default=str(core.DEFAULT_SUITE), help="suite YAML file")
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
        p.add_argument("--history", metavar="DB", help=cli_report.HISTORY_HELP)
        p.add_argument("-q", "--quiet", action="store_true", help="no progress output")
        p.add_argument("--fault-module", action="append", help=argparse.SUPPRESS)
        p.add_argument("--worker-path", action="append", help=argparse.SUPPRESS)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="guard",
        description="Correctness and statistical performance guard for attention kernels.",
        epilog="Exit codes: 0 pass, 1 regression or wrong results, 2 bad input, "
        "3 infrastructure (no GPU, build failure, crash, timeout).",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("list", help="list the suite's cases and where each kernel can run")
    _common(p, measure=False)
    p.add_argument(
        "--coverage",
        action="store_true",
        help="list each gated kernel's launch paths and the case or surface case that runs "
        "it; exit 1 when one is run by none",
    )
    p.add_argument("--arch", default="sm_90", help="the GPU arch of --coverage's paths")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("check", help="correctness only")
    _common(p)
    p.add_argument(
        "--sanitize",
        action="store_true",
        help="run each worker under compute-sanitizer memcheck (GPU; slow) so "
        "out-of-bounds accesses fail their case",
    )
    p.set_defaults(func=cmd_check)

    p = sub.add_parser("run", help="check correctness, then time every case")
    _common(p)
    p.set_defaults(func=cmd_run)

    p = sub.add_parser(
        "compare",
        help="measure here and compare with this GPU's baseline, a file, or a git ref",
        description="With no arguments: run the suite and compare with baselines/<gpu>.json. "
        "With two files: compare them (guard results or pytest-benchmark JSON saved with "
        "--benchmark-save-data). With --against REF: measure REF's kernels and this tree's "
        "here, interleaved round by round. With --baseline-runs/--candidate-runs (saved "
        "pytest-benchmark runs, one round each) or --against REF --pytest ARGS (a "
        "pytest-benchmark suite, paired): verdicts for any pytest-benchmark suite.",
    )
    p.add_argument("files", nargs="*", metavar="FILE", help="BASELINE CANDIDATE")
    _common(p)
    p.add_argument("--against", metavar="REF", help="measure this git ref as the baseline")
    p.add_argument(
        "--surface",
        choices=core.SURFACE_MODES,
        default="changed",
        help="with --against: the suite's surface cases to add: those whose compiled "
        "kernels or launches differ between REF and this tree (changed), all, or none",
    )
    p.add_argument("--baseline", metavar="FILE", help="a baseline file to compare with")
    p.add_argument(
        "--baseline-ref",
        metavar="REF",
        help="read baselines/<gpu>.json as committed at REF (CI: the PR's base)",
    )
    p.add_argument(
        "--baselines", default=str(core.DEFAULT_BASELINES), type=Path, help="baseline folder"
    )
    p.add_argument(
        "--confirm-against",
        metavar="REF",
        help="confirm regressions with a paired rerun against REF on this machine",
    )
    p.add_argument(
        "--alpha",
        type=terminal.alpha,
        default=None,
        help="family false-alarm rate (files; default: the suite's timing.alpha)",
    )
    p.add_argument(
        "--time-identical",
        action="store_true",
        help="also time cases whose kernel is identical to the baseline's (same device "
        "code and launches); by default they are 'unchanged (identical kernel)', untimed",
    )
    p.add_argument(
        "--time-controls",
        action="store_true",
        help="time the not-gated controls (SDPA) even when no gated case can be decided "
        "here (a CPU: minutes); by default they are then only checked",
    )
    p.add_argument("--html", help="also write the HTML report here")
    cli_merge.add_sharding_options(p)
    _pytest_options(p)
    p.set_defaults(func=cmd_compare)

    cli_merge.add_parser(sub)

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
    p.add_argument("--suite", default=str(core.DEFAULT_SUITE), help="suite YAML file")
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
    _common(r, out_help="also write the measured results JSON here (a copy of the baseline)")
    r.add_argument("--dir", default=str(core.DEFAULT_BASELINES), help="baseline folder")
    r.add_argument("--allow-cpu", action="store_true", help="allow a CPU baseline")
    r.set_defaults(func=cmd_baseline_refresh)
    cli_report.register(sub)
    cli_publish.register(sub)  # guard publish: the history as a static site
    cli_bisect.register(sub)  # guard bisect: the commit that made a step
    cli_init.register(sub)  # guard init: a starter suite and workflow for another repository
    return parser


class _ReaderGone:
    """stdout or stderr, for as long as someone reads it.

    ``guard compare a b | head -1``: once ``head`` exits, a write raises
    ``BrokenPipeError``. The Python docs' "Note on SIGPIPE" says to point the file
    descriptor at ``os.devnull`` and exit quietly; this does that at the first failed
    write and lets the command finish, so that its files (results, Markdown, HTML)
    are written and it exits with its own code (0 pass, 1 regression, ...), not 1
    and a traceback.
    """

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self.gone = False

    def write(self, text: str) -> int:
        if not self.gone:
            try:
                return int(self._stream.write(text))
            except BrokenPipeError:
                self._drop()
        return len(text)

    def flush(self) -> None:
        if not self.gone:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._drop()

    def _drop(self) -> None:
        self.gone = True
        # Whatever is still buffered goes to devnull at the next (or the final) flush.
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
        except OSError:
            return
        try:
            os.dup2(devnull, self._stream.fileno())
        except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
            pass  # not a real file (tests' capture): nothing is written to it any more
        finally:
            os.close(devnull)

    def __getattr__(self, name: str) -> Any:  # isatty, fileno, encoding, ...
        return getattr(self._stream, name)


def main(argv: Sequence[str] | None = None) -> int:
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _ReaderGone(sys.stdout), _ReaderGone(sys.stderr)
    try:
        return _main(argv)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        sys.stdout, sys.stderr = saved


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: 2 for usage errors, 0 for --help
        return int(exc.code or 0)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # --gpus passes them on
    try:
        return int(args.func(args))
    except GuardError as exc:
        print(f"guard: error: {text.one_line(exc)}", file=sys.stderr)
        return int(exc.exit_code)
    except KeyboardInterrupt:
        print("guard: interrupted; no results or baselines were written", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
