"""Sharded checks: ``guard merge OUTCOME...`` and the ``--gpus`` of ``guard compare
--against`` and ``python -m guard.ci``.

``guard merge`` reads the outcome files of a check's shards (``--shard I/N``: each
runner of a CI matrix measured one share of the suite), decides their cases together at
the family false-alarm rate (``guard.decide.merge``) and writes one outcome
(``--out``, the ``meta.json`` the PR comment reads) and its Markdown. Exit codes are
the check's: 0 pass, 1 regression or wrong results, 2 bad input (shards of another
base, head or suite; the field is named) or no verdict, 3 infrastructure (a shard
missing, or one that failed before it measured).

``--gpus N|all|0,2,...`` spreads one check over several GPUs of this host, in one of two
ways (``--gpu-split``):

- ``rounds`` (the default): every GPU measures every case, and the timing rounds are
  dealt out among them, both arms of a round on one GPU (``runner.Rounds``'s lanes).
  What each round pays whatever its size (a fresh process, each kernel's first calls)
  is divided too, and the decision removes each GPU's offset (``stats.ratio_interval``).
- ``cases``: one process per GPU (``CUDA_VISIBLE_DEVICES`` set to it), each measuring
  shard I/N of the suite (both arms of its cases, interleaved), their outcomes merged
  here. A process that crashes without an outcome, or hangs past ``--gpu-timeout``,
  fails the check with exit 3 naming its GPU.

With ``--device cpu`` no GPU is pinned (a test of the whole path on a CPU).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from guard import comment, core
from guard.base import shard as shard_mod
from guard.base import text
from guard.base.errors import BadInput, ExitCode, GuardError, InfraError
from guard.decide import merge as merge_mod
from guard.decide.compare import Comparison
from guard.decide.outcome import CheckVerdict, Outcome, OutcomeFileError, ShardInfo
from guard.measure.runner import GpuJob, ProgressFn, run_on_gpus
from guard.report import render
from guard.store import results
from guard.store.suite import Suite

# What a GPU's process must not see: the parent alone writes what GitHub reads (the
# job summary, the outputs, the annotations).
GITHUB_VARS = ("GITHUB_OUTPUT", "GITHUB_STEP_SUMMARY", "GITHUB_ACTIONS")
MAX_SHARD_FILE_BYTES = 64 * 1024 * 1024  # a shard's outcome carries its evidence
DEFAULT_GPU_TIMEOUT_S = 6 * 3600.0  # one GPU's share of the check, start to end


def read_shard(path: str | Path) -> Outcome:
    """A shard's outcome file. A file that does not exist is a shard that never
    reported (InfraError); one that is malformed is BadInput naming the field."""
    p = Path(path)
    if not p.exists():
        raise InfraError(f"{p}: no such outcome file (a shard that never reported)")
    try:
        return comment.read(p, MAX_SHARD_FILE_BYTES)
    except OutcomeFileError as exc:
        raise BadInput(str(exc)) from None


def merge_files(paths: Sequence[str | Path]) -> merge_mod.Merged:
    """The shards' outcome files decided together (``guard.decide.merge.merge``)."""
    return merge_mod.merge([(read_shard(p), str(p)) for p in paths])


def failed_outcome(exc: GuardError, context: Outcome | None = None) -> Outcome:
    """The outcome of a merge (or a spread over GPUs) that could not decide: an
    infrastructure failure or bad input, with whatever context one shard gave."""
    verdict = (
        CheckVerdict.INFRASTRUCTURE if exc.exit_code == ExitCode.INFRA else CheckVerdict.BAD_INPUT
    )
    headline = verdict.headline(text.one_line(exc))
    if context is None:  # no shard readable: what the workflow says of the run
        pr = os.environ.get("PR_NUMBER", "")
        return Outcome(
            verdict,
            headline,
            gpu=os.environ.get("GPU_LABEL", ""),
            head_sha=os.environ.get("HEAD_SHA", ""),
            pr_number=int(pr) if pr.isascii() and pr.isdigit() and int(pr) > 0 else None,
        )
    return replace(
        context, verdict=verdict, headline=headline, cases=(), notes=(), profiles=(), shard=None
    )


# --------------------------------------------------------------------------- --gpus


def available_gpus(device: str) -> int | None:
    """The GPUs this host has for ``device`` (None for a CPU run)."""
    if device == "cpu":
        return None
    try:
        import torch

        count = int(torch.cuda.device_count())
    except Exception:  # no CUDA build, no driver: the CPU
        count = 0
    if count == 0:
        if device == "cuda":
            raise InfraError("--gpus with --device cuda: no GPU here")
        return None
    return count


