"""The PR check as one typed operation: ``run_check(CheckRequest, CheckLabels)``.

The judge is the base commit: its suite (cases, gates, thresholds, tolerances, timing
plan, alpha), its baselines and every line that measures and decides; only the
candidate's ``kernels/`` (or the ``module:function`` modules its suite names) are
imported from ``candidate_tree``. The check is one paired comparison (``compare_arms``):
the base's kernels and the candidate's, correctness first, then interleaved timing
rounds on this machine, so its drift cancels; a case whose kernel is identical in both
(``guard.measure.fingerprint``) is decided without timing. The stored baseline of this
GPU is context, not the verdict. What the PR changes in the suite file or the baselines
is listed as taking effect after merge.

Without ``candidate_tree`` (a local run in a checkout of the PR) the base commit's
kernels are measured from a temporary worktree of ``base`` and the candidate is this
tree; the policy still comes from the base commit's suite file.

Every failure becomes an ``Outcome`` (bad input, infrastructure), never an exception;
nothing here prints: lines for the log go to the ``log`` callback (``python -m
guard.ci`` keeps a line of a kernel's message from running as a workflow command).
"""

from __future__ import annotations

import contextlib
import os
import stat
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from guard.base import files, limits, text
from guard.base.errors import BadInput, ExitCode, GuardError, InfraError, cut
from guard.decide import policy
from guard.decide.compare import Comparison, compare_runs
from guard.decide.merge import merged_outcome as merge_outcome
from guard.decide.outcome import CaseProfile, CheckVerdict, Outcome, ShardInfo
from guard.measure import build_cache, sandbox
from guard.measure import env as guard_env
from guard.measure.proc import GUARD_ROOT, local_kernels_root, tree_root
from guard.measure.runner import Arm, Progress, ProgressFn
from guard.ops.baseline import find_baseline, show_at
from guard.ops.compare import compare_arms, identical_trees
from guard.ops.measure import MeasureOptions, open_suite
from guard.ops.shards import (
    DEFAULT_GPU_TIMEOUT_S,
    GITHUB_VARS,
    Shard,
    cases_over_gpus,
    gpu_list,
    round_lanes,
    shard_info,
    shard_option,
    shard_suite,
    spread,
    weights_baseline,
    without_options,
)
from guard.ops.trees import PROJECT_FOLDER, folder_tree, kernels_tree, same_folder, worktree
from guard.report import render
from guard.store import atomic, results
from guard.store.suite import Suite, is_module_kernel, load_suite, surface_named

OUTCOME_FILE = "meta.json"  # the name the comment workflow looks for in the artifact
Log = Callable[[str], None]


def _no_log(line: str) -> None:
    pass


def _no_progress(event: Progress) -> None:
    pass


@dataclass(frozen=True)
class CheckRequest:
    """What the PR check is asked (``python -m guard.ci``'s options, typed). ``argv``:
    the command line, which ``gpus`` with ``gpu_split="cases"`` passes on to one process
    per GPU."""

    suite: str = "suites/default.yaml"
    baselines: str = "baselines"
    device: str = "auto"
    out_dir: Path = Path("perf-guard-out")
    base: str | None = None
    candidate_tree: str | None = None
    html: bool = False
    kernels: tuple[str, ...] = ()
    time_identical: bool = False
    trusted_cache: str | None = None
    sandbox: str = "auto"
    surface: str = "changed"
    shard: str | None = None
    gpus: str | None = None
    gpu_split: str = "rounds"
    gpu_timeout: float = DEFAULT_GPU_TIMEOUT_S
    argv: tuple[str, ...] = field(default=(), compare=False)


@dataclass(frozen=True)
class CheckLabels:
    """What the outcome is labelled with (the workflow's GPU label, the PR's head and
    the commit under test, the PR's number, the run's URL); empty where not known."""

    gpu: str = ""
    head_sha: str = ""
    tested_commit: str = ""
    pr_number: int | None = None
    run_url: str = ""


def _git(*args: str, cwd: str | Path = ".") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", "-C", str(cwd), *args], capture_output=True, text=True, timeout=120
    )


