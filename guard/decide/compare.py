"""Compare a candidate run with a baseline run and decide.

Per case: the ratio candidate / baseline with a round-resampling bootstrap interval
(``guard.base.stats``), decided by ``stats.Rule``. The interval level is chosen so that the
whole check's false-alarm rate stays under the suite's alpha across the gated cases.

Two kinds of comparison, two rules (``case_rule``):
- *paired*: both trees measured on this machine in interleaved rounds (``--against``,
  the PR check): regression above ``1 + timing.margin`` (the calibrated noise floor),
  unchanged when a slowdown of the case's threshold is ruled out;
- *stored*: against a baseline recorded on another machine or day: the machine's drift
  (``timing.drift``) is added to both, so a machine that moved never fails an unchanged
  tree; such a comparison resolves changes to about the drift, not finer.

A case whose kernel is identical in both (the same ``guard.measure.fingerprint`` of what ran on
the GPU) is "unchanged (identical kernel)" and needs no timing. A not-gated case (the
SDPA backends) is a control: its ratio is shown, it never gets a verdict's colour.
Correctness failures fail the check whatever the timing says. No gated case decided,
no verdict: exit 2 and "NO VERDICT", never a pass. Nor is a gated case left
inconclusive whose estimate itself lies beyond its threshold (``unresolved``): its
interval was too wide to call the slowdown, not evidence against it; "NO VERDICT" too,
with the rounds that would decide it.
"""

from __future__ import annotations

import enum
import statistics
from dataclasses import dataclass, field, replace

import numpy as np

from guard.base import limits, stats
from guard.base.errors import BadInput, ExitCode, shown
from guard.base.stats import Basis, Interval, Rule, Verdict
from guard.base.text import fmt_ratio
from guard.decide.outcome import CaseOutcome, CaseVerdict, CheckVerdict, Outcome
from guard.store.results import (
    INFRA_STATUSES,
    OK,
    UNAVAILABLE,
    WRONG,
    CaseResult,
    RoundInfo,
    RoundPhases,
    RunResult,
)
from guard.store.suite import Case, TimingPlan

PHASE_WORDS = {
    "start_s": "interpreter",
    "imports_s": "imports",
    "gpu_state_s": "nvidia-smi",
    "load_s": "kernel loads",
    "warm_s": "warm-up",
    "exit_s": "exit",
    "check_s": "checks",
    "prepare_s": "preparation",
    "sample_s": "sampling",
    "verify_s": "verification",
}


PHASES_NOTE = "worker time per round"  # how ``phases_summary`` begins


def phases_summary(rounds: tuple[RoundInfo, ...]) -> str:
    """One line: the median timing round's start-up (paid once per worker process, so
    not divided by sharding the cases over GPUs) and its work on the cases; "" when no
    timing round recorded its phases."""
    timed = [r.phases for r in rounds if r.index > 0 and r.phases is not None]
    if not timed:
        return ""
    med = {key: statistics.median(getattr(p, key) for p in timed) for key in RoundPhases.SECONDS}
    firsts: dict[str, list[float]] = {}
    for p in timed:
        for name, s in p.first_calls:
            firsts.setdefault(name, []).append(s)

    def sec(x: float) -> str:
        return f"{x:.1f}" if x >= 0.95 else f"{x:.2f}"

    def parts(keys: tuple[str, ...]) -> str:
        return ", ".join(f"{PHASE_WORDS[k]} {sec(med[k])}" for k in keys if med[k] >= 0.005)

    slowest = sorted(((statistics.median(v), k) for k, v in firsts.items()), reverse=True)
    first = ", ".join(f"{k} {sec(s)}" for s, k in slowest[:3] if s >= 0.005)
    ahead = sum(p.prestarted > 0 for p in timed)
    return (
        f"{PHASES_NOTE} (median of {len(timed)}): {sec(med['total_s'])} s; "
        f"start-up {sec(sum(med[k] for k in RoundPhases.STARTUP))} s "
        f"({parts(RoundPhases.STARTUP)}), paid once per worker whatever its share of the "
        f"cases; cases {sec(sum(med[k] for k in RoundPhases.CASES))} s "
        f"({parts(RoundPhases.CASES)})"
        + (f"; first calls: {first}" if first else "")
        + (f"; {ahead} of {len(timed)} rounds' workers started ahead (imported)" if ahead else "")
    )


