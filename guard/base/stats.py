"""Pure statistics for the guard: numbers in, numbers out.

No I/O, no torch. Randomness comes from a ``numpy.random.Generator`` passed in, so
every result is reproducible from its seed.

The unit of replication is a *round* (one fresh process): samples inside a round
share that process's state (allocation, clocks, code layout) and are correlated,
so every interval here resamples rounds, never loose samples (resampling only the
top level of a hierarchy is the recommended bootstrap for nested data: Ren et al.,
"Nonparametric bootstrapping for hierarchical data", 2010).

The effect of a case is the ratio candidate / baseline of the 20%-trimmed geometric
means of the per-round medians: medians inside a round shrug off outlying samples,
trimming shrugs off outlying rounds, and the log scale makes ratios symmetric. Its
interval is a bootstrap-t style interval: the standard error from
``scipy.stats.bootstrap`` over rounds and a Student t quantile with Yuen's degrees
of freedom (see ``ratio_interval`` for why not percentiles).

Under a ``min`` threshold (pytest-benchmark rounds on a CPU shared with other work)
each round is its fastest sample, and the arm's centre is the mean of the fastest
half of its rounds instead: other work on the machine only ever adds time, so a
round slowed for its whole run is noise above the floor, and on a shared 2-core VM
about one process in six was (its fastest call 10-50% slow).
"""

from __future__ import annotations

import enum
import functools
import math
import re
import reprlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypedDict

import numpy as np
from numpy.typing import NDArray

Rounds = Sequence[Sequence[float]]
FloatArray = NDArray[np.float64]
# What stands for a round and for an arm: "median" (the round's median; the arm's
# 20%-trimmed mean) or "min" (the round's fastest sample; the arm's fastest half).
RoundStatistic = Literal["median", "min"]


@functools.cache
def _sps() -> Any:
    """scipy.stats, imported on first use: a worker process imports this module (through
    the suite and results readers) but never decides, and scipy.stats costs it about a
    second of start-up per round."""
    from scipy import stats

    return stats


class Verdict(str, enum.Enum):
    """The verdicts this module decides; the same words (values) as the matching
    members of ``guard.decide.outcome.CaseVerdict``, which ``compare`` reports them as.
    Defined here so that the statistics import nothing of the guard."""

    REGRESSION = "regression"
    IMPROVEMENT = "improvement"
    UNCHANGED = "unchanged"
    INCONCLUSIVE = "inconclusive"

    @property
    def fails(self) -> bool:
        """A regression fails a gated case."""
        return self is Verdict.REGRESSION


_SHOWN = reprlib.Repr()
_SHOWN.maxstring = 60
_SHOWN.maxother = 60


def shown(value: object) -> str:
    """``repr(value)`` cut short for an error message (a value read from a file)."""
    return _SHOWN.repr(value)


@dataclass(frozen=True)
class Threshold:
    """A regression threshold parsed from ``median:2%`` (pytest-benchmark's notation).

    The value is the smallest relative change worth failing on; the field says what
    stands for a round. ``median`` (the median of its samples) is the only one for GPU
    timings and suites (means chase outliers). ``min`` (its fastest sample) is for
    pytest-benchmark rounds on a CPU shared with other work, where a process is slowed
    for part of its run by whatever else holds the core: the median of its samples
    then moves with that share, the fastest sample much less (Chen and Revels, "Robust
    benchmarking in noisy environments", 2016; pytest-benchmark compares by ``min`` too).
    """

    min_effect: float
    statistic: RoundStatistic = "median"

    @classmethod
    def parse(cls, text: str) -> Threshold:
        if not isinstance(text, str) or len(text) > 40:
            raise ValueError(
                f"threshold must be a short string like 'median:2%', got {shown(text)}"
            )
        match = re.fullmatch(r"\s*(median|min)\s*:\s*([0-9]*\.?[0-9]+)\s*%\s*", text)
        if not match:
            raise ValueError(
                f"threshold {shown(text)} is not of the form 'median:N%' (or 'min:N%')"
            )
        value = float(match.group(2)) / 100.0
        if not 0.0 < value < 1.0:
            raise ValueError(f"threshold {shown(text)} must lie between 0% and 100%")
        return cls(min_effect=value, statistic="min" if match.group(1) == "min" else "median")

    def __str__(self) -> str:
        return f"{self.statistic}:{self.min_effect * 100:g}%"