def resolve_base(explicit: str | None) -> str:
    """The base commit's full SHA; BadInput when none is given or it is not here."""
    if explicit:
        candidates = [explicit]
    elif os.environ.get("BASE_SHA"):
        candidates = [os.environ["BASE_SHA"]]
    elif os.environ.get("GITHUB_BASE_REF"):
        ref = os.environ["GITHUB_BASE_REF"]
        candidates = [f"origin/{ref}", ref]
    else:
        raise BadInput("no base commit: pass --base, or set BASE_SHA or GITHUB_BASE_REF")
    for cand in candidates:
        proc = _git("rev-parse", "--verify", "--quiet", "--end-of-options", f"{cand}^{{commit}}")
        if proc.returncode == 0:
            return proc.stdout.strip()
    raise BadInput(
        f"base commit {text.one_line(candidates[0])!r} is not in this checkout "
        "(check out the PR's base: actions/checkout with its sha)"
    )


def _entry(path: Path) -> tuple[str, str] | None:
    """What an entry of a checkout holds, read without following a link or reading
    past ``limits.MAX_FILE_BYTES``: (content, why not read). The content is a regular
    file's sha256 or a link's target (read, never followed), "" when it was not read;
    the reason names a link, an oversize or special file. None for a folder."""
    try:
        info = path.lstat()
        if stat.S_ISDIR(info.st_mode):
            return None  # its entries are listed themselves
        if stat.S_ISLNK(info.st_mode):
            return f"link:{os.readlink(path)}", "a link"
        return files.digest(path, limit=limits.MAX_FILE_BYTES), ""
    except files.FileRefused as exc:
        return "", str(exc)
    except OSError as exc:
        return "", f"unreadable: {exc.strerror or exc}"


def _entries(folder: Path) -> dict[str, tuple[str, str]]:
    """Every entry under ``folder`` by relative name, links and special files included;
    the walk never enters a linked folder (nor ``folder`` itself when it is a link)."""
    top = _entry(folder) if os.path.lexists(folder) else None
    if top is not None:  # a link, a file: not a folder to walk
        return {".": top}
    out = {}
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            if (entry := _entry(path)) is not None:
                out[path.relative_to(folder).as_posix()] = entry
    return out


def changed_files(judge: Path, candidate: Path, folder: str) -> list[str]:
    """Entries under ``folder`` that differ between two checkouts, by content (the PR's
    checkout is shallow: no history to diff against). An entry that was not read (a
    link, a file over the size limit, a FIFO) is listed with why: never followed,
    never skipped; only the same link in both checkouts is no change."""
    a, b = _entries(judge / folder), _entries(candidate / folder)
    out = []
    for name in sorted(set(a) | set(b)):
        ours, theirs = a.get(name, ("", "")), b.get(name, ("", ""))
        if ours[0] and ours[0] == theirs[0]:
            continue
        where = folder if name == "." else f"{folder}/{name}"
        why = theirs[1] or ours[1]
        out.append(f"{where} ({cut(text.one_line(why))}: not read)" if why else where)
    return out


class _AnyKernel(set[str]):
    """A PR's suite may name kernels only its own tree registers: accept every name."""

    def __contains__(self, item: object) -> bool:
        return True


def policy_changes(judge_suite: Suite, candidate_suite_path: Path, tree: Path) -> list[str]:
    """What the PR's suite file changes, in words; its problems named, never fatal.
    A link is not followed (it could lead to ``/dev/zero`` or out of ``tree``)."""
    name = candidate_suite_path.name
    if not os.path.lexists(candidate_suite_path):
        return [f"removes the suite file {name}"]
    if candidate_suite_path.is_symlink() or not files.inside(candidate_suite_path, tree):
        return [f"the PR's suite file {name} is a link: not read"]
    if not candidate_suite_path.is_file():
        return [f"the PR's suite file {name} is not a regular file: not read"]
    try:
        theirs = load_suite(candidate_suite_path, known_kernels=_AnyKernel())
    except GuardError as exc:
        return [f"the PR's suite file is invalid: {text.one_line(exc)}"]
    return policy.changes(judge_suite, theirs)


