"""The guard's operations, one typed function per CLI command.

Every function returns values and raises ``GuardError`` (with its exit code); none
prints. Progress goes to the ``progress`` callback the caller passes in.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, ParamSpec, TypeVar

from guard.base import shard as shard_mod
from guard.base.errors import BadInput, ExitCode, GuardError, InfraError, shown
from guard.base.shard import ShardSpec
from guard.base.stats import Threshold
from guard.base.unwind import sigterm_unwinds
from guard.decide.compare import (
    Comparison,
    compare_runs,
    no_gated_checked,
    replace_cases,
    run_verdict,
)
from guard.decide.outcome import CheckVerdict
from guard.measure import env as guard_env
from guard.measure.proc import kill_running_groups, local_kernels_root, tree_root
from guard.measure.runner import Arm, Progress, ProgressFn, Rounds, _noop
from guard.store import results
from guard.store.results import OK, UNAVAILABLE, CaseResult, RunResult
from guard.store.suite import (
    Case,
    KernelOptions,
    Suite,
    TimingPlan,
    flops,
    is_module_kernel,
    load_suite,
)

if TYPE_CHECKING:
    from guard.measure.resources import ResourceReport

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


def _unwinds_on_sigterm(fn: Callable[_P, _R]) -> Callable[_P, _R]:
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


@dataclass(frozen=True)
class CompareOutcome:
    """A comparison, or the measured run with the reason no verdict could be given."""

    candidate: RunResult
    comparison: Comparison | None
    no_verdict_reason: str = ""

    @property
    def decision(self) -> tuple[CheckVerdict, str]:
        """The comparison's verdict and why (no verdict without a gated case compared),
        or, with nothing to compare with, the run's (``compare.run_verdict``): never a
        pass."""
        if self.comparison is not None:
            return self.comparison.decision
        return run_verdict(self.candidate, self.no_verdict_reason or "nothing to compare with")

    @property
    def verdict(self) -> CheckVerdict:
        return self.decision[0]

    @property
    def exit_code(self) -> ExitCode:
        return self.verdict.exit_code

    @property
    def headline(self) -> str:
        verdict, why = self.decision
        return verdict.headline(why)


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


def check_output_path(option: str, path: str | Path) -> None:
    """Refuse, before anything is measured, an output file that cannot be written:
    a directory, a path under a regular file, a folder this user cannot write in."""
    target = Path(path)
    special = results.not_a_regular_file(target)
    if special:
        raise BadInput(f"{option} {target}: {special}")
    if target.is_dir():
        raise BadInput(f"{option} {target}: is a directory; give a file name")
    for parent in target.parents:
        if not (parent.exists() or parent.is_symlink()):
            continue  # written with its missing folders
        if not parent.is_dir():
            raise BadInput(f"{option} {target}: {parent} is not a directory")
        if not os.access(parent, os.W_OK | os.X_OK):
            raise BadInput(f"{option} {target}: cannot write in {parent}")
        return


def write_output(option: str, path: str | Path, text: str) -> None:
    """``results.write_atomic``, with a failure named by its option and path (exit 2)."""
    try:
        results.write_atomic(path, text)
    except OSError as exc:
        raise BadInput(f"{option} {path}: cannot write ({exc.strerror or exc})") from None


def previous_path(path: str | Path) -> Path:
    """Where ``save_results(keep_previous=True)`` moves the file it replaces."""
    p = Path(path)
    return p.with_name(f"{p.stem}.previous{p.suffix}")


def save_results(
    run: RunResult, path: str | Path, *, option: str = "--out", keep_previous: bool = False
) -> Path | None:
    """Save ``run`` to ``path``; ``keep_previous``: first move a file already there to
    ``previous_path`` (returned), so that a rerun never silently loses the last one."""
    kept = None
    try:
        if keep_previous and Path(path).is_file():
            kept = previous_path(path)
            os.replace(path, kept)
        results.save(run, path)
    except OSError as exc:
        raise BadInput(f"{option} {path}: cannot write ({exc.strerror or exc})") from None
    return kept


def _session(
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


def _plan_rounds(session: Rounds, opts: MeasureOptions) -> tuple[int, int]:
    rounds = opts.rounds or session.plan.rounds
    max_rounds = max(rounds, opts.max_rounds or session.plan.max_rounds)
    return rounds, max_rounds


@_unwinds_on_sigterm
def check(
    suite: Suite, opts: MeasureOptions = MeasureOptions(), progress: ProgressFn = _noop
) -> RunResult:
    """Correctness only."""
    with _session(suite, opts, progress) as session:
        session.check()
        return session.results()["candidate"]


@_unwinds_on_sigterm
def run(
    suite: Suite,
    opts: MeasureOptions = MeasureOptions(),
    progress: ProgressFn = _noop,
    *,
    full: bool = False,
) -> RunResult:
    """Correctness, then timing rounds (``full``: ``max_rounds`` of them, as a baseline
    needs: a stored baseline cannot be extended later, the candidate can)."""
    with _session(suite, opts, progress) as session:
        session.check()
        rounds, max_rounds = _plan_rounds(session, opts)
        session.time(max_rounds if full and not opts.rounds else rounds)
        return session.results()["candidate"]


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


def _gated_checked(runs: Sequence[RunResult]) -> bool:
    """Whether some gated case passed its correctness check in every arm (only such a
    case can be timed and decided)."""
    ok = [{c.id for c in r.cases if c.case.gate and c.status == OK} for r in runs]
    return bool(set.intersection(*ok)) if ok else False


CONTROLS_NOT_TIMED = (
    "controls not timed: no gated case can be decided here, so their timing could decide "
    "nothing (--time-controls times them)"
)


def _untimed_controls(comparison: Comparison) -> Comparison:
    """The comparison of a session that timed nothing: its controls say why."""
    cases = tuple(
        replace(c, reason=CONTROLS_NOT_TIMED)
        if not c.gate and c.candidate is not None and c.candidate.status == OK
        else c
        for c in comparison.cases
    )
    return replace(comparison, cases=cases, notes=(*comparison.notes, CONTROLS_NOT_TIMED))


def _sequential(
    session: Rounds,
    baseline_of: Callable[[], tuple[RunResult, RunResult]],
    opts: MeasureOptions,
    *,
    paired: bool,
    time_identical: bool = False,
) -> Comparison:
    """Measure the planned rounds of every case that can have changed, then more rounds
    while gated cases stay inconclusive.

    After the correctness round each case has a fingerprint of what it ran on the GPU;
    a case identical to its baseline is decided without timing (``time_identical``
    times it anyway, e.g. to study the noise of an unchanged tree)."""
    plan = session.plan  # the CPU's own (cpu_timing) on a CPU: its margin decides there
    rounds, max_rounds = _plan_rounds(session, opts)

    def decide() -> Comparison:
        return compare_runs(
            *baseline_of(),
            alpha=plan.alpha,
            plan=plan,
            paired=paired,
            use_fingerprints=not time_identical,
            family=opts.family,
        )

    skip = set(decide().identical_ids)
    to_time = [c.id for c in session.suite.cases if c.id not in skip]
    if to_time:
        session.time(rounds, to_time)
    comparison = decide()
    while comparison.inconclusive_ids() and session.rounds_done < max_rounds:
        # At least a round for every GPU the rounds are dealt over.
        step = min(max(SEQUENTIAL_STEP, len(session.lanes)), max_rounds - session.rounds_done)
        session.time(step, comparison.inconclusive_ids())
        comparison = decide()
    return comparison


@_unwinds_on_sigterm
def compare_with_baseline(
    suite: Suite,
    baseline: RunResult | None,
    *,
    missing_reason: str = "",
    opts: MeasureOptions = MeasureOptions(),
    progress: ProgressFn = _noop,
    confirm_ref: str | None = None,
) -> CompareOutcome:
    """Measure this tree and compare with a stored baseline (``None``: report only)."""
    with _session(suite, opts, progress) as session:  # its worker started ahead ends too
        here = session.environment
        if baseline is not None and baseline.environment.gpu_slug != here.gpu_slug:
            raise BadInput(
                f"{baseline.label}: environment.gpu_slug: recorded on "
                f"{shown(baseline.environment.gpu_name)}, this machine is {shown(here.gpu_name)}"
            )
        session.check()
        measured = session.results()["candidate"]
        unchecked = no_gated_checked(measured)
        if baseline is None:
            if unchecked and not opts.time_controls:  # no verdict whatever the timings
                return CompareOutcome(measured, None, unchecked)
            rounds, _ = _plan_rounds(session, opts)
            session.time(rounds)
            return CompareOutcome(session.results()["candidate"], None, unchecked or missing_reason)
        if unchecked and not opts.time_controls:
            comparison = compare_runs(
                baseline, measured, alpha=session.plan.alpha, plan=session.plan, paired=False
            )
            return CompareOutcome(measured, _untimed_controls(comparison))
        comparison = _sequential(
            session,
            lambda: (baseline, session.results()["candidate"]),
            opts,
            paired=False,
            time_identical=opts.time_identical,
        )
        regressed = [c.case_id for c in comparison.cases if c.fails and c.interval is not None]
        if confirm_ref and regressed:
            names = sorted({c.split("/", 1)[1] for c in regressed})
            kernels_ = sorted({c.split("/", 1)[0] for c in regressed})
            confirm = compare_against(
                suite.select(kernels_, names),
                confirm_ref,
                opts=replace(opts, surface="none"),
                progress=progress,
            )
            comparison = replace_cases(comparison, confirm)
        return CompareOutcome(comparison.candidate, comparison)


@contextlib.contextmanager
def worktree(ref: str, repo: str | Path = ".") -> Iterator[Path]:
    """A temporary detached checkout of ``ref``, removed afterwards."""

    def git(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=300
        )

    resolved = git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    if resolved.returncode != 0:
        raise BadInput(f"--against {ref}: not a commit in this repository")
    tmp = Path(tempfile.mkdtemp(prefix="guard-against-"))
    path = tmp / "tree"
    try:
        added = git("worktree", "add", "--detach", str(path), resolved.stdout.strip())
        if added.returncode != 0:
            raise InfraError(f"git worktree add {ref}: {added.stderr.strip()}")
        yield path
    finally:  # also on SIGTERM: the measuring entry points turn it into SystemExit
        if path.exists():
            git("worktree", "remove", "--force", str(path))
        shutil.rmtree(tmp, ignore_errors=True)
        git("worktree", "prune")


@_unwinds_on_sigterm
def compare_against(
    suite: Suite,
    ref: str,
    *,
    opts: MeasureOptions = MeasureOptions(),
    progress: ProgressFn = _noop,
    repo: str | Path = ".",
) -> Comparison:
    """Measure ``ref``'s kernels and this tree's, interleaved round by round, and compare."""
    with worktree(ref, repo) as tree:
        if not suite.uses_registry:  # module:function kernels, imported from each tree
            arms = (
                Arm("baseline", str(same_folder(tree, repo, ref)), ref),
                Arm("candidate", str(Path(repo).resolve()), "working tree"),
            )
            # The same files in both: the same code, decided without measuring. The
            # working tree's ignored files (bytecode caches) do not count, as in a
            # local PR check.
            same = "" if opts.time_identical else folder_tree(str(arms[0].kernels_root))
            if same and same == folder_tree(repo, ignored_count=False):
                device = guard_env.pick_device(opts.device)[0]
                return identical_trees(suite, arms, same, device, PROJECT_FOLDER)
            return compare_arms(suite, *arms, opts=opts, progress=progress)
        # Without its own kernels/ the base arm would import this checkout's (or the
        # installed) kernels and compare them with themselves: a PASS that means nothing.
        package = tree / "kernels"
        if not package.is_dir():
            raise BadInput(f"--against {ref}: {ref} has no kernels/ folder to measure")
        if not (package / "__init__.py").is_file():
            raise BadInput(
                f"--against {ref}: {ref} has no kernels/__init__.py (its kernels/ is not "
                "a package the guard can import)"
            )
        return compare_arms(
            suite,
            Arm("baseline", str(tree), ref),
            Arm("candidate", None, "working tree"),
            opts=opts,
            progress=progress,
        )


PROJECT_FOLDER = "the project's folder"  # what a tree of module:function kernels contributes


def same_folder(tree: Path, repo: str | Path, ref: str) -> Path:
    """``repo``'s folder (where the guard was started) in ``tree``, a checkout of ``ref``:
    where the base arm imports ``module:function`` kernels from, as the working tree's
    come from ``repo``. BadInput when ``ref`` has no such folder."""
    here = Path(repo).resolve()
    top = _git_out(here, "rev-parse", "--show-toplevel")
    if top is None:
        raise BadInput(f"--against {ref}: {here} is not in a git checkout")
    rel = here.relative_to(Path(top).resolve())
    folder = tree / rel
    if not folder.is_dir():
        raise BadInput(f"--against {ref}: {ref} has no folder {rel.as_posix()}")
    return folder


SURFACE_MODES = ("changed", "all", "none")
MAX_REASON_PARTS = 3  # launches named in one case's reason


@dataclass(frozen=True)
class SurfaceChoice:
    """The surface cases a paired comparison adds, and why each."""

    mode: str
    probed: int  # surface cases probed (0: none, or mode "all")
    added: tuple[Case, ...] = ()
    reasons: tuple[tuple[str, str], ...] = ()  # (case id, why it was added)
    notes: tuple[str, ...] = ()
    seconds: float = 0.0

    def summary(self) -> tuple[str, ...]:
        """The notes a comparison carries: what was added and why, in a few lines."""
        if self.mode == "none" or (not self.probed and not self.added and not self.notes):
            return ()
        if self.mode == "all":
            head = f"surface: all {len(self.added)} case(s) added"
        else:
            head = (
                f"surface: {len(self.added)} of {self.probed} case(s) added, whose compiled "
                f"kernels or launches differ between the trees (probed in {self.seconds:.0f} s)"
            )
        lines = [head]
        lines += [f"surface: {cid} added: {why}" for cid, why in self.reasons]
        return (*lines, *self.notes)


def probe_workers(opts: MeasureOptions) -> int:
    """Processes per arm for a probe: a quarter of the cores, 1 to 4. On an H200 with 16
    cores, 4 a tree probed the surface in 52 s; 6 a tree (12 processes on the one
    GPU) took 225 s."""
    if opts.probe_workers:
        return opts.probe_workers
    return max(1, min(4, (os.cpu_count() or 1) // 4))


def _changed_parts(base: dict[str, str], head: dict[str, str]) -> str:
    """Which launches of a case differ between two probes' parts, in words."""
    changed = [k for k in head if k in base and base[k] != head[k]]
    new = [k for k in head if k not in base]
    gone = [k for k in base if k not in head]
    words = []
    for verb, names in (("changed", changed), ("new", new), ("no longer", gone)):
        if names:
            shown_ = "; ".join(names[:MAX_REASON_PARTS])
            more = f" (+{len(names) - MAX_REASON_PARTS})" if len(names) > MAX_REASON_PARTS else ""
            words.append(f"{verb}: {shown_}{more}")
    return ", ".join(words) or "its fingerprint differs"


