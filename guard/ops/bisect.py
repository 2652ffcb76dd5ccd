"""Which commit made a step: a flagged step's commit range, bisected with paired runs.

Between two runs of the history (a night apart) there can be many commits. ``bisect``
takes the last commit known good and the first known bad, and the cases that stepped:

1. it checks the step on the range's ends first: ``bad`` against ``good``, paired and
   decided by the guard's own rule (``compare_arms``, the PR check's comparison);
   a range whose ends do not differ is refused (nothing to look for);
2. then halves the first-parent commits between them: each midpoint against ``good``,
   until one commit is left: the first whose kernels are slower.

A midpoint is bad when a case regresses, or stays inconclusive with its estimate past
the middle of the step (on the log scale): a partial slowdown is where the step began.
Each step is a full paired comparison, so a range of N commits costs about log2(N) + 1
of them; ``max_steps`` bounds that (what is left is reported as the range still open).
Pure orchestration: git and the guard's measuring, no printing (``progress`` hears of
each step).
"""

from __future__ import annotations

import math
import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from guard.base.errors import BadInput
from guard.base.stats import Verdict
from guard.decide.compare import Comparison
from guard.measure.runner import Arm
from guard.ops.compare import compare_arms
from guard.ops.measure import MeasureOptions
from guard.ops.trees import worktree
from guard.store.suite import Suite


@dataclass(frozen=True)
class Probe:
    """One commit measured against ``good``: the cases' ratios and whether it is bad."""

    commit: str
    bad: bool
    ratios: tuple[tuple[str, float | None, str], ...]  # (case, ratio, verdict)


@dataclass(frozen=True)
class Bisection:
    """The outcome: ``first_bad`` (None while ``open_range`` still holds several
    commits: ``max_steps`` ran out), and every commit measured, in order."""

    good: str
    bad: str
    first_bad: str | None
    open_range: tuple[str, ...]
    probes: tuple[Probe, ...]
    step: float  # the ends' largest ratio (bad against good) among the cases


def _git(repo: Path, *args: str) -> str:
    proc = subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=120
    )
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["failed"])[-1]
        raise BadInput(f"git {' '.join(args)}: {last}")
    return proc.stdout.strip()


def commits_between(good: str, bad: str, repo: str | Path = ".") -> list[str]:
    """The first-parent commits after ``good`` up to ``bad``, oldest first (bad last).
    BadInput when ``good`` is not an ancestor of ``bad`` or the range is empty."""
    root = Path(repo)
    good_sha = _git(root, "rev-parse", "--verify", f"{good}^{{commit}}")
    bad_sha = _git(root, "rev-parse", "--verify", f"{bad}^{{commit}}")
    ancestor = subprocess.run(
        ["git", "-C", str(root), "merge-base", "--is-ancestor", good_sha, bad_sha], timeout=60
    )
    if ancestor.returncode != 0:
        raise BadInput(f"--good {good} is not an ancestor of --bad {bad}")
    listed = _git(root, "rev-list", "--first-parent", "--reverse", f"{good_sha}..{bad_sha}")
    commits = listed.split()
    if not commits:
        raise BadInput(f"no commit between --good {good} and --bad {bad}")
    return commits


def first_parent(commit: str, repo: str | Path = ".") -> str:
    """The first parent of ``commit`` (full id)."""
    return _git(Path(repo), "rev-parse", f"{commit}^").strip()


def _ratios(comparison: Comparison, cases: set[str]) -> list[tuple[str, float | None, str]]:
    return [
        (c.case_id, c.ratio, c.verdict.value if c.verdict is not None else c.status.value)
        for c in comparison.cases
        if c.case_id in cases
    ]