def _suite_at(ref: str, relpath: str) -> Suite:
    """The suite file as committed at ``ref`` (the judge's policy in a local run)."""
    committed = show_at(ref, relpath)
    if committed is None:
        raise BadInput(f"{relpath} does not exist at the base commit {ref[:12]}")
    with tempfile.TemporaryDirectory(prefix="guard-suite-") as tmp:
        path = Path(tmp) / Path(relpath).name
        path.write_text(committed, "utf-8")
        # The surface file the committed suite names, as committed beside it.
        surface = surface_named(committed)
        if surface:
            text_at = show_at(ref, (Path(relpath).parent / surface).as_posix())
            if text_at is not None:
                (Path(tmp) / surface).write_text(text_at, "utf-8")
        suite = load_suite(path)
    return replace(suite, source=f"{relpath}@{ref[:12]}")


def _stored_context(comparison: Comparison, baselines: str, device: str) -> list[str]:
    """A note on how the candidate compares with this GPU's stored baseline (context:
    another machine or day, so only changes beyond the drift allowance are named)."""
    try:
        stored, _ = find_baseline(baselines, device)
    except GuardError as exc:
        return [f"stored baseline unreadable: {text.one_line(exc)}"]
    if stored is None:
        return []
    try:
        vs = compare_runs(
            stored, comparison.candidate, alpha=comparison.alpha, plan=comparison.plan
        )
    except GuardError:
        return []
    beyond = [c for c in vs.cases if c.gate and c.interval and c.verdict and c.verdict.fails]
    date = stored.created[:10]
    if not beyond:
        return [f"stored baseline ({date}): no gated case slower beyond the drift allowance"]
    ids = ", ".join(f"{c.case_id} {c.ratio:.3f}x" for c in beyond[:5] if c.ratio)
    return [f"stored baseline ({date}), context only: slower beyond the drift allowance: {ids}"]


PROFILE_BUDGET_S = 45.0  # Nsight Compute, all regressed cases together


def _profiles(comparison: Comparison, arms: tuple[Arm, Arm], log: Log) -> list[CaseProfile]:
    """Nsight Compute of each regressed gated case, base beside head, within the budget
    (skipped, and said so, without ncu, counters or time)."""
    from guard.measure import profile

    regressed = [c for c in comparison.cases if c.fails and c.interval is not None]
    out, spent = [], 0.0
    for c in regressed[:3]:
        if c.candidate is None or comparison.candidate.environment.device != "cuda":
            continue
        if is_module_kernel(c.candidate.case.kernel):  # the profiler loads registry kernels
            continue
        budget = PROFILE_BUDGET_S - spent
        started = time.monotonic()
        if budget < 10:
            spent_all = f"the {PROFILE_BUDGET_S:.0f} s profiling budget is spent"
            rows = [("profile skipped", spent_all, "", "")]
        else:
            log(f"[perf-guard] profile {c.case_id}: base and head under Nsight Compute")
            pc = profile.profile_case(
                c.candidate.case,
                arms[0].kernels_root or tree_root(True),
                arms[1].kernels_root or tree_root(True),
                budget_s=budget,
                confined=((arms[0].env, arms[0].wrapper), (arms[1].env, arms[1].wrapper)),
            )
            rows = [(r[0], r[1], r[2], r[3]) for r in profile.profile_rows(pc)]
        spent += time.monotonic() - started
        out.append(CaseProfile(c.case_id, tuple(rows)))
    return out


@dataclass(frozen=True)
class Measured:
    """What ``measure`` found: the comparison, the suite's policy changes, the profiles,
    this runner's shard (``--shard``; None otherwise) and the seconds spent measuring."""

    comparison: Comparison
    changes: tuple[str, ...] = ()
    profiles: tuple[CaseProfile, ...] = ()
    shard: Shard | None = None
    seconds: float | None = None


@dataclass(frozen=True)
class CheckRun:
    """The check's outcome, the Markdown table of every case ("" when nothing was
    measured) and the seconds spent measuring (None when nothing was)."""

    outcome: Outcome
    every_case: str = ""
    measured_s: float | None = None


