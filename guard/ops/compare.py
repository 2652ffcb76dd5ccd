"""Paired comparisons: two trees' kernels measured here in interleaved rounds (a git ref
against this tree, or the PR check's arms), the surface cases whose kernels changed, the
identical-kernel shortcut, the sequential rounds of undecided cases, and a comparison
with this GPU's stored baseline."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from guard.base.errors import BadInput, ExitCode, shown
from guard.decide.compare import (
    Comparison,
    compare_runs,
    no_gated_checked,
    replace_cases,
    run_verdict,
)
from guard.decide.outcome import CheckVerdict
from guard.measure import env as guard_env
from guard.measure.proc import tree_root
from guard.measure.runner import Arm, Progress, ProgressFn, Rounds, _noop
from guard.ops.measure import (
    SEQUENTIAL_STEP,
    MeasureOptions,
    plan_rounds,
    probe_workers,
    rounds_for,
    unwinds_on_sigterm,
)
from guard.ops.resources import ResourceCompile
from guard.ops.trees import PROJECT_FOLDER, folder_tree, same_folder, worktree
from guard.store import results
from guard.store.results import OK, UNAVAILABLE, CaseResult, RunResult
from guard.store.suite import (
    Case,
    Suite,
    is_module_kernel,
)

if TYPE_CHECKING:
    pass


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


def sequential_rounds(
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
    rounds, max_rounds = plan_rounds(session, opts)

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


@unwinds_on_sigterm
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
    with rounds_for(suite, opts, progress) as session:  # its worker started ahead ends too
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
            rounds, _ = plan_rounds(session, opts)
            session.time(rounds)
            return CompareOutcome(session.results()["candidate"], None, unchecked or missing_reason)
        if unchecked and not opts.time_controls:
            comparison = compare_runs(
                baseline, measured, alpha=session.plan.alpha, plan=session.plan, paired=False
            )
            return CompareOutcome(measured, _untimed_controls(comparison))
        comparison = sequential_rounds(
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


@unwinds_on_sigterm
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
    with rounds_for(surface, opts, progress, arms) as session:
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


@unwinds_on_sigterm
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
    with rounds_for(suite, opts, progress, arms) as session:
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
            comparison = sequential_rounds(
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