def bisect(
    suite: Suite,
    good: str,
    bad: str,
    *,
    opts: MeasureOptions | None = None,
    repo: str | Path = ".",
    max_steps: int = 12,
    progress: Callable[[str], None] = lambda _: None,
    compare: Callable[..., Comparison] = compare_arms,
) -> Bisection:
    """The first commit after ``good`` whose kernels are slower, for ``suite``'s gated
    cases (the flagged ones: select them first). See the module doc."""
    root = Path(repo)
    commits = commits_between(good, bad, root)
    cases = {c.id for c in suite.cases if c.gate}
    if not cases:
        raise BadInput("bisect: the selected cases hold no gated case to decide on")
    opts = replace(opts or MeasureOptions(), surface="none")  # the flagged cases only

    with worktree(good, root) as base:  # one checkout of good for every step

        def measure(commit: str) -> Comparison:
            with worktree(commit, root) as head:
                return compare(
                    suite, Arm("baseline", str(base), good), Arm("candidate", str(head), commit),
                    opts=opts,
                )  # fmt: skip

        ends = measure(commits[-1])
        regressed = [
            c for c in ends.cases if c.case_id in cases and c.verdict is Verdict.REGRESSION
        ]
        if not regressed:
            raise BadInput(
                f"bisect: {bad} is not slower than {good} on the selected cases "
                f"({', '.join(f'{c}: {v}' for c, _, v in _ratios(ends, cases))}); nothing to bisect"
            )
        steps = {c.case_id: c.ratio for c in regressed if c.ratio is not None}
        step = max(steps.values()) if steps else 1.0
        probes = [Probe(commits[-1], True, tuple(_ratios(ends, cases)))]
        progress(f"{commits[-1][:10]} (bad end): {_summary(probes[-1])}")

        def is_bad(comparison: Comparison) -> bool:
            for c in comparison.cases:
                if c.case_id not in steps:
                    continue
                if c.verdict is Verdict.REGRESSION:
                    return True
                half = math.sqrt(steps[c.case_id])  # the middle of the step, log scale
                if c.verdict is Verdict.INCONCLUSIVE and c.ratio is not None and c.ratio >= half:
                    return True
            return False

        lo, hi = -1, len(commits) - 1  # commits[lo] good (-1: good itself), commits[hi] bad
        while hi - lo > 1 and len(probes) <= max_steps:
            mid = (lo + hi) // 2
            comparison = measure(commits[mid])
            probe = Probe(commits[mid], is_bad(comparison), tuple(_ratios(comparison, cases)))
            probes.append(probe)
            progress(f"{commits[mid][:10]}: {'bad' if probe.bad else 'good'}: {_summary(probe)}")
            if probe.bad:
                hi = mid
            else:
                lo = mid
        done = hi - lo == 1
        return Bisection(
            good=_git(root, "rev-parse", good),
            bad=commits[-1],
            first_bad=commits[hi] if done else None,
            open_range=tuple(commits[lo + 1 : hi + 1]),
            probes=tuple(probes),
            step=step,
        )


def _summary(probe: Probe) -> str:
    return ", ".join(
        f"{case} {'-' if ratio is None else f'{ratio:.3f}x'} {verdict}"
        for case, ratio, verdict in probe.ratios
    )


def describe(result: Bisection, repo: str | Path = ".") -> str:
    """One line: the commit that made the step and its subject, or the range left."""
    if result.first_bad is None:
        span = f"{result.open_range[0][:10]}..{result.open_range[-1][:10]}"
        return (
            f"not finished: the step lies in {len(result.open_range)} commits {span} "
            "(raise --max-steps, or bisect that range)"
        )
    try:
        subject = _git(Path(repo), "log", "-1", "--format=%s", result.first_bad)
    except BadInput:
        subject = ""
    return (
        f"first slower commit: {result.first_bad} ({result.step:.3f}x at the range's end) "
        f"{subject}".rstrip()
    )


# ------------------------------------------------------------------ the night's bisections

RECORDS_SCHEMA_VERSION = 1
_SHA = re.compile(r"[0-9a-f]{7,64}")  # a commit id as runs and bisections store it


@dataclass(frozen=True)
class PendingStep:
    """A step of the history not yet attributed to a commit: the cases that stepped
    between the runs at ``good`` and ``bad``; ``resume``: the (good, bad) of the range
    a bisection left open, to go on from (else the step's own ends)."""

    good: str
    bad: str
    case_ids: tuple[str, ...]
    resume: tuple[str, str] | None = None

    @property
    def ends(self) -> tuple[str, str]:
        return self.resume or (self.good, self.bad)


@dataclass(frozen=True)
class StepRecord:
    """What one night's bisection found for a step (``guard publish --bisections``)."""

    good: str
    bad: str
    case_ids: tuple[str, ...]
    first_bad: str  # "" while the range is still open
    open_range: tuple[str, ...]


