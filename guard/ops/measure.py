"""One suite measured on one tree: the options, the suite and its plugins, the
preflight, correctness (``check``) and timing (``run``), the rounds that measure them
and the cases listed."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ParamSpec, TypeVar

from guard.base.errors import BadInput, InfraError
from guard.base.stats import Threshold
from guard.base.unwind import sigterm_unwinds
from guard.measure import env as guard_env
from guard.measure.runner import Arm, ProgressFn, Rounds, _noop
from guard.store.results import RunResult
from guard.store.suite import (
    KernelOptions,
    Suite,
    TimingPlan,
    is_module_kernel,
    load_suite,
)

if TYPE_CHECKING:
    pass


DEFAULT_SUITE = Path("suites/default.yaml")


DEFAULT_BASELINES = Path("baselines")


SEQUENTIAL_STEP = 2  # extra rounds per step for inconclusive cases


# The default ceiling of rounds under a min:N% threshold, which is for a CPU shared with
# other work: there a 5% question took more than 20 rounds a tree, about 25 at most
# (docs/PYTEST.md). Rounds past the first are only spent while a case is inconclusive.
SHARED_CPU_MAX_ROUNDS = 40


def pytest_round_ceiling(threshold: str, plan: TimingPlan) -> int:
    """The default most rounds a tree of a project's pytest-benchmark suite."""
    if Threshold.parse(threshold).statistic == "min":
        return max(plan.max_rounds, SHARED_CPU_MAX_ROUNDS)
    return plan.max_rounds


_P = ParamSpec("_P")


_R = TypeVar("_R")


def unwinds_on_sigterm(fn: Callable[_P, _R]) -> Callable[_P, _R]:
    """Run ``fn`` with SIGTERM raising SystemExit(143), so that a cancelled CI job still
    kills its workers and removes its worktree (``finally`` blocks run)."""

    @functools.wraps(fn)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        with sigterm_unwinds():
            return fn(*args, **kwargs)

    return wrapper


@dataclass(frozen=True)
class MeasureOptions:
    device: str = "auto"  # "auto", "cuda" or "cpu"
    rounds: int | None = None  # override the suite's timing.rounds
    max_rounds: int | None = None
    seed: int | None = None
    fault_modules: tuple[str, ...] = ()  # tests: modules that register extra kernels
    sys_path: tuple[str, ...] = ()
    sanitize: bool = False  # run workers under compute-sanitizer memcheck (GPU only)
    time_identical: bool = False  # time cases whose kernel is identical to the baseline's
    # Time the not-gated controls (SDPA) even when no gated case can be decided: by
    # default their timing is skipped then, as it could decide nothing.
    time_controls: bool = False
    # A shard of a sharded check: at least this many gated cases share the family
    # false-alarm rate (the whole suite's), so its intervals are not sized for its share.
    family: int = 0
    # GPUs of this host to deal the timing rounds over (each a CUDA_VISIBLE_DEVICES
    # value; None on a CPU): ``runner.Rounds``'s lanes. (): the devices this process sees.
    gpus: tuple[str | None, ...] = ()
    # A paired comparison's surface (``Suite.surface``): "changed" adds the surface cases
    # whose fingerprints differ between the arms (``select_surface``), "all" every one,
    # "none" none.
    surface: str = "changed"
    # Processes per arm that probe the surface at once (nothing is timed there).
    probe_workers: int = 0  # 0: by this machine's cores (``probe_workers``)