class Status(str, enum.Enum):
    """Why a case has (or lacks) a verdict."""

    COMPARED = "compared"
    IDENTICAL = "identical"  # the same kernel ran on the GPU in both: not timed
    WRONG = "wrong"  # the candidate's output is wrong
    ERROR = "error"  # crashed, timed out, failed to build
    UNAVAILABLE = "unavailable"  # cannot run on this machine
    NEW = "new"  # no usable baseline for this case
    NOT_COMPARABLE = "not-comparable"  # parameters, or what a round stands as, differ
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
    # Compiler resources that differ from the baseline's (guard.measure.resources), reported
    # beside the timing verdict as notes, never as a failure by themselves.
    resource_changes: tuple[str, ...] = ()
    rule: Rule | None = None  # what decided the interval (``case_rule``)
    candidate: CaseResult | None = field(default=None, repr=False, compare=False)
    baseline: CaseResult | None = field(default=None, repr=False, compare=False)

    @property
    def ratio(self) -> float | None:
        """The ratio shown: the interval's, or without an interval the ratio alone."""
        return self.interval.ratio if self.interval is not None else self.point_ratio

    @property
    def basis(self) -> Basis | None:
        """The number the verdict rests on and its limit (``stats.judge``)."""
        if self.interval is None or self.rule is None or self.status is not Status.COMPARED:
            return None
        return stats.judge(self.interval, self.rule)[1]

    @property
    def unresolved(self) -> bool:
        """A gated case left inconclusive although its estimate lies beyond its
        threshold (``1 + rule.min_effect``): not a pass (``Comparison.verdict``)."""
        return (
            self.gate
            and self.status is Status.COMPARED
            and self.verdict is Verdict.INCONCLUSIVE
            and self.interval is not None
            and self.rule is not None
            and self.interval.ratio > 1.0 + self.rule.min_effect
        )

    @property
    def unresolved_note(self) -> str:
        """Why an ``unresolved`` case decides nothing, and about how many rounds per arm
        would decide it ("" for any other case)."""
        iv, rule = self.interval, self.rule
        if not self.unresolved or iv is None or rule is None:
            return ""
        arms = [len(r.rounds) for r in (self.baseline, self.candidate) if r is not None]
        rounds = min(arms) if len(arms) == 2 else 2  # 2: the fewest an interval has
        needed = stats.rounds_to_decide(iv, rule, rounds, limits.MAX_ROUNDS_PER_CASE)
        now = f" ({rounds} now)" if len(arms) == 2 else ""
        more = (
            f"about {needed} rounds per arm would decide it{now}"
            if needed is not None
            else f"even {limits.MAX_ROUNDS_PER_CASE} rounds per arm would not decide it"
            " at this noise"
        )
        return (
            f"the estimate {fmt_ratio(iv.ratio)} lies beyond {1.0 + rule.min_effect:.4g} but "
            f"the interval is too wide to call it a regression; {more}"
        )

    @property
    def fails(self) -> bool:
        """Whether this case alone fails the check."""
        if self.status is Status.WRONG:
            return True
        return self.gate and self.verdict is Verdict.REGRESSION

    @property
    def infra_failure(self) -> bool:
        return self.gate and self.status is Status.ERROR

    @property
    def case_verdict(self) -> CaseVerdict:
        """The one word for this case's end (a not-gated timed case is a control)."""
        if self.status is Status.COMPARED:
            if not self.gate:
                return CaseVerdict.CONTROL
            # stats.Verdict's words are CaseVerdict's (stats imports nothing of guard)
            return CaseVerdict(self.verdict.value) if self.verdict else CaseVerdict.INCONCLUSIVE
        return CaseVerdict(self.status.value)

    def outcome(self) -> CaseOutcome:
        iv = self.interval
        basis = self.basis if self.gate else None  # a control's ratio is context only
        return CaseOutcome(
            case_id=self.case_id,
            gate=self.gate,
            verdict=self.case_verdict,
            fails=self.fails,
            ratio=self.ratio,
            low=iv.low if iv else None,
            high=iv.high if iv else None,
            baseline_s=self.baseline_median,
            candidate_s=self.candidate_median,
            reason=self.reason,
            notes=self.resource_changes,
            bound=basis.value if basis else None,
            limit=basis.limit if basis else None,
            bound_level=basis.level if basis else None,
        )


