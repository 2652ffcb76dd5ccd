"""A check spread over runners or GPUs: the suite's shares, balanced by time in this
GPU's baseline; a shard's outcome file read and the shards merged (``guard merge``);
one process per GPU of this host (``--gpus`` with ``--gpu-split cases``), or the
timing rounds dealt among the GPUs (``--gpu-split rounds``, ``runner.Rounds``'s lanes).
With ``--device cpu`` no GPU is pinned (a test of the whole path on a CPU)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from guard.base import shard as shard_mod
from guard.base import text
from guard.base.errors import BadInput, ExitCode, GuardError, InfraError
from guard.base.shard import ShardSpec
from guard.decide import merge as merge_mod
from guard.decide.compare import (
    Comparison,
)
from guard.decide.outcome import CheckVerdict, Outcome, OutcomeFileError, ShardInfo
from guard.measure.runner import GpuJob, run_on_gpus
from guard.ops.baseline import find_baseline
from guard.report import comment
from guard.store import results
from guard.store.results import OK, RunResult
from guard.store.suite import (
    Suite,
    flops,
)

if TYPE_CHECKING:
    pass


@dataclass(frozen=True)
class Shard:
    """A suite's share for one GPU or runner (``guard.base.shard``): ``suite`` holds its
    cases; ``positions``: every case's index in the whole suite; ``family``: the whole
    suite's gated cases; ``case_ids``: this shard's."""

    spec: ShardSpec
    suite: Suite
    positions: dict[str, int]
    family: int

    @property
    def case_ids(self) -> tuple[str, ...]:
        return tuple(c.id for c in self.suite.cases)


def shard_costs(suite: Suite, baseline: RunResult | None) -> dict[str, float]:
    """Each case's expected seconds per arm (``guard.base.shard.case_costs``), from its
    time in ``baseline`` (this GPU's stored baseline), else from its FLOPs, under the
    suite's GPU timing plan, the same on every machine."""
    plan = suite.timing
    per_call: dict[str, float | None] = {}
    work: dict[str, float] = {c.id: flops(c.shape, c.causal) for c in suite.cases}
    if baseline is not None:
        for c in baseline.cases:
            per_call[c.id] = c.median if c.status == OK else None
            work.setdefault(c.id, flops(c.case.shape, c.case.causal))
    return shard_mod.case_costs(
        [c.id for c in suite.cases],
        per_call,
        rounds=plan.rounds,
        samples_per_round=plan.samples_per_round,
        sample_target_s=plan.sample_target_ms * 1e-3,
        fixed_s=plan.warmup_ms * 1e-3,
        work=work,
    )


def shard_suite(
    suite: Suite, spec: ShardSpec, baseline: RunResult | None, option: str = "--shard"
) -> Shard:
    """Shard ``spec`` of ``suite``, balanced by time in ``baseline``; BadInput naming
    ``option`` when the suite has fewer cases than shards (a shard would be empty)."""
    ids = [c.id for c in suite.cases]
    if spec.count > len(ids):
        raise BadInput(
            f"{option} {spec}: the suite has {len(ids)} case(s), fewer than {spec.count} "
            "shards; use at most one shard per case"
        )
    mine = set(shard_mod.shard_of(ids, shard_costs(suite, baseline), spec))
    cases = tuple(c for c in suite.cases if c.id in mine)
    # The surface is dealt out too, so that each shard probes (and adds) its own share.
    surface = suite.extra_surface()[spec.index - 1 :: spec.count]
    return Shard(
        spec,
        replace(suite, cases=cases, full_hash=suite.hash, surface=surface),
        {cid: i for i, cid in enumerate(ids)},
        sum(1 for c in suite.cases if c.gate),
    )


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


def shard_option(value: str, option: str = "--shard") -> shard_mod.ShardSpec:
    try:
        return shard_mod.parse_shard(value)
    except ValueError as exc:
        raise BadInput(f"{option} {text.one_line(exc)}") from None


def shard_info(
    shard: Shard,
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
        baseline, _ = find_baseline(baselines, device)
    except GuardError:
        return None
    return baseline


# Options each GPU's process does not get from the command line: its own are set.
SPREAD_DROPS = (
    "--gpus", "--gpu-split", "--gpu-timeout", "--shard", "--outcome", "--out", "--markdown",
    "--html", "--history",
)  # fmt: skip


GPU_SPLITS = ("rounds", "cases")
GPU_SPLIT_HELP = (
    "with --gpus: deal the timing rounds out among the GPUs, each measuring every case "
    "(rounds, the default), or split the cases, one process per GPU (cases; balanced by "
    "time in this GPU's baseline)"
)


def cases_over_gpus(gpus: str | None, gpu_split: str) -> bool:
    """``--gpus`` with ``--gpu-split cases``: one shard process per GPU."""
    return bool(gpus) and gpu_split == "cases"


def round_lanes(gpus: str | None, gpu_split: str, device: str) -> tuple[str | None, ...]:
    """The GPUs to deal the rounds over (``--gpus`` with ``--gpu-split rounds``), else ()."""
    if not gpus or cases_over_gpus(gpus, gpu_split):
        return ()
    return gpu_list(gpus, device)
