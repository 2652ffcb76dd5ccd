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
kernel is identical in both (``guard.fingerprint``) is decided without timing. The
stored baseline of this GPU, when there is one, is context in the report, not the
verdict. What the PR changes in the suite file or the baselines is listed as taking
effect after merge.

Without ``--candidate-tree`` (a local run in a checkout of the PR) the base commit's
kernels are measured from a temporary worktree of ``--base`` and the candidate is this
tree; the policy still comes from the base commit's suite file.

This module is GitHub plumbing only: it calls the core, renders the ``Outcome`` the
core builds, and writes the job summary, the annotations, ``$GITHUB_OUTPUT`` and the
files of ``--out-dir`` (``meta.json``, the outcome, is what the PR-comment workflow reads). Exit
codes are the guard's: 0 pass, 1 regression or wrong results, 2 bad input or no
verdict, 3 infrastructure.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from guard import comment, core, policy, render, results, terminal, text
from guard.compare import Comparison, compare_runs
from guard.errors import BadInput, ExitCode, GuardError
from guard.outcome import CaseProfile, CheckVerdict, Outcome
from guard.proc import local_kernels_root
from guard.runner import Arm
from guard.suite import Suite, load_suite

OUTCOME_FILE = "meta.json"  # the name the comment workflow looks for in the artifact


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


def _pr_number() -> int | None:
    number = os.environ.get("PR_NUMBER", "")
    if not number and os.environ.get("GITHUB_EVENT_PATH"):
        try:
            event = json.loads(Path(os.environ["GITHUB_EVENT_PATH"]).read_text("utf-8"))
            number = str(event.get("pull_request", {}).get("number", ""))
        except (OSError, ValueError, AttributeError):
            number = ""
    return int(number) if number.isdigit() and int(number) > 0 else None


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