def measure(
    args: CheckRequest, base: str, tested_label: str, log: Log, progress: ProgressFn
) -> Measured:
    """The paired comparison, the PR's policy changes, and profiles of regressions.

    Judge mode (``--candidate-tree``): this checkout is the base; otherwise the base is
    checked out in a temporary worktree and this checkout is the candidate. Either way
    the suite is the base commit's."""
    opts = MeasureOptions(
        device=args.device,
        time_identical=args.time_identical,
        gpus=round_lanes(args.gpus, args.gpu_split, args.device),
        surface=args.surface,
    )
    with contextlib.ExitStack() as stack:
        if args.candidate_tree:
            candidate = Path(args.candidate_tree).resolve()
            suite, theirs, pr_tree = open_suite(args.suite), candidate / args.suite, candidate
            if suite.uses_registry and not (candidate / "kernels").is_dir():
                raise BadInput(f"--candidate-tree {candidate}: no kernels/ folder there")
            if not candidate.is_dir():
                raise BadInput(f"--candidate-tree {candidate}: not a folder")
            base_arm = Arm("baseline", None, base[:12])
            tested = tested_label[:12] or "candidate"
            cand_arm = Arm("candidate", str(candidate), tested)
        else:
            suite, theirs, pr_tree = _suite_at(base, args.suite), Path(args.suite), Path.cwd()
            tree = stack.enter_context(worktree(base))
            measured = suite.select(list(args.kernels)) if args.kernels else suite
            if not measured.uses_registry:  # module:function kernels: this folder in the base
                tree = same_folder(tree, ".", base[:12])
            base_arm = Arm("baseline", str(tree), base[:12])
            cand_arm = Arm("candidate", None, "working tree")
        changes = policy_changes(suite, theirs, pr_tree)
        covered = coverage_notes(suite)
        (base_arm, cand_arm), confined = _confine(args, stack, (base_arm, cand_arm), suite, log)
        covered = (*confined, *covered)
        if args.kernels:
            suite = suite.select(list(args.kernels))
        shard = None
        if args.shard:  # this runner's share, balanced by time in this GPU's baseline
            spec = shard_option(args.shard)
            weights = weights_baseline(args.baselines, args.device)
            shard = shard_suite(suite, spec, weights)
            suite, opts = shard.suite, replace(opts, family=shard.family)
        started = time.monotonic()
        # kernels/ is all a tree contributes: one git tree in both needs no measuring.
        # module:function kernels: the whole folder is what a tree contributes.
        same = "" if args.time_identical else _same_kernels(base_arm, cand_arm, suite)
        what = "kernels/" if suite.uses_registry else PROJECT_FOLDER
        if same:
            device = guard_env.pick_device(args.device)[0]
            comparison = identical_trees(suite, (base_arm, cand_arm), same, device, what)
        else:
            comparison = compare_arms(suite, base_arm, cand_arm, opts=opts, progress=progress)
        seconds = time.monotonic() - started  # main() says where the wall time went
        comparison = replace(comparison, notes=(*comparison.notes, *covered))
        profiles = _profiles(comparison, (base_arm, cand_arm), log)
        return Measured(comparison, tuple(changes), tuple(profiles), shard, seconds)
    raise AssertionError("unreachable")  # pragma: no cover  (the with block returns)


def _confine(
    args: CheckRequest,
    stack: contextlib.ExitStack,
    arms: tuple[Arm, Arm],
    suite: Suite,
    log: Log,
) -> tuple[tuple[Arm, Arm], tuple[str, ...]]:
    """Each tree's own compile caches (copies of the trusted one) and, asked for or
    where bubblewrap works, its sandbox: the arms that run so, and a note saying how.
    In judge mode, with a trusted cache, or with ``--sandbox bwrap``; a local run
    without them keeps the user's own caches."""
    if not (args.candidate_tree or args.trusted_cache or args.sandbox == "bwrap"):
        return arms, ()
    trusted = build_cache.check_trusted(args.trusted_cache) if args.trusted_cache else None
    folder = stack.enter_context(tempfile.TemporaryDirectory(prefix="guard-caches-"))
    t0 = time.monotonic()
    envs = build_cache.arm_caches(folder, trusted)
    seeded = f"copies of {trusted}" if trusted else "empty (no --trusted-cache)"
    log(f"[perf-guard] compile caches: one per tree, {seeded} ({time.monotonic() - t0:.1f} s)")
    why = "not asked for (--sandbox none)" if args.sandbox == "none" else sandbox.unavailable()
    if why and args.sandbox == "bwrap":
        raise InfraError(f"--sandbox bwrap: {why}")
    out = []
    for arm, env, writable in zip(arms, envs, build_cache.arm_folders(folder), strict=True):
        wrapper: tuple[str, ...] = ()
        if not why:
            root = arm.kernels_root or tree_root(suite.uses_registry)
            readable = [
                str(GUARD_ROOT),
                root,
                *sys.path,
                *os.environ.get("PYTHONPATH", "").split(":"),
            ]
            wrapper = sandbox.wrapper([str(writable)], [r for r in readable if r])
        out.append(replace(arm, env=env, wrapper=wrapper))
    note = (
        "sandbox: each tree's code ran in bubblewrap, the file system read-only but its own "
        "compile caches, without the runner's variables"
        if not why
        else f"sandbox: none ({why}); each tree still had its own compile caches"
    )
    return (out[0], out[1]), (note,)