@dataclass(frozen=True)
class Interval:
    """A ratio (candidate / baseline) with its confidence interval.

    ``capped``: the interval was wider than ``MAX_LOG_HALF_WIDTH`` allows (or the
    ratio beyond ``MAX_LOG_RATIO``) and was cut there; it decides nothing."""

    ratio: float
    low: float
    high: float
    confidence: float
    capped: bool = False
    # One-sided upper bound at ``bound_confidence``: "unchanged" needs it below
    # 1 + the case's minimum effect (see ``Rule``). None: not computed.
    bound: float | None = None
    bound_confidence: float | None = None


# An interval wider than a factor of 1000 either way says nothing about a threshold of a
# few percent; cutting it there (and the log ratio at +-600) keeps exp() finite for any
# finite input (two rounds a side at confidence 0.999 have a t quantile of about 636).
MAX_LOG_HALF_WIDTH = math.log(1000.0)
MAX_LOG_RATIO = 600.0


def round_medians(rounds: Rounds) -> FloatArray:
    """The median of each non-empty round."""
    meds = [float(np.median(np.asarray(r, dtype=float))) for r in rounds if len(r) > 0]
    return np.asarray(meds, dtype=float)


def pooled(rounds: Rounds) -> FloatArray:
    return np.concatenate([np.asarray(r, dtype=float) for r in rounds]) if rounds else np.empty(0)


TRIM = 0.2  # share of rounds cut from each end before averaging


def _cut(n: int, statistic: RoundStatistic) -> tuple[int, int]:
    """Rounds cut from the (low, high) end of an arm of ``n`` before averaging."""
    if statistic == "min":
        return 0, n // 2  # the fastest half: the middle round stays when n is odd
    g = int(TRIM * n)
    return g, g