def gpu_list(option_value: str, device: str) -> tuple[str | None, ...]:
    """``--gpus`` as the ``CUDA_VISIBLE_DEVICES`` of each process (None each on a CPU);
    BadInput naming ``--gpus``."""
    available = available_gpus(device)
    try:
        gpus = shard_mod.parse_gpus(option_value, available)
        if available is None:
            return tuple(None for _ in gpus)
        return shard_mod.visible_gpus(gpus, os.environ.get("CUDA_VISIBLE_DEVICES"))
    except ValueError as exc:
        raise BadInput(f"--gpus {text.one_line(exc)}") from None


def cases_over_gpus(args: argparse.Namespace) -> bool:
    """``--gpus`` with ``--gpu-split cases``: one shard process per GPU."""
    return bool(getattr(args, "gpus", None)) and getattr(args, "gpu_split", "") == "cases"


def round_lanes(args: argparse.Namespace) -> tuple[str | None, ...]:
    """The GPUs to deal the rounds over (``--gpus`` with ``--gpu-split rounds``), else ()."""
    if not getattr(args, "gpus", None) or cases_over_gpus(args):
        return ()
    return gpu_list(args.gpus, args.device)


def without_options(
    argv: Sequence[str], with_value: Sequence[str], flags: Sequence[str] = ()
) -> list[str]:
    """``argv`` less the options ``with_value`` (``--x V`` or ``--x=V``) and ``flags``."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        name = arg.split("=", 1)[0]
        if name in with_value:
            skip = "=" not in arg
            continue
        if arg in flags:
            continue
        out.append(arg)
    return out


def spread(
    gpus: Sequence[str | None],
    argv_for: Callable[[int, int, Path], list[str]],
    outcome_of: Callable[[Path], Path],
    *,
    timeout_s: float = DEFAULT_GPU_TIMEOUT_S,
    log: Callable[[str], None] = lambda _line: None,
    unset: tuple[str, ...] = (),
) -> merge_mod.Merged:
    """Run shard i/N on each of ``gpus`` (``argv_for(i, n, folder)``: the command of
    shard i, writing into ``folder``; ``outcome_of(folder)``: its outcome file), then
    merge. InfraError naming the GPU whose process hung, or ended without an outcome."""
    n = len(gpus)
    with tempfile.TemporaryDirectory(prefix="guard-gpus-") as tmp:
        folders = [Path(tmp) / f"shard-{i}" for i in range(1, n + 1)]
        jobs = [
            GpuJob(
                f"GPU {gpu}" if gpu is not None else f"worker {i}",
                gpu,
                tuple(argv_for(i, n, folder)),
                unset,
            )
            for i, (gpu, folder) in enumerate(zip(gpus, folders, strict=True), start=1)
        ]
        for folder in folders:
            folder.mkdir()
        ends = run_on_gpus(jobs, timeout_s, log)
        paths = []
        for end, folder in zip(ends, folders, strict=True):
            shard = f"shard {jobs.index(end.job) + 1}/{n}"
            if end.returncode is None:
                raise InfraError(
                    f"{end.job.label} ({shard}): hung past {timeout_s:g} s and was stopped"
                )
            path = outcome_of(folder)
            if not path.is_file():
                tail = text.one_line(end.output_tail[-600:]) or "no output"
                if end.returncode == ExitCode.BAD_INPUT:  # refused its input: say why
                    raise BadInput(f"{end.job.label} ({shard}): {tail}")
                raise InfraError(
                    f"{end.job.label} ({shard}): its process ended with exit code "
                    f"{end.returncode} and no outcome (it crashed): {tail}"
                )
            paths.append(path)
        return merge_files(paths)


# --------------------------------------------------------------------------- shards


def shard_option(value: str, option: str = "--shard") -> shard_mod.ShardSpec:
    try:
        return shard_mod.parse_shard(value)
    except ValueError as exc:
        raise BadInput(f"{option} {text.one_line(exc)}") from None


def shard_info(
    shard: core.Shard,
    comparison: Comparison,
    *,
    base: str,
    head: str,
    use_fingerprints: bool,
) -> ShardInfo:
    """The shard record of a shard's outcome, with the evidence ``guard merge`` needs."""
    return ShardInfo(
        index=shard.spec.index,
        count=shard.spec.count,
        base=base,
        head=head,
        suite_name=shard.suite.name,
        suite_hash=shard.suite.hash,
        case_ids=shard.case_ids,
        evidence=merge_mod.evidence(
            comparison, shard.positions, paired=True, use_fingerprints=use_fingerprints
        ),
    )


