"""Compare a candidate run with a baseline run and decide.

Per case: the ratio candidate / baseline with a round-resampling bootstrap interval
(``guard.stats``), placed against the case's threshold band. The interval level is
chosen so that the whole check's false-alarm rate stays under the suite's alpha
across the gated cases. Correctness failures fail the check whatever the timing says.
No gated case compared, no verdict: exit 2 and "NO VERDICT", never a pass.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

import numpy as np

from guard import stats
from guard.errors import BadInput, ExitCode, shown
from guard.results import INFRA_STATUSES, OK, UNAVAILABLE, WRONG, CaseResult, RunResult
from guard.stats import Interval, Verdict


class Status(str, enum.Enum):
    """Why a case has (or lacks) a verdict."""

    COMPARED = "compared"
    WRONG = "wrong"  # the candidate's output is wrong
    ERROR = "error"  # crashed, timed out, failed to build
    UNAVAILABLE = "unavailable"  # cannot run on this machine
    NEW = "new"  # no usable baseline for this case
    NOT_COMPARABLE = "not-comparable"  # parameters differ
    TOO_FEW_ROUNDS = "too-few-rounds"


@dataclass(frozen=True)
class CaseComparison:
    case_id: str
    kernel: str
    name: str
    gate: bool
    status: Status
    verdict: Verdict | None = None
    interval: Interval | None = None
    point_ratio: float | None = None  # the ratio alone, where there are too few rounds
    min_effect: float = 0.0
    baseline_median: float | None = None
    candidate_median: float | None = None
    host_ratio: float | None = None
    reason: str = ""
    candidate: CaseResult | None = field(default=None, repr=False, compare=False)
    baseline: CaseResult | None = field(default=None, repr=False, compare=False)

    @property
    def ratio(self) -> float | None:
        """The ratio shown: the interval's, or without an interval the ratio alone."""
        return self.interval.ratio if self.interval is not None else self.point_ratio

    @property
    def fails(self) -> bool:
        """Whether this case alone fails the check."""
        if self.status is Status.WRONG:
            return True
        return self.gate and self.verdict is Verdict.REGRESSION

    @property
    def infra_failure(self) -> bool:
        return self.gate and self.status is Status.ERROR