def _digests(folder: Path) -> dict[str, str]:
    if not folder.is_dir():
        return {}
    return {
        p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def changed_files(judge: Path, candidate: Path, folder: str) -> list[str]:
    """Files under ``folder`` that differ between two checkouts, by content (the PR's
    checkout is shallow: no history to diff against)."""
    a, b = _digests(judge / folder), _digests(candidate / folder)
    return [f"{folder}/{name}" for name in sorted(set(a) | set(b)) if a.get(name) != b.get(name)]


class _AnyKernel(set[str]):
    """A PR's suite may name kernels only its own tree registers: accept every name."""

    def __contains__(self, item: object) -> bool:
        return True


def policy_changes(judge_suite: Suite, candidate_suite_path: Path) -> list[str]:
    """What the PR's suite file changes, in words; its problems named, never fatal."""
    if not candidate_suite_path.is_file():
        return [f"removes the suite file {candidate_suite_path.name}"]
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
        vs = compare_runs(stored, comparison.candidate, alpha=comparison.alpha)
    except GuardError:
        return []
    beyond = [c for c in vs.cases if c.gate and c.interval and c.verdict and c.verdict.fails]
    date = stored.created[:10]
    if not beyond:
        return [f"stored baseline ({date}): no gated case slower beyond the drift allowance"]
    ids = ", ".join(f"{c.case_id} {c.ratio:.3f}x" for c in beyond[:5] if c.ratio)
    return [f"stored baseline ({date}), context only: slower beyond the drift allowance: {ids}"]


PROFILE_BUDGET_S = 60.0  # Nsight Compute, all regressed cases together


def _profiles(comparison: Comparison, base_tree: Path, head_tree: Path) -> list[CaseProfile]:
    """Nsight Compute of each regressed gated case, base beside head, within the budget
    (skipped, and said so, without ncu, counters or time)."""
    from guard import profile

    regressed = [c for c in comparison.cases if c.fails and c.interval is not None]
    out, spent = [], 0.0
    for c in regressed[:3]:
        if c.candidate is None or comparison.candidate.environment.device != "cuda":
            continue
        budget = PROFILE_BUDGET_S - spent
        started = time.monotonic()
        if budget < 10:
            rows = [("profile skipped", "the 60 s profiling budget is spent", "", "")]
        else:
            pc = profile.profile_case(c.candidate.case, base_tree, head_tree, budget_s=budget)
            rows = [(r[0], r[1], r[2], r[3]) for r in profile.profile_rows(pc)]
        spent += time.monotonic() - started
        out.append(CaseProfile(c.case_id, tuple(rows)))
    return out


def measure(
    args: argparse.Namespace, base: str
) -> tuple[Comparison, list[str], list[CaseProfile]]:
    """The paired comparison, the PR's policy changes, and profiles of regressions.

    Judge mode (``--candidate-tree``): this checkout is the base; otherwise the base is
    checked out in a temporary worktree and this checkout is the candidate. Either way
    the suite is the base commit's."""
    opts = core.MeasureOptions(device=args.device, time_identical=args.time_identical)
    with contextlib.ExitStack() as stack:
        if args.candidate_tree:
            candidate = Path(args.candidate_tree).resolve()
            if not (candidate / "kernels").is_dir():
                raise BadInput(f"--candidate-tree {candidate}: no kernels/ folder there")
            suite, theirs = core.open_suite(args.suite), candidate / args.suite
            base_arm = Arm("baseline", None, base[:12])
            tested = os.environ.get("TESTED_SHA", "")[:12] or "candidate"
            cand_arm = Arm("candidate", str(candidate), tested)
        else:
            suite, theirs = _suite_at(base, args.suite), Path(args.suite)
            tree = stack.enter_context(core.worktree(base))
            base_arm = Arm("baseline", str(tree), base[:12])
            cand_arm = Arm("candidate", None, "working tree")
        changes = policy_changes(suite, theirs)
        if args.kernels:
            suite = suite.select(args.kernels)
        progress = terminal.ProgressPrinter(prefix="[perf-guard]")
        try:
            comparison = core.compare_arms(suite, base_arm, cand_arm, opts=opts, progress=progress)
        finally:
            progress.close()
        roots = [Path(a.kernels_root or local_kernels_root()) for a in (base_arm, cand_arm)]
        return comparison, changes, _profiles(comparison, *roots)
    raise AssertionError("unreachable")  # pragma: no cover  (the with block returns)


def write_reports(
    out_dir: Path, comparison: Comparison, html: bool, profiles: Sequence[CaseProfile] = ()
) -> None:
    results.save(comparison.candidate, out_dir / "results.json")
    results.save(comparison.baseline, out_dir / "base-results.json")
    results.write_atomic(out_dir / "compare.md", render.comparison_markdown(comparison))
    if html:
        from guard import report

        page = report.html_report(comparison.candidate, comparison, profiles=profiles)
        results.write_atomic(out_dir / "report.html", page)


def run(args: argparse.Namespace, out_dir: Path) -> Outcome:
    """The whole check; every failure becomes an Outcome, never an exception."""
    context = {
        "gpu": os.environ.get("GPU_LABEL", ""),
        "head_sha": os.environ.get("HEAD_SHA", ""),
        "tested_commit": os.environ.get("TESTED_SHA", "") or os.environ.get("HEAD_SHA", ""),
        "pr_number": _pr_number(),
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
        comparison, changes, profiles = measure(args, base)
    except GuardError as exc:
        verdict = (
            CheckVerdict.INFRASTRUCTURE
            if exc.exit_code == ExitCode.INFRA
            else CheckVerdict.BAD_INPUT
        )
        headline = f"NO VERDICT: {text.one_line(exc)}"
        return Outcome(verdict, headline, **context)  # type: ignore[arg-type]
    except Exception as exc:  # a bug in the guard: infrastructure, never the PR's verdict
        print_untrusted("".join(traceback.format_exception(exc)).rstrip())
        message = f"the guard crashed: {type(exc).__name__}: {text.one_line(exc)}"
        return Outcome(CheckVerdict.INFRASTRUCTURE, message, **context)  # type: ignore[arg-type]
    notes = _stored_context(comparison, args.baselines, args.device)
    outcome = comparison.outcome(
        policy_changes=tuple(changes),
        baseline_changes=tuple(baseline_changes),
        profiles=tuple(profiles),
        **context,
    )
    outcome = replace(outcome, notes=(*outcome.notes, *notes))
    try:
        write_reports(out_dir, comparison, args.html, profiles)
    except Exception as exc:  # the verdict stands; say what failed
        print_untrusted("".join(traceback.format_exception(exc)).rstrip())
        text.annotate("warning", "perf-guard report", f"writing a report failed: {exc}")
    return outcome


def publish(outcome: Outcome, out_dir: Path) -> None:
    """Everything GitHub sees, rendered from the one outcome."""
    results.write_atomic(out_dir / OUTCOME_FILE, json.dumps(outcome.to_json(), indent=1) + "\n")
    text.emit_commands(render.annotations(outcome))
    for path in outcome.baseline_changes:
        message = f"{path}: takes effect after merge"
        text.annotate("warning", "This PR changes a baseline", message, path)
    if outcome.policy_changes:
        text.annotate(
            "warning",
            "This PR changes the policy",
            "judged by the base commit's suite; takes effect after merge: "
            + "; ".join(outcome.policy_changes[:10]),
        )
    summary = comment.markdown([outcome]).replace(comment.MARKER + "\n", "")
    compare_md = out_dir / "compare.md"
    if compare_md.exists():
        summary += "\n<details><summary>Every case</summary>\n\n" + compare_md.read_text("utf-8")
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
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    out_dir: Path = args.out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    outcome = run(args, out_dir)
    publish(outcome, out_dir)
    print(f"[perf-guard] {text.one_line(outcome.headline)}", file=sys.stderr)
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
