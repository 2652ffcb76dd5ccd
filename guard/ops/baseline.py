"""Stored baselines: this GPU's file (``baselines/<gpu>.json``) on disk or as committed
at a ref, and its refresh (measured here, written atomically)."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from guard.base.errors import BadInput, ExitCode, GuardError, InfraError
from guard.measure import env as guard_env
from guard.measure.runner import ProgressFn, _noop
from guard.ops.measure import DEFAULT_BASELINES, MeasureOptions, run, unwinds_on_sigterm
from guard.ops.outputs import check_output_path, save_results
from guard.store import results
from guard.store.results import RunResult
from guard.store.suite import (
    Suite,
)

if TYPE_CHECKING:
    pass


def baseline_path(directory: str | Path, gpu_slug: str) -> Path:
    return Path(directory) / f"{gpu_slug}.json"


def load_baseline_at_ref(ref: str, relpath: str | Path, repo: str | Path = ".") -> RunResult | None:
    """The baseline file as committed at ``ref`` (None when it does not exist there)."""
    text = show_at(ref, relpath, repo)
    return None if text is None else results.loads(text, _git_spec(ref, relpath))


def _git_spec(ref: str, relpath: str | Path) -> str:
    """``REF:path`` as ``git show`` takes it (and as messages name the file)."""
    return f"{ref}:{Path(relpath).as_posix()}"


def show_at(ref: str, relpath: str | Path, repo: str | Path = ".") -> str | None:
    """A file's text as committed at ``ref``, None when it does not exist there.

    Raises InfraError when git cannot run, BadInput when git refuses (a bad ref)."""
    spec = _git_spec(ref, relpath)
    try:
        proc = subprocess.run(
            ["git", "-C", str(repo), "show", spec], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise InfraError(f"git show {spec}: {exc}") from None
    if proc.returncode != 0:
        err = proc.stderr.strip()
        if "does not exist" in err or "exists on disk, but not in" in err:
            return None
        raise BadInput(f"git show {spec}: {err.splitlines()[-1] if err else 'failed'}")
    return proc.stdout


def find_baseline(
    directory: str | Path, device: str = "auto", ref: str | None = None
) -> tuple[RunResult | None, str]:
    """This machine's baseline from ``directory`` (as committed at ``ref`` when given),
    or None and the reason there is none."""
    dev, _ = guard_env.pick_device(device)
    rel = baseline_path(directory, guard_env.device_slug(dev))
    if ref:
        baseline, where = load_baseline_at_ref(ref, rel), f"{rel} at {ref}"
    else:
        baseline, where = (results.load(rel) if rel.exists() else None), str(rel)
    if baseline is not None:
        return baseline, ""
    record = (
        "Record one on this GPU with `guard baseline refresh` (or the baseline-refresh workflow)"
        if dev == "cuda"
        else "Record one on this machine with `guard baseline refresh --allow-cpu` (CPU "
        "timings say nothing about GPU speed)"
    )
    return None, (
        f"no baseline for this hardware ({where} does not exist). {record}, or compare two "
        "commits here with `guard compare --against REF`."
    )


@dataclass(frozen=True)
class BaselineChange:
    case_id: str
    old_median: float | None
    new_median: float | None

    @property
    def ratio(self) -> float | None:
        if self.old_median and self.new_median:
            return self.new_median / self.old_median
        return None


@dataclass(frozen=True)
class RefreshOutcome:
    path: Path
    run: RunResult
    previous: RunResult | None
    changes: tuple[BaselineChange, ...]


@unwinds_on_sigterm
def refresh_baseline(
    suite: Suite,
    directory: str | Path = DEFAULT_BASELINES,
    *,
    opts: MeasureOptions = MeasureOptions(),
    progress: ProgressFn = _noop,
    allow_cpu: bool = False,
) -> RefreshOutcome:
    """Measure the suite here and rewrite ``<directory>/<gpu>.json`` atomically."""
    device, reason = guard_env.pick_device(opts.device)  # before measuring, not after
    if device != "cuda" and not allow_cpu:
        raise InfraError(
            f"baseline refresh needs a GPU: {reason or 'no CUDA device'} "
            "(pass --allow-cpu to record a CPU baseline anyway)"
        )
    check_output_path("--dir", baseline_path(directory, guard_env.device_slug(device)))
    measured = run(suite, opts, progress, full=True)
    if measured.correctness_failures:
        ids = ", ".join(c.id for c in measured.correctness_failures[:5])
        raise GuardError(f"refusing to write a baseline: wrong results in {ids}", ExitCode.FAIL)
    gated_errors = [c for c in measured.infra_failures if c.case.gate]
    if gated_errors:
        ids = ", ".join(f"{c.id} ({c.status})" for c in gated_errors[:5])
        raise InfraError(f"refusing to write a baseline: gated cases failed to run: {ids}")
    path = baseline_path(directory, measured.environment.gpu_slug)
    previous = None
    if path.exists():
        try:
            previous = results.load(path)
        except BadInput:
            previous = None  # a broken old baseline is replaced, and said so by the caller
    changes = []
    for case in measured.cases:
        old = previous.case(case.id) if previous else None
        changes.append(BaselineChange(case.id, old.median if old else None, case.median))
    save_results(measured, path, option="--dir")
    return RefreshOutcome(path, measured, previous, tuple(changes))
