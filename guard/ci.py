"""The pull-request check's entry point: ``python -m guard.ci``.

The judge is the base commit. ``.github/workflows/perf-guard.yml`` checks out the PR's
base into ``judge/`` and the commit under test into ``pr/``, installs ``judge/`` and
runs, from ``judge/``::

    python -m guard.ci --device cuda --base "$BASE_SHA" --candidate-tree ../pr \
        --out-dir ../perf-guard-out --html

so the policy (suite cases, gates, thresholds, tolerances, timing plan, alpha), the
baselines and every line of code that measures and decides are the base commit's;
only ``kernels/`` is imported from the PR's tree. The check is one paired comparison
(``core.compare_arms``): the base's kernels and the PR's, correctness first, then
interleaved timing rounds on this runner, so the machine's drift cancels; a case whose
kernel is identical in both (``guard.measure.fingerprint``) is decided without timing. The
stored baseline of this GPU, when there is one, is context in the report, not the
verdict. What the PR changes in the suite file or the baselines is listed as taking
effect after merge.

Without ``--candidate-tree`` (a local run in a checkout of the PR) the base commit's
kernels are measured from a temporary worktree of ``--base`` and the candidate is this
tree; the policy still comes from the base commit's suite file.

Another project's check (``.github/workflows/guard-reusable.yml``): its suite names
``module:function`` kernels; ``judge/`` is that project's base commit (its suite, and
the base arm's modules), the guard is installed from a trusted ref of this repository,
and only the modules the suite names are imported from ``pr/``. Such a project needs
no ``kernels/`` package.

Scaling out (docs/CI.md, "Scaling out"): ``--shard I/N`` measures one share of the
suite, balanced by time in this GPU's baseline, and its ``meta.json`` carries the
evidence ``guard merge`` decides the union from at the family false-alarm rate (the
workflow's merge job); ``--gpus N|all|0,2,...`` runs one such shard per GPU of this
host, each in its own process (``CUDA_VISIBLE_DEVICES``), and merges them here.

This module is GitHub plumbing only: it calls the core, renders the ``Outcome`` the
core builds, and writes the job summary, the annotations, ``$GITHUB_OUTPUT`` and the
files of ``--out-dir`` (``meta.json``, the outcome, is what the PR-comment workflow reads). Exit
codes are the guard's: 0 pass, 1 regression or wrong results, 2 bad input or no
verdict, 3 infrastructure.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import secrets
import stat
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from guard import cli_merge, comment, core
from guard.base import files, limits, text
from guard.base.errors import BadInput, ExitCode, GuardError, InfraError, cut
from guard.decide import policy
from guard.decide.compare import Comparison, compare_runs
from guard.decide.merge import merged_outcome as merge_outcome
from guard.decide.outcome import CaseProfile, CheckVerdict, Outcome, ShardInfo
from guard.measure import build_cache, sandbox
from guard.measure import env as guard_env
from guard.measure.proc import GUARD_ROOT, local_kernels_root, tree_root
from guard.measure.runner import Arm
from guard.report import render, terminal
from guard.store import results
from guard.store.suite import Suite, is_module_kernel, load_suite, surface_named

OUTCOME_FILE = "meta.json"  # the name the comment workflow looks for in the artifact
MAX_EVENT_BYTES = 25 * 1024 * 1024  # GitHub caps a webhook payload (the event file) at 25 MB
MAX_LISTED_ANNOTATIONS = 20  # baseline-change annotations; the rest are counted


# --------------------------------------------------------------------------- GitHub


def print_untrusted(message: str) -> None:
    """Print ``message`` (a traceback quoting a kernel's message, say) to stderr so that
    none of its lines runs as a workflow command: under GitHub Actions it goes between
    ``::stop-commands::TOKEN`` and ``::TOKEN::``, the runner's documented way."""
    if not os.environ.get("GITHUB_ACTIONS"):
        print(message, file=sys.stderr, flush=True)
        return
    token = secrets.token_hex(16)
    print(f"::stop-commands::{token}\n{message}\n::{token}::", file=sys.stderr, flush=True)


def write_outputs(values: dict[str, str]) -> None:
    path = os.environ.get("GITHUB_OUTPUT")
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            for key, value in values.items():
                fh.write(f"{key}={text.one_line(value)}\n")


def _run_url() -> str:
    server = os.environ.get("GITHUB_SERVER_URL", "")
    repo = os.environ.get("GITHUB_REPOSITORY", "")
    run_id = os.environ.get("GITHUB_RUN_ID", "")
    return f"{server}/{repo}/actions/runs/{run_id}" if server and repo and run_id else ""


def _named(var: str) -> str:
    """``VAR=value`` of an environment variable, for an error message (one line, cut)."""
    return cut(text.one_line(f"{var}={os.environ.get(var, '')}"))


def _pr_number() -> int | None:
    """The PR's number: ``$PR_NUMBER``, else ``pull_request.number`` of the event file;
    None when neither has one. BadInput for a PR_NUMBER that is not a positive ASCII
    number (``str.isdigit`` accepts "²", which ``int`` refuses) and for an event file
    that cannot be read: a directory, a device (``/dev/zero``), over the size limit,
    not JSON."""
    number = os.environ.get("PR_NUMBER", "")
    if number:
        if not re.fullmatch(r"[0-9]{1,18}", number) or int(number) == 0:
            raise BadInput(f"{_named('PR_NUMBER')}: not a pull-request number (1, 2, ...)")
        return int(number)
    path = os.environ.get("GITHUB_EVENT_PATH", "")
    if not path:
        return None
    try:
        event = json.loads(files.read_text(path, MAX_EVENT_BYTES))
    except (OSError, UnicodeDecodeError) as exc:  # files.FileRefused is an OSError
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        where = _named("GITHUB_EVENT_PATH")
        raise BadInput(f"{where}: cannot read the event file ({why})") from None
    except (ValueError, RecursionError) as exc:
        raise BadInput(f"{_named('GITHUB_EVENT_PATH')}: not JSON ({cut(str(exc))})") from None
    pr = event.get("pull_request") if isinstance(event, dict) else None
    found = pr.get("number") if isinstance(pr, dict) else None
    if isinstance(found, int) and not isinstance(found, bool) and found > 0:
        return found
    return None


def _check_appendable(var: str) -> None:
    """BadInput unless ``$var`` (a file GitHub reads after the step) can be appended to:
    a directory or a path under a regular file would fail only after measuring."""
    path = os.environ.get(var, "")
    if not path:
        return
    # O_NONBLOCK: a FIFO without a reader fails here instead of blocking.
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as exc:
        raise BadInput(f"{_named(var)}: cannot append to it ({exc.strerror or exc})") from None
    try:
        mode = os.fstat(fd).st_mode
    finally:
        os.close(fd)
    if not (stat.S_ISREG(mode) or stat.S_ISCHR(mode)):  # a file, or /dev/null
        raise BadInput(f"{_named(var)}: not a regular file")


def check_setup(args: argparse.Namespace) -> int | None:
    """What the check needs from its environment, checked before anything is measured
    (a bad one used to fail only when the results were written); the PR's number.
    BadInput naming the option or variable at fault."""
    out_dir: Path = args.out_dir
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        why, where = exc.strerror or exc, cut(text.one_line(out_dir))
        raise BadInput(f"--out-dir {where}: cannot create the folder ({why})") from None
    if not os.access(out_dir, os.W_OK | os.X_OK):
        raise BadInput(f"--out-dir {cut(text.one_line(out_dir))}: not writable")
    _check_appendable("GITHUB_OUTPUT")
    _check_appendable("GITHUB_STEP_SUMMARY")
    return _pr_number()


# --------------------------------------------------------------------------- trees


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
    committed = core.show_at(ref, relpath)
    if committed is None:
        raise BadInput(f"{relpath} does not exist at the base commit {ref[:12]}")
    with tempfile.TemporaryDirectory(prefix="guard-suite-") as tmp:
        path = Path(tmp) / Path(relpath).name
        path.write_text(committed, "utf-8")
        # The surface file the committed suite names, as committed beside it.
        surface = surface_named(committed)
        if surface:
            text_at = core.show_at(ref, (Path(relpath).parent / surface).as_posix())
            if text_at is not None:
                (Path(tmp) / surface).write_text(text_at, "utf-8")
        suite = load_suite(path)
    return replace(suite, source=f"{relpath}@{ref[:12]}")


# --------------------------------------------------------------------------- the check


def _stored_context(comparison: Comparison, baselines: str, device: str) -> list[str]:
    """A note on how the candidate compares with this GPU's stored baseline (context:
    another machine or day, so only changes beyond the drift allowance are named)."""
    try:
        stored, _ = core.find_baseline(baselines, device)
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


def _profiles(comparison: Comparison, arms: tuple[Arm, Arm]) -> list[CaseProfile]:
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
            print(f"[perf-guard] profile {c.case_id}: base and head under Nsight Compute",
                  file=sys.stderr, flush=True)  # fmt: skip
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
    shard: core.Shard | None = None
    seconds: float | None = None


@dataclass(frozen=True)
class CheckRun:
    """The check's outcome, the Markdown table of every case ("" when nothing was
    measured) and the seconds spent measuring (None when nothing was)."""

    outcome: Outcome
    every_case: str = ""
    measured_s: float | None = None


def measure(args: argparse.Namespace, base: str) -> Measured:
    """The paired comparison, the PR's policy changes, and profiles of regressions.

    Judge mode (``--candidate-tree``): this checkout is the base; otherwise the base is
    checked out in a temporary worktree and this checkout is the candidate. Either way
    the suite is the base commit's."""
    opts = core.MeasureOptions(
        device=args.device,
        time_identical=args.time_identical,
        gpus=cli_merge.round_lanes(args),
        surface=args.surface,
    )
    with contextlib.ExitStack() as stack:
        if args.candidate_tree:
            candidate = Path(args.candidate_tree).resolve()
            suite, theirs, pr_tree = core.open_suite(args.suite), candidate / args.suite, candidate
            if suite.uses_registry and not (candidate / "kernels").is_dir():
                raise BadInput(f"--candidate-tree {candidate}: no kernels/ folder there")
            if not candidate.is_dir():
                raise BadInput(f"--candidate-tree {candidate}: not a folder")
            base_arm = Arm("baseline", None, base[:12])
            tested = os.environ.get("TESTED_SHA", "")[:12] or "candidate"
            cand_arm = Arm("candidate", str(candidate), tested)
        else:
            suite, theirs, pr_tree = _suite_at(base, args.suite), Path(args.suite), Path.cwd()
            tree = stack.enter_context(core.worktree(base))
            measured = suite.select(args.kernels) if args.kernels else suite
            if not measured.uses_registry:  # module:function kernels: this folder in the base
                tree = core.same_folder(tree, ".", base[:12])
            base_arm = Arm("baseline", str(tree), base[:12])
            cand_arm = Arm("candidate", None, "working tree")
        changes = policy_changes(suite, theirs, pr_tree)
        covered = coverage_notes(suite)
        (base_arm, cand_arm), confined = _confine(args, stack, (base_arm, cand_arm), suite)
        covered = (*confined, *covered)
        if args.kernels:
            suite = suite.select(args.kernels)
        shard = None
        if args.shard:  # this runner's share, balanced by time in this GPU's baseline
            spec = cli_merge.shard_option(args.shard)
            weights = cli_merge.weights_baseline(args.baselines, args.device)
            shard = core.shard_suite(suite, spec, weights)
            suite, opts = shard.suite, replace(opts, family=shard.family)
        progress = terminal.ProgressPrinter(prefix="[perf-guard]")
        started = time.monotonic()
        # kernels/ is all a tree contributes: one git tree in both needs no measuring.
        # module:function kernels: the whole folder is what a tree contributes.
        same = "" if args.time_identical else _same_kernels(base_arm, cand_arm, suite)
        what = "kernels/" if suite.uses_registry else core.PROJECT_FOLDER
        try:
            if same:
                device = guard_env.pick_device(args.device)[0]
                comparison = core.identical_trees(suite, (base_arm, cand_arm), same, device, what)
            else:
                comparison = core.compare_arms(
                    suite, base_arm, cand_arm, opts=opts, progress=progress
                )
        finally:
            progress.close()
        seconds = time.monotonic() - started  # main() says where the wall time went
        comparison = replace(comparison, notes=(*comparison.notes, *covered))
        profiles = _profiles(comparison, (base_arm, cand_arm))
        return Measured(comparison, tuple(changes), tuple(profiles), shard, seconds)
    raise AssertionError("unreachable")  # pragma: no cover  (the with block returns)


def _confine(
    args: argparse.Namespace, stack: contextlib.ExitStack, arms: tuple[Arm, Arm], suite: Suite
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
    print(
        f"[perf-guard] compile caches: one per tree, {seeded} ({time.monotonic() - t0:.1f} s)",
        file=sys.stderr,
        flush=True,
    )
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
        base_tree = core.folder_tree(base_arm.kernels_root or tree_root(False), ignored_count=False)
        if cand_arm.kernels_root is None:
            cand_tree = core.folder_tree(tree_root(False), ignored_count=False)
        else:
            cand_tree = core.folder_tree(cand_arm.kernels_root)
        return base_tree if base_tree and base_tree == cand_tree else ""
    # Where each arm's workers import kernels/ from: the judge's own (this guard's) in
    # judge mode, this working tree in a local run.
    base_tree = core.kernels_tree(
        base_arm.kernels_root or local_kernels_root(), ignored_count=False
    )
    if cand_arm.kernels_root is None:  # a local run: the user's tree, its caches too
        cand_tree = core.kernels_tree(local_kernels_root(), ignored_count=False)
    else:  # a pull request's fresh checkout: exactly the tree, nothing beside it
        cand_tree = core.kernels_tree(cand_arm.kernels_root)
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
        results.write_atomic(out_dir / "report.html", page)


def run(
    args: argparse.Namespace,
    out_dir: Path,
    pr_number: int | None = None,
    argv: Sequence[str] = (),
) -> CheckRun:
    """The whole check; every failure becomes an Outcome, never an exception. With it,
    the Markdown table of every case ("" when nothing was measured), kept in memory for
    the job summary (a compare.md in ``out_dir`` may be an earlier run's). ``argv``: the
    command line, which ``--gpus`` passes on to one process per GPU."""
    context = {
        "gpu": os.environ.get("GPU_LABEL", ""),
        "head_sha": os.environ.get("HEAD_SHA", ""),
        "tested_commit": os.environ.get("TESTED_SHA", "") or os.environ.get("HEAD_SHA", ""),
        "pr_number": pr_number,
        "run_url": _run_url(),
    }
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
        if cli_merge.cases_over_gpus(args):  # one process per GPU, each a shard; merged here
            return CheckRun(*_run_on_gpus(args, context, argv))
        measured = measure(args, base)
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
        print_untrusted("".join(traceback.format_exception(exc)).rstrip())
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
        info = cli_merge.shard_info(
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
        results.write_atomic(out_dir / "compare.md", every_case)
        write_reports(out_dir, comparison, args.html, profiles)
    except Exception as exc:  # the verdict stands; say what failed
        print_untrusted("".join(traceback.format_exception(exc)).rstrip())
        text.annotate("warning", "perf-guard report", f"writing a report failed: {exc}")
    return CheckRun(outcome, every_case, measured.seconds)


def _failed_shard(args: argparse.Namespace, context: Mapping[str, object]) -> ShardInfo | None:
    """The shard record of a shard that failed before it measured (no evidence:
    ``guard merge`` reports it as a failed shard, never as a pass)."""
    if not args.shard:
        return None
    try:
        spec = cli_merge.shard_option(args.shard)
    except GuardError:
        return None
    base, head = str(context.get("judge_commit") or ""), str(context.get("tested_commit") or "")
    return ShardInfo(spec.index, spec.count, base, head or "candidate", "", "")


def _run_on_gpus(
    args: argparse.Namespace, context: Mapping[str, object], argv: Sequence[str]
) -> tuple[Outcome, str]:
    """``--gpus``: shard i/N of the check on each GPU (its own process, its own
    ``--out-dir``), merged here at the family level (``guard merge``)."""
    gpus = cli_merge.gpu_list(args.gpus, args.device)
    passed = cli_merge.without_options(
        list(argv), ("--gpus", "--gpu-split", "--gpu-timeout", "--shard", "--out-dir"), ("--html",)
    )

    def argv_for(i: int, n: int, folder: Path) -> list[str]:
        return [
            sys.executable, "-m", "guard.ci", *passed, "--shard", f"{i}/{n}",
            "--out-dir", str(folder),
        ]  # fmt: skip

    merged = cli_merge.spread(
        gpus,
        argv_for,
        lambda folder: folder / OUTCOME_FILE,
        timeout_s=args.gpu_timeout,
        log=lambda line: print(line, file=sys.stderr, flush=True),
        unset=cli_merge.GITHUB_VARS,
    )
    outcome = merge_outcome(merged)
    outcome = replace(outcome, run_url=str(context.get("run_url") or outcome.run_url))
    every_case = render.comparison_markdown(merged.comparison)
    try:
        results.write_atomic(args.out_dir / "compare.md", every_case)
        write_reports(args.out_dir, merged.comparison, args.html, merged.profiles)
    except Exception as exc:  # the verdict stands; say what failed
        print_untrusted("".join(traceback.format_exception(exc)).rstrip())
        text.annotate("warning", "perf-guard report", f"writing a report failed: {exc}")
    return outcome, every_case


def publish(outcome: Outcome, out_dir: Path, every_case: str = "") -> None:
    """Everything GitHub sees, rendered from the one outcome."""
    results.write_atomic(out_dir / OUTCOME_FILE, json.dumps(outcome.to_json(), indent=1) + "\n")
    text.emit_commands(render.annotations(outcome))
    listed = outcome.baseline_changes[:MAX_LISTED_ANNOTATIONS]
    for path in listed:
        message = f"{path}: takes effect after merge"
        file = path.split(" (")[0] if path.endswith(": not read)") else path  # "x (a link: ...)"
        text.annotate("warning", "This PR changes a baseline", message, file)
    if len(outcome.baseline_changes) > len(listed):
        more = len(outcome.baseline_changes) - len(listed)
        text.annotate("warning", "This PR changes a baseline", f"and {more} more file(s)")
    if outcome.policy_changes:
        text.annotate(
            "warning",
            "This PR changes the policy",
            "judged by the base commit's suite; takes effect after merge: "
            + "; ".join(outcome.policy_changes[:10]),
        )
    summary = comment.markdown([outcome]).replace(comment.MARKER + "\n", "")
    if every_case:
        summary += "\n<details><summary>Every case</summary>\n\n" + every_case
        summary += "\n</details>\n"
    text.append_step_summary(summary)
    write_outputs(
        {
            "exit_code": str(int(outcome.exit_code)),
            "verdict": outcome.verdict.value,
            "baseline_changed": "true" if outcome.baseline_changes else "false",
            "policy_changed": "true" if outcome.policy_changes else "false",
        }
    )


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m guard.ci",
        description="The PR check: this checkout (the base commit) judges the kernels of "
        "--candidate-tree, paired on this machine; reports for GitHub Actions.",
    )
    p.add_argument("--base", help="the PR's base commit (default: $BASE_SHA or $GITHUB_BASE_REF)")
    p.add_argument(
        "--candidate-tree",
        help="the checkout of the commit under test; only its kernels/ are imported "
        "(default: this checkout is the candidate, and --base is checked out as the base)",
    )
    p.add_argument("--suite", default="suites/default.yaml", help="suite YAML file")
    p.add_argument("--baselines", default="baselines", help="baseline folder (context)")
    p.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    p.add_argument("--out-dir", type=Path, default=Path("perf-guard-out"), help="reports here")
    p.add_argument("--html", action="store_true", help="also write the HTML report")
    p.add_argument(
        "--kernels",
        nargs="+",
        help="only these kernels of the judge's suite (measurement studies; not in CI)",
    )
    p.add_argument(
        "--time-identical",
        action="store_true",
        help="time cases whose kernel is identical in base and head too",
    )
    p.add_argument(
        "--trusted-cache",
        metavar="DIR",
        help="a compile cache built by a trusted job on main (guard warm-cache DIR): each "
        "tree's workers start from a copy of it; it is never written",
    )
    p.add_argument(
        "--sandbox",
        choices=sandbox.MODES,
        default="auto",
        help="run each tree's code in bubblewrap, read-only but its own caches: bwrap "
        "(exit 3 where it cannot), auto (where it can; the default), none",
    )
    p.add_argument(
        "--surface",
        choices=core.SURFACE_MODES,
        default="changed",
        help="the suite's surface cases to add: those whose compiled kernels or launches "
        "differ between base and head (changed, the default), all, or none",
    )
    p.add_argument(
        "--shard",
        metavar="I/N",
        help="measure only shard I of N (counted from 1; balanced by time in this GPU's "
        "baseline); meta.json then carries what `guard merge` needs",
    )
    p.add_argument(
        "--gpus",
        metavar="N|all|0,2,...",
        help="spread the check over these GPUs of this host (how: --gpu-split) and "
        "decide every case together",
    )
    cli_merge.add_gpu_split(p)
    p.add_argument(
        "--gpu-timeout",
        type=float,
        default=cli_merge.DEFAULT_GPU_TIMEOUT_S,
        help=argparse.SUPPRESS,  # seconds one GPU's process may take (tests)
    )
    return p


def wall_line(total_s: float, measured_s: float | None) -> str:
    """Where the check's wall time went: measuring (the rounds and the decisions between
    them) against the rest (set-up; profiles, reports), which sharding does not divide."""
    line = f"wall {total_s:.0f} s"
    if measured_s is not None:
        rest = max(0.0, total_s - measured_s)
        line += f": measuring {measured_s:.0f} s, the rest {rest:.0f} s (set-up, reports)"
    return line


def main(argv: Sequence[str] | None = None) -> int:
    started = time.monotonic()
    args = build_parser().parse_args(argv)
    command_line = list(sys.argv[1:] if argv is None else argv)  # --gpus passes them on
    if args.shard and args.gpus:
        print("[perf-guard] error: --gpus and --shard: give one", file=sys.stderr)
        return int(ExitCode.BAD_INPUT)
    if args.gpu_split != "rounds" and not args.gpus:
        print("[perf-guard] error: --gpu-split: only with --gpus", file=sys.stderr)
        return int(ExitCode.BAD_INPUT)
    try:
        pr_number = check_setup(args)
    except GuardError as exc:  # before measuring: nothing to publish, one line
        text.annotate("error", "perf-guard", str(exc))
        print(f"[perf-guard] error: {text.one_line(exc)}", file=sys.stderr)
        return int(exc.exit_code)
    check = run(args, args.out_dir, pr_number, command_line)
    outcome, every_case = check.outcome, check.every_case
    try:
        publish(outcome, args.out_dir, every_case)
    except OSError as exc:  # checked writable before measuring; a full disk, say
        code = outcome.exit_code if outcome.exit_code != ExitCode.PASS else ExitCode.INFRA
        print(f"[perf-guard] error: publishing the outcome failed: {exc}", file=sys.stderr)
        print(f"[perf-guard] {text.one_line(outcome.headline)}, exit code {int(code)}",
              file=sys.stderr)  # fmt: skip
        return int(code)
    print(f"[perf-guard] {text.one_line(outcome.headline)}", file=sys.stderr)
    print(
        f"[perf-guard] {wall_line(time.monotonic() - started, check.measured_s)}", file=sys.stderr
    )
    print(
        f"[perf-guard] verdict {outcome.verdict.value}, exit code {int(outcome.exit_code)}",
        file=sys.stderr,
    )
    return int(outcome.exit_code)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:  # never let a crash read as exit 1 ("regression")
        traceback.print_exc()
        sys.exit(int(ExitCode.INFRA))