def _centre(x: FloatArray, statistic: RoundStatistic, axis: int = -1) -> FloatArray | np.float64:
    """The arm's centre along ``axis``: the 20%-trimmed mean, or under ``min`` the mean
    of the fastest half (an odd arm's middle round at half weight, so that the centre
    does not move with the parity of the arm: 5 rounds against 6 would shift it ~0.6%)."""
    if statistic == "median":  # scipy is untyped here (pyproject.toml): Any.
        trimmed: FloatArray | np.float64 = _sps().trim_mean(x, TRIM, axis=axis)
        return trimmed
    n = x.shape[axis]
    weights = np.zeros(n)
    weights[: n // 2] = 1.0
    if n % 2:
        weights[n // 2] = 0.5
    ordered = np.moveaxis(np.sort(x, axis=axis), axis, -1)
    centre: FloatArray | np.float64 = ordered @ weights / (n / 2.0)
    return centre


def _log_mean_diff(
    cand: FloatArray, base: FloatArray, axis: int = -1, statistic: RoundStatistic = "median"
) -> FloatArray | np.float64:
    """Difference of the arms' centres of log rounds (a scalar for 1-D arms, an array
    of them for the stacked resamples ``scipy.stats.bootstrap`` passes).

    Trimmed, because a round now and then lands far off (one of 56 rounds on an H100
    ran a case 48% slow): a plain mean lets that one round decide the interval."""
    diff: FloatArray | np.float64 = _centre(cand, statistic, axis)
    return diff - _centre(base, statistic, axis)


class _Statistic(Protocol):
    """A vectorized statistic of two arms, as ``scipy.stats.bootstrap`` calls it."""

    def __call__(
        self, cand: FloatArray, base: FloatArray, axis: int = -1
    ) -> FloatArray | np.float64: ...


def _trimmed_df(lb: FloatArray, lc: FloatArray, statistic: RoundStatistic = "median") -> float:
    """Yuen's degrees of freedom: the rounds left after trimming, Welch-combined (1,
    the fewest, where an arm keeps a single round: its spread is then unknown)."""

    def part(x: FloatArray) -> tuple[float, int]:
        low, high = _cut(x.size, statistic)
        h = x.size - low - high
        if low or high:  # winsorized: each cut round set to the nearest one kept
            ordered = np.sort(x)
            w = np.clip(x, ordered[low], ordered[x.size - high - 1])
        else:
            w = x
        return float(np.var(w, ddof=1)) * (x.size - 1) / (h * max(h - 1, 1)), h

    db, hb = part(lb)
    dc, hc = part(lc)
    if min(hb, hc) < 2:
        return 1.0
    denom = db**2 / (hb - 1) + dc**2 / (hc - 1)
    return float((db + dc) ** 2 / denom) if denom > 0 else float(hb + hc - 2)


def _bootstrap_se(
    data: tuple[FloatArray, FloatArray],
    statistic: _Statistic,
    rng: np.random.Generator,
    n_resamples: int,
) -> float:
    """The standard error from scipy.stats.bootstrap, across its 1.11-1.17 API
    (``random_state`` became ``rng``)."""
    kwargs: dict[str, object] = {
        "n_resamples": n_resamples,
        "vectorized": True,
        "method": "percentile",
        "confidence_level": 0.9,
    }
    try:
        res = _sps().bootstrap(data, statistic, rng=rng, **kwargs)
    except TypeError:
        res = _sps().bootstrap(data, statistic, random_state=rng, **kwargs)
    return float(res.standard_error)


def ratio_interval(
    baseline: Rounds,
    candidate: Rounds,
    *,
    confidence: float,
    rng: np.random.Generator,
    n_resamples: int = 2000,
    bound_confidence: float | None = None,
    statistic: RoundStatistic = "median",
    strata: tuple[Sequence[str], Sequence[str]] | None = None,
) -> Interval:
    """Ratio of candidate to baseline, with an interval that resamples rounds.

    The standard error of the log ratio comes from ``scipy.stats.bootstrap`` over
    rounds (each arm resampled on its own), scaled by sqrt(n/(n-1)) to undo the
    plug-in bias; the interval is the estimate +- a Student t quantile with Yuen's
    degrees of freedom for trimmed means times that error. With 4-12 rounds a percentile interval is
    too narrow, and at the family-adjusted levels the guard uses (about 0.998) the
    resampled tails hold too few points to be read directly.
    Needs at least two rounds in each arm; raises ValueError otherwise.
    ``bound_confidence`` also gives the one-sided upper bound at that level.
    ``statistic``: each arm's centre (``RoundStatistic``; the module's docstring).
    ``strata``: each round's GPU, per arm (baseline's, candidate's), where a run dealt
    its rounds over several GPUs (``_without_offsets``).
    """
    lb, lc = _log_medians(baseline), _log_medians(candidate)
    if lb.size < 2 or lc.size < 2:
        raise ValueError("a ratio interval needs at least two rounds in each arm")
    log_ratio = functools.partial(_log_mean_diff, statistic=statistic)
    diff = float(log_ratio(lc, lb))
    sb, sc, strata_count = _without_offsets(lb, lc, strata)
    se, df = 0.0, 1.0  # identical rounds: nothing varies
    if np.ptp(sb) > 0.0 or np.ptp(sc) > 0.0:
        n = min(lb.size, lc.size)
        se = _bootstrap_se((sc, sb), log_ratio, rng, n_resamples) * math.sqrt(n / (n - 1))
        df = max(_trimmed_df(sb, sc, statistic) - (strata_count - 1), 1.0)
    half = float(_sps().t.ppf(0.5 + confidence / 2.0, df=df)) * se
    up = None if bound_confidence is None else float(_sps().t.ppf(bound_confidence, df=df)) * se
    capped = not half <= MAX_LOG_HALF_WIDTH or abs(diff) > MAX_LOG_RATIO  # NaN counts as wide
    if capped:
        half = MAX_LOG_HALF_WIDTH
        diff = min(max(diff, -MAX_LOG_RATIO), MAX_LOG_RATIO)
    if up is not None:
        up = min(up, MAX_LOG_HALF_WIDTH) if up == up else MAX_LOG_HALF_WIDTH
    return Interval(
        float(np.exp(diff)),
        float(np.exp(diff - half)),
        float(np.exp(diff + half)),
        confidence,
        capped,
        None if up is None else float(np.exp(diff + up)),
        bound_confidence,
    )


def _without_offsets(
    lb: FloatArray, lc: FloatArray, strata: tuple[Sequence[str], Sequence[str]] | None
) -> tuple[FloatArray, FloatArray, int]:
    """The arms' log rounds with each GPU's offset taken out, and how many GPUs.

    A run that deals its rounds over several GPUs gives each GPU as many rounds of each
    arm, so a GPU that runs a little faster than another moves both arms alike and the
    estimate not at all; but it spreads each arm's rounds, which would widen the
    interval for nothing. Each GPU's offset (the mean of its two arms' mean log rounds)
    is subtracted from its rounds of both arms before the spread is resampled; the
    estimate itself is taken from the rounds as measured. Unchanged, with one stratum:
    no strata, strata that do not match the rounds one to one, or a GPU that holds
    rounds of one arm only (its offset would take the arms' difference with it)."""
    if strata is None:
        return lb, lc, 1
    gb, gc = np.asarray(strata[0], dtype=object), np.asarray(strata[1], dtype=object)
    labels = set(gb.tolist()) | set(gc.tolist())
    if gb.size != lb.size or gc.size != lc.size or len(labels) < 2:
        return lb, lc, 1
    if any(not (gb == g).any() or not (gc == g).any() for g in labels):
        return lb, lc, 1
    sb, sc = lb.copy(), lc.copy()
    for g in labels:
        offset = (float(lb[gb == g].mean()) + float(lc[gc == g].mean())) / 2.0
        sb[gb == g] -= offset
        sc[gc == g] -= offset
    return sb, sc, len(labels)


def case_time(rounds: Rounds, statistic: RoundStatistic = "median") -> float | None:
    """The case's time: the 20%-trimmed geometric mean of its round medians (under
    ``min``, the geometric mean of the fastest half of its rounds).

    The one definition every number shown uses; the ratio of two case times is the
    ratio ``ratio_interval`` reports, so a reader can check one against the other."""
    meds = round_medians(rounds)
    meds = meds[np.isfinite(meds) & (meds > 0)]
    if meds.size == 0:
        return None
    return float(np.exp(_centre(np.log(meds), statistic)))


def ratio_estimate(
    baseline: Rounds, candidate: Rounds, statistic: RoundStatistic = "median"
) -> float:
    """The ratio ``ratio_interval`` reports, without an interval: for arms too small
    for one (a single round on either side)."""
    lb, lc = _log_medians(baseline), _log_medians(candidate)
    if lb.size < 1 or lc.size < 1:
        raise ValueError("a ratio needs at least one round in each arm")
    diff = float(_log_mean_diff(lc, lb, statistic=statistic))
    return float(np.exp(min(max(diff, -MAX_LOG_RATIO), MAX_LOG_RATIO)))


def _log_medians(rounds: Rounds) -> FloatArray:
    meds = round_medians(rounds)
    if not (np.isfinite(meds).all() and (meds > 0).all()):
        raise ValueError("times must be finite and positive")
    return np.log(meds)


@dataclass(frozen=True)
class Rule:
    """How one case is decided from its interval.

    - regression: the interval (at the family level, so the whole check's false-alarm
      rate stays under alpha) lies above ``1 + margin``;
    - improvement: it lies below ``1 - margin``;
    - unchanged: the one-sided upper bound at ``1 - miss_rate`` lies below
      ``1 + min_effect``: a slowdown as large as the case's minimum effect of interest
      is ruled out (an equivalence-style test; a slowdown of ``min_effect`` or more is
      called unchanged at most ``miss_rate`` of the time);
    - inconclusive otherwise (more rounds, within the plan's budget).

    ``margin`` is the noise floor: the smallest ratio a regression must clear. In a
    paired run (both trees on one machine, interleaved) it is the calibrated 0.5%;
    against a stored baseline from another machine or day it must also cover the
    machine's drift (``TimingPlan.drift``), or an unchanged tree would fail.
    """

    min_effect: float
    margin: float = 0.005
    miss_rate: float = 0.05
    statistic: RoundStatistic = "median"  # each side's centre (the module's docstring)

    def __post_init__(self) -> None:
        if not 0.0 <= self.margin < self.min_effect < 1.0:
            raise ValueError(
                f"need 0 <= margin ({self.margin:g}) < min_effect ({self.min_effect:g}) < 1"
            )
        if not 0.0 < self.miss_rate < 0.5:
            raise ValueError(f"miss_rate must lie in (0, 0.5), got {self.miss_rate:g}")

    @property
    def bound_confidence(self) -> float:
        return 1.0 - self.miss_rate


@dataclass(frozen=True)
class Basis:
    """The number a case's verdict rests on and the limit it was compared with, so
    that every table can show why (``CaseOutcome.verdict_text``).

    ``value``: the family interval's low end (regression) or high end (improvement),
    or the one-sided upper bound ("unchanged", "inconclusive"; the interval's high end
    where no bound was computed); None when the interval was capped. ``level``: the
    one-sided bound's confidence (None for an end of the interval shown beside it)."""

    value: float | None
    limit: float
    level: float | None = None


def judge(interval: Interval, rule: Rule) -> tuple[Verdict, Basis]:
    """Place an interval against ``rule``: the verdict and the number it rests on.
    A capped interval (too wide to mean anything) is inconclusive whatever its ends
    say. The one place the rule is applied (``classify`` is its verdict alone)."""
    unchanged_limit = 1.0 + rule.min_effect
    if interval.capped:
        return Verdict.INCONCLUSIVE, Basis(None, unchanged_limit)
    if interval.low > 1.0 + rule.margin:
        return Verdict.REGRESSION, Basis(interval.low, 1.0 + rule.margin)
    if interval.high < 1.0 - rule.margin:
        return Verdict.IMPROVEMENT, Basis(interval.high, 1.0 - rule.margin)
    if interval.bound is None:
        bound, level = interval.high, None
    else:
        bound, level = interval.bound, interval.bound_confidence
    verdict = Verdict.UNCHANGED if bound < unchanged_limit else Verdict.INCONCLUSIVE
    return verdict, Basis(bound, unchanged_limit, level)


def classify(interval: Interval, rule: Rule) -> Verdict:
    """The verdict of ``judge``."""
    return judge(interval, rule)[0]


def rounds_to_decide(interval: Interval, rule: Rule, rounds: int, most: int = 200) -> int | None:
    """About how many rounds per arm would turn an inconclusive case whose estimate
    lies above ``1 + rule.margin`` into a regression (the interval's low end above
    ``1 + rule.margin``), were the estimate and the noise to stay as they are; None:
    more than ``most`` (the caller's limit, ``limits.MAX_ROUNDS_PER_CASE``).

    The interval is the estimate +- t * se on the log scale; the standard error
    shrinks as 1/sqrt(rounds) and the t quantile falls with the degrees of freedom
    (Yuen's for equal arms, ``_equal_arms_df``), so the answer is the first count at
    which t * se fits inside the distance from the estimate to the margin.
    ``rounds``: the rounds per arm now (the smaller arm's)."""
    distance = math.log(interval.ratio) - math.log(1.0 + rule.margin)
    if not distance > 0.0:
        raise ValueError("the estimate lies within the margin: no number of rounds decides it")
    rounds = max(rounds, 2)
    q = 0.5 + interval.confidence / 2.0
    half = (math.log(interval.high) - math.log(interval.low)) / 2.0
    se = half / float(_sps().t.ppf(q, df=_equal_arms_df(rounds, rule.statistic)))
    for n in range(rounds + 1, most + 1):
        t = float(_sps().t.ppf(q, df=_equal_arms_df(n, rule.statistic)))
        if t * se * math.sqrt(rounds / n) < distance:
            return n
    return None


def _equal_arms_df(rounds: int, statistic: RoundStatistic = "median") -> float:
    """Yuen's degrees of freedom for two arms of ``rounds`` rounds and equal spread."""
    h = rounds - sum(_cut(rounds, statistic))
    return float(max(2 * (h - 1), 1))


def decide(
    baseline: Rounds,
    candidate: Rounds,
    rule: Rule,
    *,
    confidence: float,
    rng: np.random.Generator,
    n_resamples: int = 2000,
    strata: tuple[Sequence[str], Sequence[str]] | None = None,
) -> tuple[Verdict, Interval]:
    """The case's verdict and the interval it rests on (``confidence``: the family level
    from ``family_confidence``; ``strata``: each round's GPU, as ``ratio_interval``)."""
    interval = ratio_interval(
        baseline,
        candidate,
        confidence=confidence,
        rng=rng,
        n_resamples=n_resamples,
        bound_confidence=rule.bound_confidence,
        statistic=rule.statistic,
        strata=strata,
    )
    return classify(interval, rule), interval


# The family false-alarm rates a check may be sized for. Far below 1e-6 the per-case
# level rounds to 1 and every interval is as wide as it gets (alpha 1e-300 passed a 3x
# slowdown); above 0.2 one check in five fails on noise alone.
ALPHA_MIN = 1e-6
ALPHA_MAX = 0.2


def check_alpha(alpha: float) -> float:
    """``alpha`` if it lies in [ALPHA_MIN, ALPHA_MAX]; ValueError otherwise (the
    readers of the suite file and of ``--alpha`` call this and name their field)."""
    if not ALPHA_MIN <= alpha <= ALPHA_MAX:  # NaN fails too
        raise ValueError(f"must lie in [{ALPHA_MIN:g}, {ALPHA_MAX:g}], got {alpha!r}")
    return alpha


def family_confidence(alpha: float, n_tests: int) -> float:
    """Per-case two-sided confidence so that the whole check's one-sided false-alarm
    rate stays under ``alpha`` (Bonferroni over the gated cases: with intervals rather
    than p-values Holm's step-down has no interval form, and the two agree whenever
    at most one case regresses)."""
    if not 0.0 < alpha < 1.0:
        raise ValueError("alpha must lie in (0, 1)")
    return 1.0 - 2.0 * alpha / max(n_tests, 1)


class BenchmarkStats(TypedDict):
    """pytest-benchmark's ``stats`` of one benchmark (without its ``data``)."""

    min: float
    max: float
    mean: float
    stddev: float
    rounds: int
    median: float
    iqr: float
    q1: float
    q3: float
    iqr_outliers: int
    stddev_outliers: int
    outliers: str  # "<stddev outliers>;<iqr outliers>"
    ld15iqr: float
    hd15iqr: float
    ops: float
    total: float
    iterations: int


def summary(values: Sequence[float]) -> BenchmarkStats:
    """Descriptive statistics in pytest-benchmark's names (seconds in, seconds out)."""
    arr = np.asarray(values, dtype=float)
    if arr.size == 0:
        raise ValueError("no samples")
    q1, median, q3 = (float(x) for x in np.percentile(arr, [25, 50, 75]))
    iqr = q3 - q1
    mean = float(arr.mean())
    stddev = float(arr.std(ddof=1)) if arr.size > 1 else 0.0
    lo, hi = q1 - 1.5 * iqr, q3 + 1.5 * iqr
    inside = arr[(arr >= lo) & (arr <= hi)]
    n_iqr_out = int(arr.size - inside.size)
    n_sd_out = int(np.sum(np.abs(arr - mean) > stddev)) if stddev > 0 else 0
    return {
        "min": float(arr.min()),
        "max": float(arr.max()),
        "mean": mean,
        "stddev": stddev,
        "rounds": int(arr.size),
        "median": median,
        "iqr": iqr,
        "q1": q1,
        "q3": q3,
        "iqr_outliers": n_iqr_out,
        "stddev_outliers": n_sd_out,
        "outliers": f"{n_sd_out};{n_iqr_out}",
        "ld15iqr": float(inside.min()) if inside.size else float(arr.min()),
        "hd15iqr": float(inside.max()) if inside.size else float(arr.max()),
        "ops": 1.0 / mean if mean > 0 else 0.0,
        "total": float(arr.sum()),
        "iterations": 1,
    }