def probe_workers(opts: MeasureOptions) -> int:
    """Processes per arm for a probe: a quarter of the cores, 1 to 4. On an H200 with 16
    cores, 4 a tree probed the surface in 52 s; 6 a tree (12 processes on the one
    GPU) took 225 s."""
    if opts.probe_workers:
        return opts.probe_workers
    return max(1, min(4, (os.cpu_count() or 1) // 4))


def load_plugins(modules: Sequence[str], paths: Sequence[str] = ()) -> None:
    """Import modules that register extra kernels (the tests' fault kernels), here and,
    through ``MeasureOptions``, in every worker."""
    import importlib
    import sys

    for path in paths:
        if path not in sys.path:
            sys.path.append(path)
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise BadInput(f"--fault-module {module}: cannot import ({exc})") from None


def open_suite(
    path: str | Path = DEFAULT_SUITE,
    kernels: Sequence[str] | None = None,
    cases: Sequence[str] | None = None,
) -> Suite:
    return load_suite(path).select(list(kernels or []), list(cases or []))


@dataclass(frozen=True)
class Preflight:
    """What can be decided on this machine, known before anything is measured: the
    gated kernels whose probe says they cannot run here, and why."""

    device: str
    fallback_reason: str  # why the CPU is used ("" on a GPU)
    blocked: tuple[tuple[str, str], ...]  # (gated kernel, why it cannot run here)
    runnable: tuple[str, ...]  # gated kernels that can (or whose probe could not say)

    @property
    def decidable(self) -> bool:
        """Whether any gated kernel can run here, i.e. a verdict is possible."""
        return bool(self.runnable)

    def reason(self) -> str:
        """The blocked gated kernels and why, in one line ("" when none is)."""
        return "; ".join(f"{name}: {why}" for name, why in self.blocked)


def preflight(suite: Suite, opts: MeasureOptions = MeasureOptions()) -> Preflight:
    """Probe the suite's gated kernels on the device ``opts`` picks (imports no kernel
    module; a probe that fails counts as runnable: the worker will tell)."""
    device, reason = guard_env.pick_device(opts.device)
    blocked: list[tuple[str, str]] = []
    runnable: list[str] = []
    for name in sorted({c.kernel for c in suite.cases if c.gate}):
        try:
            why = _probe(suite, name, device)
        except Exception:  # the worker reports what really happens
            why = None
        if why:
            blocked.append((name, str(why)))
        else:
            runnable.append(name)
    return Preflight(device, reason, tuple(blocked), tuple(runnable))


def _probe(suite: Suite, kernel: str, device: str) -> str | None:
    """Why ``kernel`` cannot run on ``device`` here (None: it can, or cannot be told
    without importing it): a ``module:function`` kernel by the suite's options, a
    registry kernel by its entry's probe."""
    if is_module_kernel(kernel):
        from guard.measure.module_kernel import ModuleKernel

        options = suite.kernel_options.get(kernel, KernelOptions())
        return ModuleKernel(kernel, "", options).probe(device)
    import kernels

    why: str | None = kernels.get(kernel).probe(device)
    return why


def rounds_for(
    suite: Suite, opts: MeasureOptions, progress: ProgressFn, arms: Sequence[Arm] = (Arm(),)
) -> Rounds:
    device, reason = guard_env.pick_device(opts.device)
    if opts.device == "cuda" and device != "cuda":
        raise InfraError(f"--device cuda: no GPU here ({reason})")
    return Rounds(
        suite,
        device=device,
        arms=arms,
        seed=opts.seed,
        progress=progress,
        fault_modules=opts.fault_modules,
        sys_path=opts.sys_path,
        cpu_fallback_reason=reason,
        sanitize=opts.sanitize and device == "cuda",
        gpus=opts.gpus,
    )


def plan_rounds(session: Rounds, opts: MeasureOptions) -> tuple[int, int]:
    rounds = opts.rounds or session.plan.rounds
    max_rounds = max(rounds, opts.max_rounds or session.plan.max_rounds)
    return rounds, max_rounds


@unwinds_on_sigterm
def check(
    suite: Suite, opts: MeasureOptions = MeasureOptions(), progress: ProgressFn = _noop
) -> RunResult:
    """Correctness only."""
    with rounds_for(suite, opts, progress) as session:
        session.check()
        return session.results()["candidate"]


@unwinds_on_sigterm
def run(
    suite: Suite,
    opts: MeasureOptions = MeasureOptions(),
    progress: ProgressFn = _noop,
    *,
    full: bool = False,
) -> RunResult:
    """Correctness, then timing rounds (``full``: ``max_rounds`` of them, as a baseline
    needs: a stored baseline cannot be extended later, the candidate can)."""
    with rounds_for(suite, opts, progress) as session:
        session.check()
        rounds, max_rounds = plan_rounds(session, opts)
        session.time(max_rounds if full and not opts.rounds else rounds)
        return session.results()["candidate"]


def list_cases(suite: Suite, device: str = "auto") -> list[tuple[str, str, str]]:
    """(case id, kernel, availability) for every case; imports no kernel module."""
    dev, _ = guard_env.pick_device(device)
    out = []
    probes: dict[str, str] = {}
    for case in suite.cases:
        if case.kernel not in probes:
            try:
                probes[case.kernel] = _probe(suite, case.kernel, dev) or "available"
            except Exception as exc:
                probes[case.kernel] = f"probe failed: {exc}"
        out.append((case.id, case.kernel, probes[case.kernel]))
    return out