def surface_reason(base: CaseResult, head: CaseResult, parts: tuple[dict[str, str], ...]) -> str:
    """Why a probed surface case must be measured ("" when it need not): it fails in one
    tree only, its fingerprint is unknown, or its launches differ."""
    if base.status != OK or head.status != OK:
        if base.status == head.status == UNAVAILABLE:
            return ""
        if head.status != OK and base.status != OK:
            return ""  # the base's failure too: a note, not the PR's to measure
        which, case = ("head", head) if head.status != OK else ("base", base)
        return f"{case.status} in the {which} only: {case.reason}"
    if not base.fingerprint or not head.fingerprint:
        return "fingerprint unknown (the profiler could not be read)"
    if base.fingerprint == head.fingerprint:
        return ""
    return _changed_parts(*parts)


def select_surface(
    suite: Suite, arms: tuple[Arm, Arm], opts: MeasureOptions, progress: ProgressFn = _noop
) -> SurfaceChoice:
    """The surface cases to add to a paired comparison of ``arms`` (``opts.surface``):
    every one, none, or those whose fingerprints differ, each case probed by one call in
    each tree (``Rounds.probe``)."""
    extra = suite.extra_surface()
    if opts.surface == "none" or not extra:
        return SurfaceChoice(opts.surface, 0)
    if opts.surface == "all":
        return SurfaceChoice("all", 0, extra)
    surface = suite.with_cases(extra)
    started = time.monotonic()
    with _session(surface, opts, progress, arms) as session:
        session.probe(probe_workers(opts))
        res = session.results()
        states = {a.name: session.states[a.name] for a in arms}
    base, head = res[arms[0].name], res[arms[1].name]
    head_by_id = {c.id: c for c in head.cases}
    added, reasons, failing = [], [], []
    for b in base.cases:
        h = head_by_id[b.id]
        parts = (states[arms[0].name][b.id].parts, states[arms[1].name][b.id].parts)
        why = surface_reason(b, h, parts)
        if why:
            added.append(b.case)
            reasons.append((b.id, why))
        elif b.status != OK and h.status != OK and UNAVAILABLE not in (b.status, h.status):
            failing.append(f"{b.id} ({b.status}: {b.reason})")
    notes: tuple[str, ...] = ()
    if failing:
        notes = (f"surface: fails in both trees, not measured: {', '.join(failing[:5])}",)
    return SurfaceChoice(
        "changed", len(extra), tuple(added), tuple(reasons), notes, time.monotonic() - started
    )


