"""Error rates of the guard's decision rule, and of the rules other tools use.

Pure analysis (no I/O, no torch): the input is a pool of fresh-process rounds, each
holding, per workload, samples of a "base" arm (kernel + a short GPU spin) and of
"planted" arms whose spin is longer by a known fraction of the base time. A check is
formed like a PR check: baseline rounds and candidate rounds drawn from disjoint
processes; the candidate uses the base arm (A/A) or a planted arm.

Rules compared on the same samples:
- ``guard``: this project's rule (``guard.base.stats.decide``: bootstrap over rounds, Yuen's
  t, Bonferroni across the suite's workloads; regression above 1 + margin, unchanged
  when a one-sided 95% bound rules out the minimum effect), with sequential extension
  of inconclusive workloads from ``rounds`` up to ``max_rounds``. Paired checks (both
  arms from one machine, both growing) use the calibrated margin; stored-baseline
  checks (``make_checks_across``: baseline from one machine, candidate from another) add
  the drift allowance to the margin and to the effect.
- ``pytest-benchmark median:5%``: candidate median > 1.05 x baseline median
  (pytest-benchmark's ``--benchmark-compare-fail=median:5%``, samples pooled).
- ``mann-whitney p<0.05``: Google Benchmark's compare.py U test on pooled samples,
  counted as a regression when p < 0.05 and the candidate median is larger.
- ``asv``: U test p < 0.002 and ratio of medians > 1.1 (asv's defaults).
- ``criterion``: 95% bootstrap interval of the ratio of means (pooled samples)
  entirely above 1 + 1% (criterion's noise threshold).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from guard.base import stats

# rounds[r][workload][arm] -> samples of that arm in that round
Round = dict[str, dict[str, list[float]]]
BASE = "base"


@dataclass(frozen=True)
class Check:
    baseline: tuple[int, ...]  # round indices
    candidate: tuple[int, ...]
    reserve_b: tuple[int, ...] = ()  # extra rounds for the sequential extension
    reserve_c: tuple[int, ...] = ()


def _pooled(rounds: Sequence[Round], idx: Sequence[int], workload: str, arm: str) -> np.ndarray:
    return np.concatenate([np.asarray(rounds[i][workload][arm], dtype=float) for i in idx])


def _per_round(rounds: Sequence[Round], idx: Sequence[int], workload: str, arm: str):
    return [rounds[i][workload][arm] for i in idx]


CONTROL = "control"  # torch SDPA on the same workload, in the same round (pools 3+)


def rule_guard(rule: stats.Rule, alpha: float = 0.01, step: int = 2) -> Callable:
    """The guard's rule (``stats.decide``), sequential extension included; returns each
    workload's ``stats.Verdict`` (a regression is flagged; see ``evaluate``)."""

    def decide(rounds, check: Check, workloads: Sequence[str], arm: str, rng) -> dict:
        confidence = stats.family_confidence(alpha, len(workloads))
        out = {}
        for w in workloads:
            nb, nc = list(check.baseline), list(check.candidate)
            rb, rc = list(check.reserve_b), list(check.reserve_c)
            while True:
                verdict, _ = stats.decide(
                    _per_round(rounds, nb, w, BASE),
                    _per_round(rounds, nc, w, arm),
                    rule,
                    confidence=confidence,
                    rng=rng,
                    n_resamples=500,
                )
                if verdict is not stats.Verdict.INCONCLUSIVE or not rc:
                    break
                # Only the candidate grows when the baseline is stored (no reserve_b).
                take = min(step, len(rc))
                nc += rc[:take]
                rc = rc[take:]
                if rb:
                    nb += rb[:take]
                    rb = rb[take:]
            out[w] = verdict
        return out

    return decide


def rule_pytest_benchmark(rounds, check, workloads, arm, rng) -> dict[str, bool]:
    return {
        w: float(np.median(_pooled(rounds, check.candidate, w, arm)))
        > 1.05 * float(np.median(_pooled(rounds, check.baseline, w, BASE)))
        for w in workloads
    }


def _u_test(rounds, check, w, arm) -> tuple[float, float]:
    a = _pooled(rounds, check.baseline, w, BASE)
    b = _pooled(rounds, check.candidate, w, arm)
    p = float(sps.mannwhitneyu(b, a, alternative="two-sided").pvalue)
    return p, float(np.median(b) / np.median(a))


def _u_rule(p_max: float, min_ratio: float) -> Callable:
    def decide(rounds, check, workloads, arm, rng) -> dict[str, bool]:
        out = {}
        for w in workloads:
            p, ratio = _u_test(rounds, check, w, arm)
            out[w] = p < p_max and ratio > min_ratio
        return out

    return decide


rule_mann_whitney = _u_rule(0.05, 1.0)  # Google Benchmark compare.py
rule_asv = _u_rule(0.002, 1.1)  # asv's defaults


def rule_criterion(rounds, check, workloads, arm, rng) -> dict[str, bool]:
    out = {}
    for w in workloads:
        a = _pooled(rounds, check.baseline, w, BASE)
        b = _pooled(rounds, check.candidate, w, arm)
        res = sps.bootstrap(
            (b, a),
            lambda x, y, axis=-1: np.mean(x, axis) / np.mean(y, axis),
            vectorized=True,
            n_resamples=500,
            confidence_level=0.95,
            method="percentile",
            rng=rng,
        )
        out[w] = float(res.confidence_interval.low) > 1.01
    return out