def _same_kernels(base_arm: Arm, cand_arm: Arm, suite: Suite) -> str:
    """The git tree of ``kernels/`` when base and candidate hold the same one ("" when
    not, or when git cannot tell: then the check measures). The candidate's folder must
    hold exactly that tree (no file modified, untracked or ignored); the judge's may
    hold its own bytecode caches. A suite of ``module:function`` kernels: the git tree
    of each arm's whole folder, where its modules come from."""
    if not suite.uses_registry:
        base_tree = folder_tree(base_arm.kernels_root or tree_root(False), ignored_count=False)
        if cand_arm.kernels_root is None:
            cand_tree = folder_tree(tree_root(False), ignored_count=False)
        else:
            cand_tree = folder_tree(cand_arm.kernels_root)
        return base_tree if base_tree and base_tree == cand_tree else ""
    # Where each arm's workers import kernels/ from: the judge's own (this guard's) in
    # judge mode, this working tree in a local run.
    base_tree = kernels_tree(base_arm.kernels_root or local_kernels_root(), ignored_count=False)
    if cand_arm.kernels_root is None:  # a local run: the user's tree, its caches too
        cand_tree = kernels_tree(local_kernels_root(), ignored_count=False)
    else:  # a pull request's fresh checkout: exactly the tree, nothing beside it
        cand_tree = kernels_tree(cand_arm.kernels_root)
    return base_tree if base_tree and base_tree == cand_tree else ""


def coverage_notes(suite: Suite) -> tuple[str, ...]:
    """The suite's launch-path coverage of each gated kernel, a line each (the judge's
    kernels and surface); a problem computing it is a note too, never fatal."""
    from guard.measure import coverage

    try:
        lines = [k.line() for k in coverage.coverage(suite)]
    except Exception as exc:
        return (f"launch-path coverage not computed: {type(exc).__name__}: {exc}",)
    return tuple(f"coverage: {line}" for line in lines)


def write_reports(
    out_dir: Path, comparison: Comparison, html: bool, profiles: Sequence[CaseProfile] = ()
) -> None:
    results.save(comparison.candidate, out_dir / "results.json")
    results.save(comparison.baseline, out_dir / "base-results.json")
    if html:
        from guard.report import report

        page = report.html_report(comparison.candidate, comparison, profiles=profiles)
        atomic.write_atomic(out_dir / "report.html", page)