def weights_baseline(baselines: str | Path, device: str) -> results.RunResult | None:
    """This GPU's stored baseline, whose times balance the shards (None: by count)."""
    try:
        baseline, _ = core.find_baseline(baselines, device)
    except GuardError:
        return None
    return baseline


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
    opts: core.MeasureOptions,
    progress: ProgressFn,
    argv: Sequence[str],
) -> Comparison:
    """``guard compare --against REF`` with ``--shard I/N`` (this share, its outcome to
    ``--outcome``) or ``--gpus`` (every share, one process per GPU, merged here)."""
    weights = weights_baseline(args.baselines, args.device)
    if args.shard:
        shard = core.shard_suite(suite, shard_option(args.shard), weights)
        comparison = core.compare_against(
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
            core.write_output(
                "--outcome", args.outcome, json.dumps(outcome.to_json(), indent=1) + "\n"
            )
        return comparison
    gpus = gpu_list(args.gpus, args.device)
    core.shard_suite(suite, shard_mod.ShardSpec(1, len(gpus)), weights, "--gpus")  # fits?
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


# Options each GPU's process does not get from the command line: its own are set.
SPREAD_DROPS = (
    "--gpus", "--gpu-split", "--gpu-timeout", "--shard", "--outcome", "--out", "--markdown",
    "--html", "--history",
)  # fmt: skip


def add_sharding_options(p: argparse.ArgumentParser) -> None:
    """``--gpus``, ``--shard``, ``--outcome``, ``--gpu-timeout`` (guard compare)."""
    p.add_argument(
        "--gpus",
        metavar="N|all|0,2,...",
        help="with --against: spread the check over these GPUs of this host (how: "
        "--gpu-split) and decide every case together",
    )
    add_gpu_split(p)
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


def add_gpu_split(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--gpu-split",
        choices=("rounds", "cases"),
        default="rounds",
        help="with --gpus: deal the timing rounds out among the GPUs, each measuring "
        "every case (rounds, the default), or split the cases, one process per GPU "
        "(cases; balanced by time in this GPU's baseline)",
    )


# --------------------------------------------------------------------------- merge


def cmd_merge(args: argparse.Namespace) -> int:
    """``guard merge``: decide the shards together; write and print the outcome."""
    context: Outcome | None = None
    for path in args.outcomes:  # context for a failure: the first shard that reads
        try:
            context = read_shard(path)
            break
        except GuardError:
            continue
    every_case = ""
    try:
        merged = merge_files(args.outcomes)
        outcome = merge_mod.merged_outcome(merged)
        every_case = render.comparison_markdown(merged.comparison)
    except GuardError as exc:
        outcome = failed_outcome(exc, context)
    if args.out:
        results.write_atomic(args.out, json.dumps(outcome.to_json(), indent=1) + "\n")
    summary = comment.markdown([outcome]).replace(comment.MARKER + "\n", "")
    if every_case:
        summary += "\n<details><summary>Every case</summary>\n\n" + every_case
        summary += "\n</details>\n"
    if args.markdown:
        results.write_atomic(args.markdown, summary)
    text.append_step_summary(summary)
    text.emit_commands(render.annotations(outcome))
    if args.json:
        print(json.dumps(outcome.to_json(), indent=1))
    else:
        print(text.one_line(outcome.headline))
    print(
        f"[guard] merge: verdict {outcome.verdict.value}, exit code {int(outcome.exit_code)}",
        file=sys.stderr,
    )
    return int(outcome.exit_code)


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "merge",
        help="join the outcome files of a sharded check into one verdict",
        description="Decide the shards' cases together at the family false-alarm rate "
        "(every shard of one check: same base, head and suite; a missing shard is an "
        "infrastructure failure, exit 3).",
    )
    p.add_argument("outcomes", nargs="+", metavar="OUTCOME", help="each shard's meta.json")
    p.add_argument("--out", type=Path, help="write the merged outcome (meta.json) here")
    p.add_argument("--markdown", type=Path, help="write the Markdown summary here")
    p.add_argument("--json", action="store_true", help="print the merged outcome as JSON")
    p.set_defaults(func=cmd_merge)
