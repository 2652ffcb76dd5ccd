"""``guard compare``: two files, this GPU's baseline, a git ref measured paired
(``--against``, sharded with ``--shard`` or spread with ``--gpus``) or a
pytest-benchmark suite."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from guard.base import shard as shard_mod
from guard.base import text
from guard.base.errors import BadInput, GuardError
from guard.commands import report as report_command
from guard.commands.common import (
    add_common,
    announce,
    check_outputs,
    fallback_note,
    measure_options,
    save_run,
    suite_from,
    write_summary,
)
from guard.decide.compare import Comparison, no_gated_checked
from guard.measure.runner import ProgressFn
from guard.ops.baseline import find_baseline
from guard.ops.compare import SURFACE_MODES, compare_against, compare_with_baseline
from guard.ops.measure import DEFAULT_BASELINES, DEFAULT_SUITE, MeasureOptions, open_suite
from guard.ops.outputs import write_output
from guard.ops.pytest_compare import compare_against_pytest, compare_files, compare_pytest_runs
from guard.ops.shards import (
    DEFAULT_GPU_TIMEOUT_S,
    GITHUB_VARS,
    GPU_SPLIT_HELP,
    GPU_SPLITS,
    SPREAD_DROPS,
    cases_over_gpus,
    gpu_list,
    shard_info,
    shard_option,
    shard_suite,
    spread,
    weights_baseline,
    without_options,
)
from guard.report import render, terminal
from guard.store import results
from guard.store.suite import Suite, TimingPlan


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
    write_summary(render.comparison_markdown(comparison), args.markdown)
    if args.html:
        from guard.report import report

        write_output("--html", args.html, report.html_report(comparison.candidate, comparison))
    return int(comparison.exit_code)


def add_pytest_options(p: argparse.ArgumentParser) -> None:
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
    plan = open_suite(suite_path).timing if suite_path.is_file() else TimingPlan()
    if runs:
        if args.pytest is not None or args.against:
            raise GuardError("give either saved runs or --against REF --pytest ARGS")
        if not (args.baseline_runs and args.candidate_runs):
            raise GuardError("--baseline-runs and --candidate-runs go together")
        check_outputs(args, results_file=False)
        comparison = compare_pytest_runs(
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
    check_outputs(args, results_file=args.out is not None)
    progress = terminal.ProgressPrinter(not args.quiet)
    try:
        comparison = compare_against_pytest(
            args.against,
            args.pytest,
            opts=measure_options(args),
            progress=progress,
            plan=plan if args.alpha is None else replace(plan, alpha=args.alpha),
            threshold=args.threshold,
            cases=args.cases or (),
        )
    finally:
        progress.close()
    if args.out is not None:
        save_run(args, comparison.candidate)
    report_command.append_history(args, comparison.candidate)
    return _render_comparison(args, comparison)


def cmd_compare(args: argparse.Namespace, argv: Sequence[str]) -> int:
    if args.baseline_runs or args.candidate_runs or args.pytest is not None:
        return _compare_pytest(args)
    if args.files:
        if len(args.files) != 2:
            raise GuardError("compare takes two files (BASELINE CANDIDATE) or none")
        if args.against or args.baseline or args.baseline_ref:
            raise GuardError("give either two files or --against/--baseline/--baseline-ref")
        check_outputs(args, results_file=False)
        # The suite's margin, drift and alpha decide; two files compared outside a
        # checkout (no suite file at the default path) get the default plan's.
        default = args.suite == str(DEFAULT_SUITE) and not Path(args.suite).is_file()
        # --cases picks the files' cases (a pytest node id too), not the suite's.
        plan = TimingPlan() if default else open_suite(args.suite).timing
        comparison = compare_files(
            args.files[0], args.files[1], args.alpha, plan, cases=args.cases or ()
        )
        return _render_comparison(args, comparison)

    suite = suite_from(args)
    check_outputs(args)
    sharding_options(args)
    then = (
        "checking the correctness of the other kernels"
        + ("" if args.time_controls else ", not timing them (--time-controls times them)")
        + (", and comparing the compiled kernels' resources" if args.against else "")
    )
    progress = terminal.ProgressPrinter(not args.quiet)
    try:
        if args.against:
            announce(args, suite, then)
            if args.shard or cases_over_gpus(args.gpus, args.gpu_split):  # shards (ops.shards)
                comparison = compare_sharded(args, suite, measure_options(args), progress, argv)
            else:
                comparison = compare_against(
                    suite, args.against, opts=measure_options(args), progress=progress
                )
            save_run(args, comparison.candidate)
            report_command.append_history(args, comparison.candidate)
            return _render_comparison(args, comparison)
        baseline: results.RunResult | None
        if args.baseline:
            baseline, missing = results.load(args.baseline), ""
        else:
            baseline, missing = find_baseline(args.baselines, args.device, args.baseline_ref)
        if announce(args, suite, then).decidable and missing:
            print(
                text.one_line(f"[guard] no verdict is possible: {missing} Measuring anyway."),
                file=sys.stderr,
            )
        outcome = compare_with_baseline(
            suite,
            baseline,
            missing_reason=missing,
            opts=measure_options(args),
            progress=progress,
            confirm_ref=args.confirm_against,
        )
    finally:
        progress.close()
    save_run(args, outcome.candidate)
    report_command.append_history(args, outcome.candidate)
    fallback_note(outcome.candidate)
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
        write_summary(summary, args.markdown)
        title = "No verdict" if no_gated_checked(outcome.candidate) else "No baseline"
        text.annotate("warning", title, outcome.no_verdict_reason)
        return int(outcome.exit_code)
    return _render_comparison(args, outcome.comparison)


def sharding_options(args: argparse.Namespace) -> None:
    """BadInput for ``--shard``/``--gpus`` where they cannot apply."""
    if args.shard and args.gpus:
        raise BadInput("--gpus and --shard: give one (--gpus runs every shard of this host)")
    if (args.shard or args.gpus) and not args.against:
        flag = "--shard" if args.shard else "--gpus"
        raise BadInput(f"{flag}: only with --against REF (a paired check)")
    if args.outcome and not args.shard:
        raise BadInput("--outcome: only with --shard I/N (a shard's outcome for guard merge)")
    if getattr(args, "gpu_split", "rounds") != "rounds" and not args.gpus:
        raise BadInput("--gpu-split: only with --gpus")


def compare_sharded(
    args: argparse.Namespace,
    suite: Suite,
    opts: MeasureOptions,
    progress: ProgressFn,
    argv: Sequence[str],
) -> Comparison:
    """``guard compare --against REF`` with ``--shard I/N`` (this share, its outcome to
    ``--outcome``) or ``--gpus`` (every share, one process per GPU, merged here)."""
    weights = weights_baseline(args.baselines, args.device)
    if args.shard:
        shard = shard_suite(suite, shard_option(args.shard), weights)
        comparison = compare_against(
            shard.suite, args.against, opts=replace(opts, family=shard.family), progress=progress
        )
        if args.outcome:
            env = comparison.candidate.environment
            info = shard_info(
                shard,
                comparison,
                base=comparison.baseline.environment.commit or args.against,
                head=(env.commit + ("-dirty" if env.commit_dirty else "")) or "working tree",
                use_fingerprints=not opts.time_identical,
            )
            outcome = replace(comparison.outcome(), shard=info)
            write_output("--outcome", args.outcome, json.dumps(outcome.to_json(), indent=1) + "\n")
        return comparison
    gpus = gpu_list(args.gpus, args.device)
    shard_suite(suite, shard_mod.ShardSpec(1, len(gpus)), weights, "--gpus")  # fits?
    passed = without_options(argv, SPREAD_DROPS, ("--json", "-q", "--quiet"))

    def argv_for(i: int, n: int, folder: Path) -> list[str]:
        return [
            sys.executable, "-m", "guard", *passed, "--shard", f"{i}/{n}",
            "--outcome", str(folder / "outcome.json"), "--out", str(folder / "results.json"),
            "--quiet",
        ]  # fmt: skip

    merged = spread(
        gpus,
        argv_for,
        lambda folder: folder / "outcome.json",
        timeout_s=args.gpu_timeout,
        log=lambda line: print(line, file=sys.stderr, flush=True) if not args.quiet else None,
        unset=GITHUB_VARS,
    )
    return merged.comparison


def add_sharding_options(p: argparse.ArgumentParser) -> None:
    """``--gpus``, ``--shard``, ``--outcome``, ``--gpu-timeout`` (guard compare)."""
    p.add_argument(
        "--gpus",
        metavar="N|all|0,2,...",
        help="with --against: spread the check over these GPUs of this host (how: "
        "--gpu-split) and decide every case together",
    )
    p.add_argument("--gpu-split", choices=GPU_SPLITS, default="rounds", help=GPU_SPLIT_HELP)
    p.add_argument(
        "--shard",
        metavar="I/N",
        help="with --against: measure only shard I of N (counted from 1), balanced by "
        "time; join the shards' --outcome files with `guard merge`",
    )
    p.add_argument("--outcome", type=Path, help="with --shard: write the shard's outcome here")
    p.add_argument(
        "--gpu-timeout",
        type=float,
        default=DEFAULT_GPU_TIMEOUT_S,
        help=argparse.SUPPRESS,  # seconds one GPU's process may take (tests)
    )


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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
    add_common(p)
    p.add_argument("--against", metavar="REF", help="measure this git ref as the baseline")
    p.add_argument(
        "--surface",
        choices=SURFACE_MODES,
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
    p.add_argument("--baselines", default=str(DEFAULT_BASELINES), type=Path, help="baseline folder")
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
    add_sharding_options(p)
    add_pytest_options(p)
    p.set_defaults(func=cmd_compare)