def run_check(
    args: CheckRequest,
    labels: CheckLabels = CheckLabels(),
    log: Log = _no_log,
    progress: ProgressFn = _no_progress,
) -> CheckRun:
    """The whole check; every failure becomes an Outcome, never an exception. With it,
    the Markdown table of every case ("" when nothing was measured), kept in memory for
    the job summary (a compare.md in ``out_dir`` may be an earlier run's). ``log``
    takes lines for the log (a traceback quoting a kernel, say), ``progress`` the
    measuring's progress events."""
    context: dict[str, object] = asdict(labels)
    out_dir = args.out_dir
    try:
        if args.candidate_tree:  # this checkout is the base: its sha only labels the arm
            base = args.base or os.environ.get("BASE_SHA") or _git("rev-parse", "HEAD").stdout
            base = base.strip() or "base"
        else:
            base = resolve_base(args.base)
        context["judge_commit"] = base
        baseline_changes = (
            changed_files(Path.cwd(), Path(args.candidate_tree), args.baselines)
            if args.candidate_tree
            else []
        )
        if cases_over_gpus(
            args.gpus, args.gpu_split
        ):  # one process per GPU, each a shard; merged here
            return CheckRun(*_run_on_gpus(args, context, log))
        measured = measure(args, base, labels.tested_commit, log, progress)
    except GuardError as exc:
        verdict = (
            CheckVerdict.INFRASTRUCTURE
            if exc.exit_code == ExitCode.INFRA
            else CheckVerdict.BAD_INPUT
        )
        headline = verdict.headline(text.one_line(exc))
        failed = Outcome(verdict, headline, **context)  # type: ignore[arg-type]
        return CheckRun(replace(failed, shard=_failed_shard(args, context)))
    except Exception as exc:  # a bug in the guard: infrastructure, never the PR's verdict
        log("".join(traceback.format_exception(exc)).rstrip())
        message = CheckVerdict.INFRASTRUCTURE.headline(
            f"the guard crashed: {type(exc).__name__}: {text.one_line(exc)}"
        )
        outcome = Outcome(CheckVerdict.INFRASTRUCTURE, message, **context)  # type: ignore[arg-type]
        return CheckRun(replace(outcome, shard=_failed_shard(args, context)))
    # A local run has no GPU_LABEL: the heading names the GPU the candidate ran on.
    comparison, profiles = measured.comparison, list(measured.profiles)
    context["gpu"] = context["gpu"] or comparison.candidate.environment.gpu_name
    notes = _stored_context(comparison, args.baselines, args.device)
    outcome = comparison.outcome(
        policy_changes=measured.changes,
        baseline_changes=tuple(baseline_changes),
        profiles=tuple(profiles),
        **context,
    )
    outcome = replace(outcome, notes=(*outcome.notes, *notes))
    if measured.shard is not None:  # what guard merge needs to decide the union again
        info = shard_info(
            measured.shard,
            comparison,
            base=str(context["judge_commit"]),
            head=str(context["tested_commit"]) or "candidate",
            use_fingerprints=not args.time_identical,
        )
        outcome = replace(outcome, shard=info)
    every_case = ""
    try:
        every_case = render.comparison_markdown(comparison)
        atomic.write_atomic(out_dir / "compare.md", every_case)
        write_reports(out_dir, comparison, args.html, profiles)
    except Exception as exc:  # the verdict stands; say what failed
        log("".join(traceback.format_exception(exc)).rstrip())
        text.annotate("warning", "perf-guard report", f"writing a report failed: {exc}")
    return CheckRun(outcome, every_case, measured.seconds)


def _failed_shard(args: CheckRequest, context: Mapping[str, object]) -> ShardInfo | None:
    """The shard record of a shard that failed before it measured (no evidence:
    ``guard merge`` reports it as a failed shard, never as a pass)."""
    if not args.shard:
        return None
    try:
        spec = shard_option(args.shard)
    except GuardError:
        return None
    base, head = str(context.get("judge_commit") or ""), str(context.get("tested_commit") or "")
    return ShardInfo(spec.index, spec.count, base, head or "candidate", "", "")


def _run_on_gpus(
    args: CheckRequest, context: Mapping[str, object], log: Log
) -> tuple[Outcome, str]:
    """``--gpus``: shard i/N of the check on each GPU (its own process, its own
    ``--out-dir``), merged here at the family level (``guard merge``)."""
    gpus = gpu_list(args.gpus or "", args.device)
    passed = without_options(
        list(args.argv),
        ("--gpus", "--gpu-split", "--gpu-timeout", "--shard", "--out-dir"),
        ("--html",),
    )

    def argv_for(i: int, n: int, folder: Path) -> list[str]:
        return [
            sys.executable, "-m", "guard.ci", *passed, "--shard", f"{i}/{n}",
            "--out-dir", str(folder),
        ]  # fmt: skip

    merged = spread(
        gpus,
        argv_for,
        lambda folder: folder / OUTCOME_FILE,
        timeout_s=args.gpu_timeout,
        log=log,
        unset=GITHUB_VARS,
    )
    outcome = merge_outcome(merged)
    outcome = replace(outcome, run_url=str(context.get("run_url") or outcome.run_url))
    every_case = render.comparison_markdown(merged.comparison)
    try:
        atomic.write_atomic(args.out_dir / "compare.md", every_case)
        write_reports(args.out_dir, merged.comparison, args.html, merged.profiles)
    except Exception as exc:  # the verdict stands; say what failed
        log("".join(traceback.format_exception(exc)).rstrip())
        text.annotate("warning", "perf-guard report", f"writing a report failed: {exc}")
    return outcome, every_case