@dataclass(frozen=True)
class Comparison:
    baseline: RunResult
    candidate: RunResult
    cases: tuple[CaseComparison, ...]
    confidence: float
    alpha: float
    environment_diff: tuple[tuple[str, str, str], ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def exit_code(self) -> ExitCode:
        if any(c.fails for c in self.cases):
            return ExitCode.FAIL
        if any(c.infra_failure for c in self.cases):
            return ExitCode.INFRA
        if self.no_verdict_reason:
            return ExitCode.BAD_INPUT  # neutral: nothing measured that could pass
        return ExitCode.PASS

    @property
    def no_verdict_reason(self) -> str:
        """Why no gated case was compared ("" when one was): then there is no verdict."""
        if any(c.gate and c.status is Status.COMPARED for c in self.cases):
            return ""
        if not self.cases:
            return "the candidate has no cases"
        gated = [c for c in self.cases if c.gate]
        if not gated:
            return f"none of the {len(self.cases)} case(s) is gated"
        counts: dict[str, int] = {}
        for c in gated:
            counts[c.status.value] = counts.get(c.status.value, 0) + 1
        text = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
        first = next((c for c in gated if c.reason), None)
        example = f"; {first.case_id}: {first.reason}" if first else ""
        return f"gated case(s): {text}{example}"

    @property
    def headline(self) -> str:
        wrong = [c for c in self.cases if c.status is Status.WRONG]
        regressed = [c for c in self.cases if c.fails and c.status is Status.COMPARED]
        errors = [c for c in self.cases if c.infra_failure]
        if wrong or regressed:
            parts = []
            if wrong:
                parts.append(f"{len(wrong)} case(s) with wrong results")
            if regressed:
                parts.append(f"{len(regressed)} significant regression(s)")
            return "FAIL: " + ", ".join(parts)
        if errors:
            return f"ERROR: {len(errors)} gated case(s) crashed, timed out or failed to build"
        if self.no_verdict_reason:
            return f"NO VERDICT: no gated case was measured ({self.no_verdict_reason})"
        improved = sum(1 for c in self.cases if c.gate and c.verdict is Verdict.IMPROVEMENT)
        inconclusive = sum(1 for c in self.cases if c.gate and c.verdict is Verdict.INCONCLUSIVE)
        too_few = sum(1 for c in self.cases if c.gate and c.status is Status.TOO_FEW_ROUNDS)
        if too_few and not any(c.gate and c.verdict is not None for c in self.cases):
            return (
                f"NO VERDICT: {too_few} gated case(s) have too few rounds for an interval "
                "(ratios shown without one)"
            )
        text = "PASS: no significant regression"
        extra = []
        if improved:
            extra.append(f"{improved} improved")
        if inconclusive:
            extra.append(f"{inconclusive} inconclusive")
        if too_few:
            extra.append(f"{too_few} with too few rounds to decide")
        return text + (f" ({', '.join(extra)})" if extra else "")

    def inconclusive_ids(self) -> list[str]:
        return [c.case_id for c in self.cases if c.gate and c.verdict is Verdict.INCONCLUSIVE]


def _median(rounds: tuple[tuple[float, ...], ...]) -> float | None:
    values = [s for r in rounds for s in r]
    return float(np.median(values)) if values else None


def check_comparable(baseline: RunResult, candidate: RunResult) -> None:
    """Refuse pairs that cannot be compared at all (another GPU, another suite)."""
    b, c = baseline.environment, candidate.environment
    if b.gpu_slug != c.gpu_slug and "pytest-benchmark" not in (b.gpu_slug, c.gpu_slug):
        raise BadInput(
            f"{baseline.label}: environment.gpu_slug: baseline is from {shown(b.gpu_name)} but "
            f"the candidate ran on {shown(c.gpu_name)}; timings from different GPUs cannot be "
            "compared"
        )
    if baseline.suite_name != candidate.suite_name:
        raise BadInput(
            f"{baseline.label}: suite_name: baseline is from suite {shown(baseline.suite_name)}, "
            f"candidate from {shown(candidate.suite_name)}"
        )


def compare_case(
    base: CaseResult | None,
    cand: CaseResult,
    confidence: float,
    rng: np.random.Generator,
) -> CaseComparison:
    case = cand.case
    common = {
        "case_id": cand.id,
        "kernel": case.kernel,
        "name": case.name,
        "gate": case.gate,
        "min_effect": case.threshold.min_effect,
        "candidate": cand,
        "baseline": base,
    }
    if cand.status == WRONG:
        return CaseComparison(**common, status=Status.WRONG, reason=cand.reason)
    if cand.status in INFRA_STATUSES:
        return CaseComparison(**common, status=Status.ERROR, reason=f"{cand.status}: {cand.reason}")
    if cand.status == UNAVAILABLE:
        return CaseComparison(**common, status=Status.UNAVAILABLE, reason=cand.reason)
    if base is None or base.status != OK:
        why = "no such case in the baseline" if base is None else f"baseline case is {base.status}"
        return CaseComparison(
            **common, status=Status.NEW, reason=why, candidate_median=_median(cand.rounds)
        )
    if base.case.params() != case.params():
        return CaseComparison(
            **common, status=Status.NOT_COMPARABLE, reason="parameters differ from the baseline's"
        )
    medians = {"baseline_median": _median(base.rounds), "candidate_median": _median(cand.rounds)}
    if len(base.rounds) < 2 or len(cand.rounds) < 2:
        ratio = (
            stats.ratio_estimate(base.rounds, cand.rounds) if base.rounds and cand.rounds else None
        )
        one_process = "pytest-benchmark" in (base.method, cand.method)
        return CaseComparison(
            **common,
            **medians,
            point_ratio=ratio,
            status=Status.TOO_FEW_ROUNDS,
            reason=(
                "cannot decide: a pytest-benchmark file holds one process's samples (one "
                "round), so the noise between runs is unknown; the ratio of medians is "
                "shown without an interval"
                if one_process
                else "cannot decide: an interval needs at least 2 rounds in each arm"
            ),
        )
    interval = stats.ratio_interval(base.rounds, cand.rounds, confidence=confidence, rng=rng)
    verdict = stats.classify(interval, case.threshold.min_effect)
    host_ratio = None
    hb, hc = _median(base.host_rounds), _median(cand.host_rounds)
    if hb and hc:
        host_ratio = hc / hb
    return CaseComparison(
        **common,
        **medians,
        status=Status.COMPARED,
        verdict=verdict,
        interval=interval,
        host_ratio=host_ratio,
        reason=(
            "the interval is wider than a factor of 1000 either way (too few or too noisy "
            "rounds for this confidence); measure more rounds"
            if interval.capped
            else ""
        ),
    )


def compare_runs(
    baseline: RunResult,
    candidate: RunResult,
    *,
    alpha: float = 0.01,
    seed: int = 0,
) -> Comparison:
    """Decide every candidate case against the baseline."""
    check_comparable(baseline, candidate)
    rng = np.random.default_rng(seed)
    gated = [
        c
        for c in candidate.cases
        if c.case.gate
        and c.status == OK
        and (b := baseline.case(c.id)) is not None
        and b.status == OK
    ]
    confidence = stats.family_confidence(alpha, len(gated))
    cases = tuple(compare_case(baseline.case(c.id), c, confidence, rng) for c in candidate.cases)
    notes = []
    if baseline.suite_hash and candidate.suite_hash and baseline.suite_hash != candidate.suite_hash:
        notes.append(
            f"the suite changed since the baseline (hash {baseline.suite_hash} -> "
            f"{candidate.suite_hash}); cases are matched by name and parameters"
        )
    missing = [b.id for b in baseline.cases if candidate.case(b.id) is None]
    if missing:
        notes.append(f"{len(missing)} baseline case(s) were not measured: {', '.join(missing[:5])}")
    throttled = sum(1 for r in candidate.rounds if r.throttled)
    if throttled:
        notes.append(f"{throttled} candidate round(s) ran while the GPU was throttled")
    return Comparison(
        baseline=baseline,
        candidate=candidate,
        cases=cases,
        confidence=confidence,
        alpha=alpha,
        environment_diff=tuple(baseline.environment.differences(candidate.environment)),
        notes=tuple(notes),
    )


def replace_cases(comparison: Comparison, confirmed: Comparison) -> Comparison:
    """Take ``confirmed``'s verdict for every case it holds (a paired rerun on this
    machine outranks a stored baseline recorded elsewhere)."""
    by_id = {c.case_id: c for c in confirmed.cases if c.status is Status.COMPARED}
    cases = tuple(
        by_id.get(c.case_id, c) if c.status is Status.COMPARED else c for c in comparison.cases
    )
    note = f"{len(by_id)} case(s) confirmed by a paired rerun against {confirmed.baseline.label}"
    return Comparison(
        baseline=comparison.baseline,
        candidate=comparison.candidate,
        cases=cases,
        confidence=comparison.confidence,
        alpha=comparison.alpha,
        environment_diff=comparison.environment_diff,
        notes=(*comparison.notes, note),
    )