def pending_steps(trends: list[Any], parent: Callable[[str], str]) -> list[PendingStep]:
    """Every step of ``trends`` (``history.Trend``, one GPU) without a commit that made
    it, newest first, cases of the same range together. An open bisection resumes from
    the first parent of its first commit left (``parent``) to its last."""
    ranges: dict[tuple[str, str], list[str]] = {}
    resume: dict[tuple[str, str], tuple[str, str]] = {}
    newest: dict[tuple[str, str], str] = {}
    for t in trends:
        for i, step in enumerate(t.steps):
            good, bad = t.step_range(step)
            found = t.made_by[i] if i < len(t.made_by) else None
            if not (_SHA.fullmatch(good) and _SHA.fullmatch(bad)) or good == bad:
                continue  # a run without a commit id (or not a git one): nothing to bisect
            if found is not None and found.first_bad:
                continue
            ranges.setdefault((good, bad), []).append(t.case_id)
            newest[(good, bad)] = max(newest.get((good, bad), ""), t.points[step.index].created)
            left = found.open_range if found is not None else ()
            if left and _SHA.fullmatch(left[0]) and _SHA.fullmatch(left[-1]):
                resume[(good, bad)] = (parent(left[0]), left[-1])
    order = sorted(ranges, key=lambda r: newest[r], reverse=True)
    return [PendingStep(g, b, tuple(sorted(ranges[(g, b)])), resume.get((g, b))) for g, b in order]


def bisect_pending(
    pending: list[PendingStep],
    run: Callable[[PendingStep, int], Bisection],
    *,
    budget_steps: int,
    progress: Callable[[str], None] = lambda _: None,
) -> list[StepRecord]:
    """Bisect ``pending`` in order within ``budget_steps`` paired runs in all (a night's
    GPU time): ``run(step, max_steps)`` bisects one range. A range that a bisection
    refuses (its ends no longer differ) is skipped; one cut short by the budget is
    recorded open, for the next night to resume."""
    records: list[StepRecord] = []
    left = budget_steps
    for step in pending:
        if left < 2:  # the range's ends and one midpoint at least
            progress(f"budget spent: {len(pending) - len(records)} step(s) left for later")
            break
        good, bad = step.ends
        try:
            result = run(step, left - 1)
        except BadInput as exc:
            progress(f"{good[:10]}..{bad[:10]}: skipped ({exc})")
            left -= 1
            continue
        left -= len(result.probes)  # the ends and each midpoint: one paired run each
        records.append(
            StepRecord(
                step.good, step.bad, step.case_ids, result.first_bad or "", result.open_range
            )
        )
        progress(f"{step.good[:10]}..{step.bad[:10]}: {describe(result)}")
    return records


def records_json(records: list[StepRecord]) -> dict[str, Any]:
    return {
        "schema_version": RECORDS_SCHEMA_VERSION,
        "bisections": [
            {
                "good": r.good,
                "bad": r.bad,
                "case_ids": list(r.case_ids),
                "first_bad": r.first_bad,
                "open_range": list(r.open_range),
            }
            for r in records
        ],
    }


MAX_RECORDS = 1000


def read_records(data: Any, source: str) -> list[StepRecord]:
    """A bisections file (``records_json``); ``BadInput`` names the field at fault."""
    if not isinstance(data, dict) or data.get("schema_version") != RECORDS_SCHEMA_VERSION:
        raise BadInput(f"{source}: not a bisections file of schema {RECORDS_SCHEMA_VERSION}")
    items = data.get("bisections")
    if not isinstance(items, list) or len(items) > MAX_RECORDS:
        raise BadInput(f"{source}: bisections: a list of at most {MAX_RECORDS} entries")
    out = []
    for i, item in enumerate(items):
        where = f"{source}: bisections[{i}]"
        if not isinstance(item, dict) or set(item) != {
            "good", "bad", "case_ids", "first_bad", "open_range"
        }:  # fmt: skip
            raise BadInput(f"{where}: needs exactly good, bad, case_ids, first_bad, open_range")
        shas = [item["good"], item["bad"], *item["open_range"]] + (
            [item["first_bad"]] if item["first_bad"] else []
        )
        if not all(isinstance(s, str) and _SHA.fullmatch(s) for s in shas):
            raise BadInput(f"{where}: commits must be hexadecimal commit ids")
        cases = item["case_ids"]
        if not isinstance(cases, list) or not cases or not all(isinstance(c, str) for c in cases):
            raise BadInput(f"{where}: case_ids must be a non-empty list of case ids")
        out.append(
            StepRecord(
                item["good"], item["bad"], tuple(cases), item["first_bad"],
                tuple(item["open_range"]),
            )
        )  # fmt: skip
    return out