@dataclass(frozen=True)
class Comparison:
    baseline: RunResult
    candidate: RunResult
    cases: tuple[CaseComparison, ...]
    confidence: float
    alpha: float
    environment_diff: tuple[tuple[str, str, str], ...] = ()
    notes: tuple[str, ...] = ()
    # The suite's timing plan it was decided under: a further comparison of the same
    # candidate (the PR check's stored-baseline context) decides under it too.
    plan: TimingPlan = field(default_factory=TimingPlan)

    @property
    def verdict(self) -> CheckVerdict:
        """The whole check's verdict (and so its exit code): ``decision`` decides it."""
        return self.decision[0]

    @property
    def decision(self) -> tuple[CheckVerdict, str]:
        """The verdict and why, decided here only; the headline and the exit code follow
        from it (``CheckVerdict.headline``, ``CheckVerdict.exit_code``)."""
        wrong = [c for c in self.cases if c.status is Status.WRONG]
        regressed = [c for c in self.cases if c.fails and c.status is Status.COMPARED]
        errors = [c for c in self.cases if c.infra_failure]
        if wrong or regressed:
            parts = []
            if wrong:
                parts.append(f"{len(wrong)} case(s) with wrong results")
            if regressed:
                parts.append(f"{len(regressed)} significant regression(s)")
            verdict = CheckVerdict.WRONG_RESULTS if wrong else CheckVerdict.REGRESSION
            return verdict, ", ".join(parts)
        if errors:
            why = f"{len(errors)} gated case(s) crashed, timed out or failed to build"
            return CheckVerdict.INFRASTRUCTURE, why
        if self.no_verdict_reason:
            # Neutral: nothing measured that could pass.
            why = f"no gated case was measured ({self.no_verdict_reason})"
            return CheckVerdict.NO_VERDICT, why
        if self.unresolved:
            # Its interval could not call it, yet the best estimate is a slowdown beyond
            # the threshold: passing would wave through a kernel measured 3x slower on
            # too few rounds. Not a failure either (nothing significant): exit 2.
            worst, n = self.unresolved[0], len(self.unresolved)
            more = f" (and {n - 1} more, in the table)" if n > 1 else ""
            why = (
                f"{n} gated case(s) inconclusive with an estimate beyond the threshold; "
                f"{worst.case_id}{more}: {worst.unresolved_note}"
            )
            return CheckVerdict.NO_VERDICT, why
        improved = sum(1 for c in self.cases if c.gate and c.verdict is Verdict.IMPROVEMENT)
        inconclusive = sum(1 for c in self.cases if c.gate and c.verdict is Verdict.INCONCLUSIVE)
        too_few = sum(1 for c in self.cases if c.gate and c.status is Status.TOO_FEW_ROUNDS)
        extra = []
        if improved:
            extra.append(f"{improved} improved")
        if inconclusive:
            extra.append(f"{inconclusive} inconclusive")
        if too_few:
            extra.append(f"{too_few} with too few rounds to decide")
        why = "no significant regression" + (f" ({', '.join(extra)})" if extra else "")
        return CheckVerdict.PASS, why

    @property
    def exit_code(self) -> ExitCode:
        return self.verdict.exit_code

    def outcome(self, **context: object) -> Outcome:
        """The typed outcome every renderer and the CI read (``context``: the
        ``Outcome`` fields this comparison cannot know, e.g. the commits, the PR)."""
        return Outcome(
            verdict=self.verdict,
            headline=self.headline,
            cases=tuple(c.outcome() for c in self.cases),
            notes=self.notes,
            **context,  # type: ignore[arg-type]
        )

    @property
    def no_verdict_reason(self) -> str:
        """Why no gated case was compared ("" when one was): then there is no verdict."""
        if any(c.gate and c.status in (Status.COMPARED, Status.IDENTICAL) for c in self.cases):
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
        verdict, why = self.decision
        return verdict.headline(why)

    @property
    def unresolved(self) -> tuple[CaseComparison, ...]:
        """Gated cases inconclusive with an estimate beyond their threshold, the
        slowest first."""
        cases = [c for c in self.cases if c.unresolved]
        return tuple(sorted(cases, key=lambda c: -(c.ratio or 0.0)))

    def inconclusive_ids(self) -> list[str]:
        return [c.case_id for c in self.cases if c.gate and c.verdict is Verdict.INCONCLUSIVE]

    @property
    def identical_ids(self) -> list[str]:
        return [c.case_id for c in self.cases if c.status is Status.IDENTICAL]


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


def case_rule(case: Case, plan: TimingPlan, paired: bool) -> Rule:
    """The rule for ``case``: the calibrated noise floor in a paired run; against a
    stored baseline, the machine's drift added to both the floor and the effect."""
    d, statistic = case.threshold.min_effect, case.threshold.statistic
    if paired:
        return Rule(min_effect=d, margin=plan.margin, statistic=statistic)
    return Rule(min_effect=d + plan.drift, margin=plan.drift, statistic=statistic)