def make_checks(
    n_rounds: int,
    per_arm: int,
    reserve: int,
    n_checks: int,
    rng: np.random.Generator,
    baseline_rounds: int | None = None,
) -> list[Check]:
    """Random draws of rounds, disjoint within a check (checks may share rounds).

    ``baseline_rounds`` set: a stored baseline of that many rounds, fixed, against a
    candidate of ``per_arm`` rounds that may grow by ``reserve`` (a PR check against
    ``baselines/``). Unset: both arms start at ``per_arm`` and both may grow (a live
    comparison, ``guard compare --against``).
    """
    if baseline_rounds is None:
        sizes = (per_arm, per_arm, reserve, reserve)
    else:
        sizes = (baseline_rounds, per_arm, 0, reserve)
    need = sum(sizes)
    if n_rounds < need:
        raise ValueError(f"a check needs {need} rounds; the pool has {n_rounds}")
    checks = []
    for _ in range(n_checks):
        perm = rng.permutation(n_rounds)
        edges = np.cumsum((0, *sizes))
        parts = [tuple(int(x) for x in perm[a:b]) for a, b in itertools.pairwise(edges)]
        checks.append(
            Check(baseline=parts[0], candidate=parts[1], reserve_b=parts[2], reserve_c=parts[3])
        )
    return checks


def make_checks_across(
    n_a: int,
    n_b: int,
    per_arm: int,
    reserve: int,
    n_checks: int,
    rng: np.random.Generator,
    baseline_rounds: int,
) -> list[Check]:
    """Checks across two machines: a stored baseline of ``baseline_rounds`` rounds from
    pool A (indices ``0..n_a-1``), a candidate from pool B (``n_a..n_a+n_b-1``), as when
    a baseline recorded on one machine judges a run on another."""
    if n_a < baseline_rounds or n_b < per_arm + reserve:
        raise ValueError("the pools are too small for these checks")
    checks = []
    for _ in range(n_checks):
        a = rng.permutation(n_a)[:baseline_rounds]
        b = n_a + rng.permutation(n_b)[: per_arm + reserve]
        checks.append(
            Check(
                baseline=tuple(int(x) for x in a),
                candidate=tuple(int(x) for x in b[:per_arm]),
                reserve_c=tuple(int(x) for x in b[per_arm:]),
            )
        )
    return checks


@dataclass(frozen=True)
class RuleRates:
    rule: str
    false_alarm: float  # fraction of A/A whole-suite checks that fail
    power: dict[str, dict[str, float]]  # arm -> workload -> detection rate
    n_checks: int
    aa_inconclusive: float = float("nan")  # share of A/A workload decisions left open

    def min_power(self, arm: str) -> float:
        return min(self.power[arm].values()) if self.power.get(arm) else float("nan")


def _flagged(decision: object) -> bool:
    return decision is True or decision is stats.Verdict.REGRESSION


def evaluate(
    rounds: Sequence[Round],
    workloads: Sequence[str],
    arms: Sequence[str],
    rule: Callable,
    checks: Sequence[Check],
    name: str,
    seed: int = 0,
) -> RuleRates:
    """Rates of a rule over ``checks``. A rule returns per workload either a bool
    (flagged) or a ``stats.Verdict`` (flagged when a regression; inconclusive counted)."""
    rng = np.random.default_rng(seed)
    false_alarms = 0
    open_aa = decided_aa = 0
    detected = {arm: dict.fromkeys(workloads, 0) for arm in arms}
    for check in checks:
        aa = rule(rounds, check, workloads, BASE, rng)
        if any(_flagged(v) for v in aa.values()):
            false_alarms += 1
        open_aa += sum(1 for v in aa.values() if v is stats.Verdict.INCONCLUSIVE)
        decided_aa += len(aa)
        for arm in arms:
            for w, decision in rule(rounds, check, workloads, arm, rng).items():
                detected[arm][w] += int(_flagged(decision))
    n = len(checks)
    return RuleRates(
        rule=name,
        false_alarm=false_alarms / n,
        power={a: {w: detected[a][w] / n for w in workloads} for a in arms},
        n_checks=n,
        aa_inconclusive=open_aa / decided_aa if decided_aa else float("nan"),
    )


def variance_components(rounds: Sequence[Round], workload: str, arm: str = BASE):
    """(between-round sd, within-round sd, between-round sd after dividing by the
    control) of log times: the noise the rule must beat."""
    logs = [np.log(np.asarray(r[workload][arm], dtype=float)) for r in rounds]
    medians = np.array([np.median(x) for x in logs])
    within = float(np.sqrt(np.mean([np.var(x, ddof=1) for x in logs])))
    normalized = float("nan")
    if all(CONTROL in r[workload] for r in rounds):
        ctrl = np.array([np.log(np.median(r[workload][CONTROL])) for r in rounds])
        normalized = float(np.std(medians - ctrl, ddof=1))
    return float(np.std(medians, ddof=1)), within, normalized


def coverage(
    rounds: Sequence[Round],
    workloads: Sequence[str],
    arm: str,
    checks: Sequence[Check],
    confidence: float,
    seed: int = 0,
) -> float:
    """Share of (check, workload) intervals that hold the pool's own ratio for ``arm``
    (the ratio of its all-round trimmed geometric means): does the interval cover?"""
    rng = np.random.default_rng(seed)
    hits = total = 0
    for w in workloads:
        every = list(range(len(rounds)))
        truth = stats.ratio_interval(
            _per_round(rounds, every, w, BASE),
            _per_round(rounds, every, w, arm),
            confidence=0.5,
            rng=rng,
            n_resamples=200,
        ).ratio
        for check in checks:
            iv = stats.ratio_interval(
                _per_round(rounds, check.baseline, w, BASE),
                _per_round(rounds, check.candidate, w, arm),
                confidence=confidence,
                rng=rng,
                n_resamples=500,
            )
            hits += int(iv.low <= truth <= iv.high)
            total += 1
    return hits / total