def _git_out(tree: str | Path, *args: str) -> str | None:
    """``git -C tree ARGS``'s output, None when git fails (not a checkout, say)."""
    try:
        proc = subprocess.run(
            ["git", "-C", str(tree), *args], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


def kernels_tree(tree: str | Path, commit: str = "HEAD", *, ignored_count: bool = True) -> str:
    """The git tree id of ``commit:kernels`` in the checkout ``tree``, when the files
    under ``kernels/`` are exactly that tree's ("" otherwise, or when git cannot say):
    no file modified, none untracked, and with ``ignored_count`` none ignored either (a
    pull request's fresh checkout has none; a judge's own ``__pycache__`` does not count)."""
    sha = _git_out(tree, "rev-parse", "--verify", "--quiet", f"{commit}:kernels")
    if not sha or _git_out(tree, "rev-parse", "--verify", "--quiet", "HEAD") is None:
        return ""
    if commit != "HEAD" and sha != _git_out(tree, "rev-parse", "--verify", "HEAD:kernels"):
        return ""  # the working tree is not at that commit's kernels
    return sha if _clean(tree, "kernels", ignored_count) else ""


def _clean(tree: str | Path, path: str, ignored_count: bool) -> bool:
    """Whether ``path`` in the checkout ``tree`` holds exactly HEAD's files: none
    modified or untracked, none ignored but (``ignored_count`` False) a run's caches."""
    status = _git_out(
        tree, "status", "--porcelain", "--untracked-files=all", "--ignored", "--", path
    )
    if status is None:
        return False
    lines = status.splitlines()
    if not ignored_count:  # a run's caches do not count; an ignored build output does
        lines = [x for x in lines if not (x.startswith("!! ") and _a_cache(x[3:]))]
    return not lines


def folder_tree(folder: str | Path, *, ignored_count: bool = True) -> str:
    """The git tree id of HEAD's copy of ``folder`` (a checkout, or a folder in one),
    when the files under it are exactly that tree ("" otherwise, or when git cannot
    say), as ``kernels_tree``: what a suite of ``module:function`` kernels imports."""
    sha = _git_out(folder, "rev-parse", "--verify", "--quiet", "HEAD:./")
    if not sha:
        return ""
    return sha if _clean(folder, ".", ignored_count) else ""


# Ignored paths a run leaves behind that import nothing: bytecode and tools' caches. An
# ignored extension module, generated source or build folder still counts.
_CACHES = ("__pycache__/", ".pytest_cache/", ".mypy_cache/", ".ruff_cache/", ".hypothesis/")


def _a_cache(path: str) -> bool:
    path = path.strip('"')
    return path.endswith((".pyc", ".pyo")) or any(
        path == c or path.endswith("/" + c) or f"/{c}" in f"/{path}" for c in _CACHES
    )


IDENTICAL_TREES = "identical kernels/: the same git tree in both"


def identical_trees(
    suite: Suite, arms: tuple[Arm, Arm], tree: str, device: str, what: str = "kernels/"
) -> Comparison:
    """The comparison of two trees whose ``kernels/`` (``what``: whatever a tree
    contributes) are one git tree: every case is the same code in both, so each is
    identical by a fingerprint of that tree, decided without starting a worker."""
    env = guard_env.collect(device, "" if device == "cuda" else "no GPU asked for")
    runs = []
    for arm in arms:
        cases = tuple(
            CaseResult(
                c,
                OK,
                reason=IDENTICAL_TREES.replace("kernels/", what),
                fingerprint=f"tree:{tree}",
            )
            for c in suite.cases
        )
        runs.append(
            RunResult(
                schema_version=results.SCHEMA_VERSION,
                created=results.now_iso(),
                suite_name=suite.name,
                suite_hash=suite.hash,
                environment=env,
                cases=cases,
                label=arm.label or arm.name,
            )
        )
    comparison = compare_runs(
        runs[0], runs[1], alpha=suite.timing.alpha, plan=suite.timing, paired=True
    )
    note = f"{what} is the same git tree in both ({tree[:12]}): decided without measuring"
    return replace(comparison, notes=(note, *comparison.notes))


@_unwinds_on_sigterm
def compare_arms(
    suite: Suite,
    baseline: Arm,
    candidate: Arm,
    *,
    opts: MeasureOptions = MeasureOptions(),
    progress: ProgressFn = _noop,
) -> Comparison:
    """Measure two trees' kernels (``Arm.kernels_root``; None: this checkout's) with
    this guard and ``suite``, interleaved round by round, and compare them paired.

    The PR check runs this from the base commit's checkout (the judge) with the PR's
    tree as the candidate: only ``kernels/`` comes from the PR."""
    arms = (replace(baseline, name="baseline"), replace(candidate, name="candidate"))
    surface = select_surface(suite, arms, opts, progress)
    suite = suite.with_cases((*suite.cases, *surface.added))
    with _session(suite, opts, progress, arms) as session:
        comparison = _compare_in(session, opts, arms)
    return replace(comparison, notes=(*surface.summary(), *comparison.notes))


def _compare_in(session: Rounds, opts: MeasureOptions, arms: tuple[Arm, Arm]) -> Comparison:
    """``compare_arms`` in ``session``: the check round, then the timing rounds while
    both trees compile for their resources."""
    suite = session.suite
    session.check()
    roots = [a.kernels_root or tree_root(suite.uses_registry) for a in arms]

    def pair() -> tuple[RunResult, RunResult]:
        res = session.results()
        return res["baseline"], res["candidate"]

    # Both trees compile for their resources (CPU only, niced) while the GPU measures:
    # the cases whose kernels differ (an identical one has the same resources).
    base_prints = {c.id: c.fingerprint for c in pair()[0].cases}
    differ = tuple(
        c
        for c in pair()[1].cases
        if not (c.fingerprint and c.fingerprint == base_prints[c.id])
        and not is_module_kernel(c.case.kernel)  # no resources hook: nothing to compile
    )
    compiling = ResourceCompile(
        suite.with_cases(tuple(c.case for c in differ)),
        roots[0],
        roots[1],
        envs=(arms[0].env, arms[1].env),
        wrappers=(arms[0].wrapper, arms[1].wrapper),
    )

    try:
        if _gated_checked(pair()) or opts.time_controls:
            comparison = _sequential(
                session, pair, opts, paired=True, time_identical=opts.time_identical
            )
        else:  # nothing gated can be decided: the check round's findings, untimed
            comparison = _untimed_controls(
                compare_runs(
                    *pair(),
                    alpha=session.plan.alpha,
                    plan=session.plan,
                    paired=True,
                    family=opts.family,
                )
            )
    except BaseException:
        compiling.cancel()
        raise
    if compiling.pending:  # say what the check waits for (compiles of minutes, cold)
        n = len(differ)
        session.progress(Progress("resources", "both trees", 0, 0, "", 0, n))
        comparison = compiling.apply(comparison)
        session.progress(Progress("resources", "both trees", 0, 0, "", n, n))
        return comparison
    return compiling.apply(comparison)


@dataclass(frozen=True)
class WarmOutcome:
    """A trusted compile cache built: where, of how many cases, what failed to build."""

    path: Path
    cases: int
    failed: tuple[str, ...]  # "case id: why"
    resources: str  # "" when the compiler resources were built, else why not
    seconds: float


@_unwinds_on_sigterm
def warm_cache(
    suite: Suite,
    dest: str | Path,
    opts: MeasureOptions = MeasureOptions(),
    progress: ProgressFn = _noop,
    *,
    with_resources: bool = True,
) -> WarmOutcome:
    """Build this tree's kernels for every case of ``suite`` and its surface (one call
    each: the probe) and, beside them in a child process, their compiler resources into
    a fresh cache; then replace ``dest`` with it whole (``build_cache.publish``): the
    trusted cache of a PR check, built by a trusted job on main, never by a PR's."""
    from concurrent.futures import ThreadPoolExecutor

    import yaml

    from guard.measure import build_cache, resources

    started = time.monotonic()
    folder = build_cache.staging(dest)
    try:
        env = build_cache.env_for(folder)
        everything = suite.with_cases((*suite.cases, *suite.extra_surface()))
        with tempfile.TemporaryDirectory(prefix="guard-suite-") as tmp:
            suite_file = Path(tmp) / "suite.yaml"
            suite_file.write_text(yaml.safe_dump(everything.document(), sort_keys=False), "utf-8")
            with ThreadPoolExecutor(1) as pool:
                compiling = (
                    pool.submit(
                        resources.collect_in_tree,
                        local_kernels_root(),
                        suite_file,
                        RESOURCE_ARCHES,
                        1800,
                        env=dict(env),
                    )
                    if with_resources and suite.uses_registry
                    else None
                )
                arm = Arm("candidate", None, "trusted cache", env=env)
                try:
                    with _session(everything, opts, progress, (arm,)) as session:
                        session.probe(probe_workers(opts))
                        run = session.results()["candidate"]
                except BaseException:
                    kill_running_groups()  # the compile child too
                    raise
                problem = ""
                if not compiling:
                    problem = (
                        "no registry kernel (module:function kernels have no resources hook)"
                        if with_resources
                        else "not asked for (--no-resources)"
                    )
                try:
                    if compiling is not None:
                        compiling.result()
                except GuardError as exc:
                    problem = shown(str(exc))
        failed = tuple(
            f"{c.id}: {c.reason}" for c in run.cases if c.status not in (OK, UNAVAILABLE)
        )
        build_cache.publish(folder, dest)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return WarmOutcome(
        Path(dest), len(everything.cases), failed, problem, time.monotonic() - started
    )


RESOURCE_ARCHES = ("sm_90",)  # compiled on the CPU for the notes of a paired comparison


class ResourceCompile:
    """Both trees' compiler resources (registers, spills, shared memory, config) for
    exactly ``suite``'s cases, compiled without a GPU in two child processes started
    at once, in the background: the GPU measures meanwhile (the children run at the
    lowest CPU priority, and a cold compile of a large suite takes minutes of CPU).
    ``apply`` waits for them and adds the changes to a comparison; ``cancel`` ends them."""

    def __init__(
        self,
        suite: Suite,
        base_root: str,
        head_root: str,
        arches: Sequence[str] = RESOURCE_ARCHES,
        envs: tuple[tuple[tuple[str, str], ...], ...] = ((), ()),
        wrappers: tuple[tuple[str, ...], ...] = ((), ()),
    ) -> None:
        from concurrent.futures import Future, ThreadPoolExecutor

        import yaml

        from guard.measure import resources

        self._problem = ""  # why nothing compiles ("": compiling)
        self._futures: tuple[Future[resources.ResourceReport], ...] = ()
        self._tmp = tempfile.TemporaryDirectory(prefix="guard-suite-")
        self._pool = ThreadPoolExecutor(max_workers=2)  # two child processes at once
        if not suite.cases:  # every kernel identical in both trees: nothing to compile
            return
        if not suite.raw:
            self._problem = f"the suite {shown(suite.source)} has no file to compile from"
            return
        # Each child reads exactly these cases (surface cases among them) from a copy in
        # a folder it can read in its sandbox: its own TMPDIR, where it has one.
        try:
            document = yaml.safe_dump(suite.document(), sort_keys=False)
        except yaml.YAMLError as exc:
            self._problem = f"cannot copy the suite {shown(suite.source)}: {exc}"
            return
        kernels_ = sorted({c.kernel for c in suite.cases})
        ids = [c.id for c in suite.cases]  # not every kernel x name: a shard is a set of ids

        def collect(
            root: str, env: tuple[tuple[str, str], ...], wrapper: tuple[str, ...]
        ) -> resources.ResourceReport:
            folder = dict(env).get("TMPDIR") or self._tmp.name
            suite_file = Path(tempfile.mkdtemp(prefix="suite-", dir=folder)) / "suite.yaml"
            try:
                suite_file.write_text(document, "utf-8")
            except OSError as exc:
                raise InfraError(f"cannot copy the suite for the resources: {exc}") from None
            return resources.collect_in_tree(
                root,
                suite_file,
                arches,
                300,
                kernels=kernels_,
                case_ids=ids,
                env=dict(env),
                wrapper=wrapper,
            )

        self._futures = tuple(
            self._pool.submit(collect, root, env, wrapper)
            for root, env, wrapper in zip((base_root, head_root), envs, wrappers, strict=True)
        )

    @property
    def pending(self) -> bool:
        """Whether a child is still compiling."""
        return any(not f.done() for f in self._futures)

    def cancel(self) -> None:
        """End both children (their process groups) and the pool."""
        if any(not f.done() for f in self._futures):
            kill_running_groups()  # the caller is unwinding: its workers are done with
        self._pool.shutdown(wait=True)
        self._tmp.cleanup()

    def apply(self, comparison: Comparison) -> Comparison:
        """The comparison with each case's resource changes. A change is a note beside
        the verdict, never a failure; when it cannot be computed (a compile failure,
        records from one tree only), a note says so and the verdict stands: a hook that
        could not report must not look like "no change"."""

        def unavailable(why: str) -> Comparison:
            note = f"compiler resources not compared: {why}"
            return replace(comparison, notes=(*comparison.notes, note))

        try:  # cancel: a Ctrl-C or SIGTERM here must not wait out the children's timeout
            if self._problem:
                return unavailable(self._problem)
            if not self._futures:
                return comparison
            base, head = self._futures[0].result(), self._futures[1].result()
        except GuardError as exc:
            return unavailable(shown(str(exc)))
        finally:
            self.cancel()
        return _with_reports(comparison, base, head)


def with_resource_changes(
    comparison: Comparison,
    suite: Suite,
    base_root: str,
    head_root: str,
    arches: Sequence[str] = RESOURCE_ARCHES,
) -> Comparison:
    """``comparison`` with the resource changes of ``suite``'s cases between the two
    trees, compiled now (``ResourceCompile``, waited for)."""
    return ResourceCompile(suite, base_root, head_root, arches).apply(comparison)


def _with_reports(comparison: Comparison, base: ResourceReport, head: ResourceReport) -> Comparison:
    """The comparison with both trees' resource reports: changes per case, notes for
    what could not be compared, and each run's records as its results file keeps them."""
    from guard.measure import resources

    changes = resources.diff_cases(base.cases, head.cases)
    cases = tuple(
        replace(c, resource_changes=tuple(str(x) for x in changes.get(c.case_id, ())))
        for c in comparison.cases
    )
    notes = comparison.notes
    skipped = {**head.skipped, **base.skipped}  # case -> {arch: why}, from either tree
    if skipped:  # a hook that could not report must not look like "no change"
        cid, why = next(iter(skipped.items()))
        arch, reason = next(iter(why.items()))
        notes = (
            *notes,
            f"compiler resources not compared for {len(skipped)} case(s), e.g. {cid} on "
            f"{arch}: {shown(reason)}",
        )
    one_tree = sorted(set(base.cases) ^ set(head.cases))  # a hook added or removed
    if one_tree:
        side = "head" if one_tree[0] in head.cases else "base"
        notes = (
            *notes,
            f"compiler resources not compared for {len(one_tree)} case(s) that have records "
            f"in one tree only (a resources hook added or removed), e.g. {one_tree[0]} "
            f"(only in the {side})",
        )

    def stored(run: RunResult, report: ResourceReport) -> RunResult:
        """The run with each case's records, as its results file keeps them."""
        return replace(
            run,
            cases=tuple(
                replace(c, resources=tuple(r.to_json() for r in report.cases.get(c.id, ())))
                for c in run.cases
            ),
        )

    return replace(
        comparison,
        cases=cases,
        notes=notes,
        baseline=stored(comparison.baseline, base),
        candidate=stored(comparison.candidate, head),
    )


def select_cases(
    baseline: RunResult, candidate: RunResult, cases: Sequence[str] = ()
) -> tuple[RunResult, RunResult]:
    """Both runs with only the cases ``cases`` name (``results.names_case``: a workload
    name, a case id, a pytest node id; none: every case). A word that names no case of
    either run is ``BadInput``, naming it and both runs."""
    if not cases:
        return baseline, candidate
    every = [c.case for run in (baseline, candidate) for c in run.cases]
    unknown = [w for w in cases if not any(results.names_case(w, case) for case in every)]
    if unknown:
        raise BadInput(
            f"--cases: no case named {', '.join(shown(w) for w in unknown)} in "
            f"{baseline.label or 'the baseline'} or {candidate.label or 'the candidate'}"
        )

    def chosen(run: RunResult) -> RunResult:
        kept = tuple(c for c in run.cases if any(results.names_case(w, c.case) for w in cases))
        return replace(run, cases=kept)

    return chosen(baseline), chosen(candidate)


def compare_files(
    baseline_path_: str | Path,
    candidate_path: str | Path,
    alpha: float | None = None,
    plan: TimingPlan | None = None,
    cases: Sequence[str] = (),
) -> Comparison:
    """Two result files: from anywhere, so compared as a stored baseline (the suite's
    ``plan.drift`` allowed; ``alpha`` defaults to the plan's); ``cases``: only those
    (``select_cases``)."""
    base, cand = select_cases(results.load(baseline_path_), results.load(candidate_path), cases)
    return compare_runs(base, cand, alpha=alpha, plan=plan)


def compare_pytest_runs(
    baseline: Sequence[str | Path],
    candidate: Sequence[str | Path],
    *,
    alpha: float | None = None,
    plan: TimingPlan | None = None,
    threshold: str | None = None,
    cases: Sequence[str] = (),
) -> Comparison:
    """Saved pytest-benchmark runs, several a side (files or folders; each file one
    round: ``guard.store.pytest_runs``), compared as a stored baseline is; ``cases``:
    only those (``select_cases``)."""
    from guard.measure.pytest_rounds import parse_args
    from guard.store import pytest_runs

    _, chosen = parse_args((), threshold or results.PYTEST_THRESHOLD)
    base, cand = select_cases(*pytest_runs.load_sides(baseline, candidate, chosen), cases)
    return compare_runs(base, cand, alpha=alpha, plan=plan)


@_unwinds_on_sigterm
def compare_against_pytest(
    ref: str,
    pytest_args: Sequence[str],
    *,
    opts: MeasureOptions = MeasureOptions(),
    progress: ProgressFn = _noop,
    plan: TimingPlan | None = None,
    threshold: str | None = None,
    repo: str | Path = ".",
    cases: Sequence[str] = (),
) -> Comparison:
    """A project's own pytest-benchmark suite (``pytest pytest_args``), run from ``ref``'s
    tree and from this one in fresh processes, interleaved round by round, and decided
    paired (``guard.measure.pytest_rounds``); more rounds while a case is inconclusive.
    pytest starts in both trees from the folder the guard was started in. ``cases``:
    only those are decided (``select_cases``); pytest runs what ``pytest_args`` name."""
    from guard.measure import pytest_rounds

    args, chosen = pytest_rounds.parse_args(pytest_args, threshold)
    plan = plan or TimingPlan()
    device, reason = guard_env.pick_device(opts.device)
    if opts.device == "cuda" and device != "cuda":
        raise InfraError(f"--device cuda: no GPU here ({reason})")
    here = Path(repo).resolve()
    top = pytest_rounds.toplevel(here)
    if top is None:
        raise BadInput(f"--against {ref}: {here} is not in a git checkout")
    with worktree(ref, top) as tree:
        base_root = tree / here.relative_to(top.resolve())
        if not base_root.is_dir():
            raise BadInput(f"--against {ref}: {ref} has no folder {here.relative_to(top)}")
        session = pytest_rounds.PytestSession(
            (
                pytest_rounds.PytestArm("baseline", base_root, ref),
                pytest_rounds.PytestArm("candidate", here, "working tree"),
            ),
            args,
            device=opts.device,
            threshold=chosen,
            progress=progress,
        )
        rounds = opts.rounds or plan.rounds
        max_rounds = max(rounds, opts.max_rounds or pytest_round_ceiling(chosen, plan))

        def decide() -> Comparison:
            res = session.results()
            base, cand = select_cases(res["baseline"], res["candidate"], cases)
            return compare_runs(base, cand, alpha=plan.alpha, plan=plan, paired=True)

        session.time(rounds, planned=rounds)
        comparison = decide()
        while (
            not session.failed
            and comparison.inconclusive_ids()
            and session.rounds_done < max_rounds
        ):
            step = min(SEQUENTIAL_STEP, max_rounds - session.rounds_done)
            session.time(step, planned=session.rounds_done + step)
            comparison = decide()
        return comparison


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


@_unwinds_on_sigterm
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