def identical(base: CaseResult, cand: CaseResult) -> bool:
    """Both ran the same device code (fingerprints taken from the GPU, not sources), or
    both trees hold one git tree of ``kernels/`` (``tree:``: all a tree contributes, so
    every case is the same code; ``guard.ops.compare.identical_trees``)."""
    return cand.fingerprint.startswith(("gpu:", "tree:")) and cand.fingerprint == base.fingerprint


def compare_case(
    base: CaseResult | None,
    cand: CaseResult,
    confidence: float,
    rng: np.random.Generator,
    rule: Rule | None = None,
    use_fingerprints: bool = True,
) -> CaseComparison:
    case = cand.case
    statistic = case.threshold.statistic
    rule = rule or case_rule(case, TimingPlan(), paired=False)
    # What every comparison of this case carries; each outcome below is this with its
    # own fields replaced (dataclasses.replace, so every field is checked by name).
    common = CaseComparison(
        case_id=cand.id,
        kernel=case.kernel,
        name=case.name,
        gate=case.gate,
        status=Status.COMPARED,
        min_effect=case.threshold.min_effect,
        candidate=cand,
        baseline=base,
    )
    if cand.status == WRONG:
        return replace(common, status=Status.WRONG, reason=cand.reason)
    if cand.status in INFRA_STATUSES:
        return replace(common, status=Status.ERROR, reason=f"{cand.status}: {cand.reason}")
    if cand.status == UNAVAILABLE:
        return replace(common, status=Status.UNAVAILABLE, reason=cand.reason)
    if base is None or base.status != OK:
        why = (
            "no such case in the baseline"
            if base is None
            else f"only the baseline failed: it was {base.status}"
            + (f" ({base.reason})" if base.reason else "")
        )
        return replace(common, status=Status.NEW, reason=why, candidate_median=cand.median)
    if base.case.params() != case.params():
        return replace(
            common, status=Status.NOT_COMPARABLE, reason="parameters differ from the baseline's"
        )
    if base.case.threshold.statistic != statistic:
        return replace(
            common,
            status=Status.NOT_COMPARABLE,
            reason=f"the baseline's rounds stand as their {base.case.threshold.statistic}, "
            f"the candidate's as their {statistic} (thresholds {base.case.threshold} and "
            f"{case.threshold}): compare both under one threshold",
        )
    common = replace(
        common,
        baseline_median=base.median,  # the same statistic as the candidate's (checked above)
        candidate_median=cand.median,
    )
    if use_fingerprints and identical(base, cand):
        return replace(
            common,
            status=Status.IDENTICAL,
            verdict=Verdict.UNCHANGED,
            reason="identical kernel: the same device code and launches in both "
            f"({cand.fingerprint[:16]}); not timed",
        )
    if len(base.rounds) < 2 or len(cand.rounds) < 2:
        ratio = (
            stats.ratio_estimate(base.rounds, cand.rounds, statistic)
            if base.rounds and cand.rounds
            else None
        )
        one_process = "pytest-benchmark" in (base.method, cand.method)
        return replace(
            common,
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
    strata = (base.round_gpus, cand.round_gpus) if base.round_gpus and cand.round_gpus else None
    verdict, interval = stats.decide(
        base.rounds, cand.rounds, rule, confidence=confidence, rng=rng, strata=strata
    )
    host_ratio = None
    hb, hc = stats.case_time(base.host_rounds), stats.case_time(cand.host_rounds)
    if hb and hc:
        host_ratio = hc / hb
    compared = replace(
        common,
        status=Status.COMPARED,
        verdict=verdict,
        interval=interval,
        host_ratio=host_ratio,
        rule=rule,
    )
    reasons = [compared.unresolved_note] if compared.unresolved else []
    if interval.capped:
        reasons.insert(
            0,
            "the interval is wider than a factor of 1000 either way (too few or too noisy "
            "rounds for this confidence); measure more rounds",
        )
    return replace(compared, reason="; ".join(reasons))


def compare_runs(
    baseline: RunResult,
    candidate: RunResult,
    *,
    alpha: float | None = None,
    seed: int = 0,
    plan: TimingPlan | None = None,
    paired: bool = False,
    use_fingerprints: bool = True,
    family: int = 0,
) -> Comparison:
    """Decide every candidate case against the baseline (``paired``: both measured
    here, interleaved; otherwise a stored baseline, with ``plan.drift`` allowed).
    ``plan``: the suite's timing plan (its margin, drift and, without ``alpha``, its
    alpha); every caller with a suite passes it. ``family``: at least this many
    decisions share ``alpha`` (a shard of a sharded check sizes its intervals for the
    whole suite's gated cases, not its own share; ``guard.decide.merge`` decides the
    union at its exact size)."""
    check_comparable(baseline, candidate)
    plan = plan or TimingPlan()
    alpha = plan.alpha if alpha is None else alpha
    rng = np.random.default_rng(seed)
    gated = [
        c
        for c in candidate.cases
        if c.case.gate
        and c.status == OK
        and (b := baseline.case(c.id)) is not None
        and b.status == OK
        and not (use_fingerprints and identical(b, c))
    ]
    confidence = stats.family_confidence(alpha, max(len(gated), family))
    cases = tuple(
        compare_case(
            baseline.case(c.id),
            c,
            confidence,
            rng,
            case_rule(c.case, plan, paired),
            use_fingerprints,
        )
        for c in candidate.cases
    )
    notes = []
    if not paired:
        notes.append(
            f"against a stored baseline: a machine's drift of up to {plan.drift:.1%} is "
            f"allowed for, so only changes beyond it are decided (a paired run, "
            "`guard compare --against REF`, resolves to the noise floor)"
        )
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
    if phases := phases_summary(candidate.rounds):  # what bounds sharding over GPUs
        notes.append(phases)
    gpus = sorted({r.gpu for r in candidate.rounds if r.gpu and r.index > 0})
    if len(gpus) > 1:
        notes.append(
            f"timing rounds dealt over {len(gpus)} GPUs ({', '.join(gpus)}), both arms of a "
            "round on one; each GPU's offset is taken out of every interval"
        )
    return Comparison(
        baseline=baseline,
        candidate=candidate,
        cases=cases,
        confidence=confidence,
        alpha=alpha,
        environment_diff=tuple(baseline.environment.differences(candidate.environment)),
        notes=tuple(notes),
        plan=plan,
    )


def replace_cases(comparison: Comparison, confirmed: Comparison) -> Comparison:
    """Take ``confirmed``'s verdict for every case it holds (a paired rerun on this
    machine outranks a stored baseline recorded elsewhere)."""
    by_id = {
        c.case_id: c for c in confirmed.cases if c.status in (Status.COMPARED, Status.IDENTICAL)
    }
    cases = tuple(
        by_id.get(c.case_id, c) if c.status is Status.COMPARED else c for c in comparison.cases
    )
    note = f"{len(by_id)} case(s) confirmed by a paired rerun against {confirmed.baseline.label}"
    return replace(comparison, cases=cases, notes=(*comparison.notes, note))


def no_gated_checked(run: RunResult) -> str:
    """Why no gated case of ``run`` passed its correctness check ("" when one did):
    then nothing the suite gates was checked, and there is no verdict, never a pass."""
    gated = [c for c in run.cases if c.case.gate]
    if any(c.status == OK for c in gated):
        return ""
    if not gated:
        return f"none of the {len(run.cases)} case(s) is gated"
    why: dict[str, str] = {}  # kernel -> its first case's reason
    for c in gated:
        reason = c.reason if c.status == UNAVAILABLE else f"{c.status}: {c.reason}"
        why.setdefault(c.case.kernel, shown_reason(reason))
    kernels_ = "; ".join(f"{k}: {w}" for k, w in why.items())
    where = " on the CPU" if run.environment.device == "cpu" else ""
    return f"no gated kernel could be checked here{where} ({kernels_})"


def shown_reason(reason: str) -> str:
    """A worker's reason for one line: its first line only."""
    return reason.strip().splitlines()[0] if reason.strip() else "no reason given"


def run_verdict(run: RunResult, no_baseline: str = "") -> tuple[CheckVerdict, str]:
    """The verdict of a run compared with nothing (guard check, run, a compare without a
    baseline, a report of one run) and why: wrong results fail, a gated case that could
    not run is an infrastructure error (a not-gated one decides nothing), no gated case
    checked or nothing to compare with (``no_baseline``) is no verdict, never a pass."""
    if run.correctness_failures:
        return (
            CheckVerdict.WRONG_RESULTS,
            f"{len(run.correctness_failures)} case(s) with wrong results",
        )
    infra = [c for c in run.infra_failures if c.case.gate]
    if infra:
        why = f"{len(infra)} gated case(s) crashed, timed out or failed to build"
        return CheckVerdict.INFRASTRUCTURE, why
    unchecked = no_gated_checked(run)
    if unchecked or no_baseline:
        return CheckVerdict.NO_VERDICT, unchecked or no_baseline
    checked = sum(1 for c in run.cases if c.case.gate and c.status == OK)
    return CheckVerdict.PASS, f"{checked} gated case(s) correct"
