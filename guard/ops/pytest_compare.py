"""pytest-benchmark suites (docs/PYTEST.md): two saved runs compared, or a suite
measured paired against a git ref, round by round."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from guard.base.errors import BadInput, InfraError, shown
from guard.decide.compare import (
    Comparison,
    compare_runs,
)
from guard.measure import env as guard_env
from guard.measure.runner import ProgressFn, _noop
from guard.ops.measure import (
    SEQUENTIAL_STEP,
    MeasureOptions,
    pytest_round_ceiling,
    unwinds_on_sigterm,
)
from guard.ops.trees import worktree
from guard.store import results
from guard.store.pytest_benchmark import PYTEST_THRESHOLD, names_case
from guard.store.results import RunResult
from guard.store.suite import (
    TimingPlan,
)

if TYPE_CHECKING:
    pass


def select_cases(
    baseline: RunResult, candidate: RunResult, cases: Sequence[str] = ()
) -> tuple[RunResult, RunResult]:
    """Both runs with only the cases ``cases`` name (``pytest_benchmark.names_case``: a workload
    name, a case id, a pytest node id; none: every case). A word that names no case of
    either run is ``BadInput``, naming it and both runs."""
    if not cases:
        return baseline, candidate
    every = [c.case for run in (baseline, candidate) for c in run.cases]
    unknown = [w for w in cases if not any(names_case(w, case) for case in every)]
    if unknown:
        raise BadInput(
            f"--cases: no case named {', '.join(shown(w) for w in unknown)} in "
            f"{baseline.label or 'the baseline'} or {candidate.label or 'the candidate'}"
        )

    def chosen(run: RunResult) -> RunResult:
        kept = tuple(c for c in run.cases if any(names_case(w, c.case) for w in cases))
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

    _, chosen = parse_args((), threshold or PYTEST_THRESHOLD)
    base, cand = select_cases(*pytest_runs.load_sides(baseline, candidate, chosen), cases)
    return compare_runs(base, cand, alpha=alpha, plan=plan)


@unwinds_on_sigterm
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
