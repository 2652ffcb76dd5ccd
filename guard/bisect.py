"""Which commit made a step: a flagged step's commit range, bisected with paired runs.

Between two runs of the history (a night apart) there can be many commits. ``bisect``
takes the last commit known good and the first known bad, and the cases that stepped:

1. it checks the step on the range's ends first: ``bad`` against ``good``, paired and
   decided by the guard's own rule (``core.compare_arms``, the PR check's comparison);
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
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from guard import core
from guard.base.errors import BadInput
from guard.base.stats import Verdict
from guard.decide.compare import Comparison
from guard.measure.runner import Arm
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
    opts: core.MeasureOptions | None = None,
    repo: str | Path = ".",
    max_steps: int = 12,
    progress: Callable[[str], None] = lambda _: None,
    compare: Callable[..., Comparison] = core.compare_arms,
) -> Bisection:
    """The first commit after ``good`` whose kernels are slower, for ``suite``'s gated
    cases (the flagged ones: select them first). See the module doc."""
    root = Path(repo)
    commits = commits_between(good, bad, root)
    cases = {c.id for c in suite.cases if c.gate}
    if not cases:
        raise BadInput("bisect: the selected cases hold no gated case to decide on")
    opts = replace(opts or core.MeasureOptions(), surface="none")  # the flagged cases only

    with core.worktree(good, root) as base:  # one checkout of good for every step

        def measure(commit: str) -> Comparison:
            with core.worktree(commit, root) as head:
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
