"""The decision rule on synthetic samples with known truth."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import synthetic_rounds

from guard.base import stats
from guard.base.stats import Interval, Threshold, Verdict

CONF = stats.family_confidence(0.01, 7)
RULE = stats.Rule(min_effect=0.02, margin=0.005)


def verdict_for(rng, effect, **kw):
    base = synthetic_rounds(rng, 1e-4, **kw)
    cand = synthetic_rounds(rng, 1e-4 * effect, **kw)
    verdict, iv = stats.decide(base, cand, RULE, confidence=CONF, rng=rng)
    return iv, verdict


def test_aa_pairs_are_not_flagged(rng):
    verdicts = [verdict_for(rng, 1.0)[1] for _ in range(40)]
    assert Verdict.REGRESSION not in verdicts
    assert Verdict.IMPROVEMENT not in verdicts


def test_planted_ten_percent_slowdown_is_a_regression(rng):
    for _ in range(10):
        iv, verdict = verdict_for(rng, 1.10)
        assert verdict is Verdict.REGRESSION
        assert iv.low > 1.02 and iv.low < 1.10 < iv.high


def test_planted_speedup_is_an_improvement(rng):
    assert verdict_for(rng, 0.90)[1] is Verdict.IMPROVEMENT


def test_wide_noisy_pair_is_inconclusive_not_regression(rng):
    # 5% real slowdown hidden under 8% round-to-round noise with 3 rounds.
    iv, verdict = verdict_for(rng, 1.05, n_rounds=3, between=0.08, within=0.05)
    assert verdict is Verdict.INCONCLUSIVE
    assert iv.high - iv.low > 0.1


def test_unchanged_when_the_bound_rules_out_the_minimum_effect(rng):
    iv, verdict = verdict_for(rng, 1.0, n_rounds=12, between=0.001, within=0.002)
    assert verdict is Verdict.UNCHANGED
    assert iv.bound is not None and iv.bound < 1.02
    assert iv.bound_confidence == pytest.approx(0.95)


def test_unchanged_needs_only_the_one_sided_bound_below_the_minimum_effect():
    # The family-level interval reaches past +2%, but the 95% bound does not: a
    # slowdown of 2% is ruled out (the low end is inside the noise floor).
    iv = Interval(1.0, 0.99, 1.025, 0.998, bound=1.015, bound_confidence=0.95)
    assert stats.classify(iv, RULE) is Verdict.UNCHANGED
    iv_far = Interval(1.0, 0.99, 1.025, 0.998, bound=1.021, bound_confidence=0.95)
    assert stats.classify(iv_far, RULE) is Verdict.INCONCLUSIVE


def test_a_small_real_slowdown_above_the_margin_is_a_regression():
    # +1%: below the minimum effect of interest, but clearly there.
    assert stats.classify(Interval(1.01, 1.006, 1.014, 0.998), RULE) is Verdict.REGRESSION


def test_verdict_is_monotone_in_the_effect(rng):
    order = {Verdict.IMPROVEMENT: 0, Verdict.UNCHANGED: 1, Verdict.INCONCLUSIVE: 1}
    order[Verdict.REGRESSION] = 2
    base = synthetic_rounds(rng, 1e-4, n_rounds=8)
    noise = synthetic_rounds(rng, 1.0, n_rounds=8)
    last = -1
    for effect in (0.8, 0.95, 1.0, 1.03, 1.1, 1.5):
        cand = [
            [x * effect * n for x, n in zip(r, nr, strict=False)]
            for r, nr in zip(base, noise, strict=False)
        ]
        verdict, _ = stats.decide(base, cand, RULE, confidence=CONF, rng=np.random.default_rng(0))
        assert order[verdict] >= last
        last = order[verdict]
    assert last == 2


def test_rule_refuses_a_margin_at_or_past_the_minimum_effect():
    with pytest.raises(ValueError, match="margin"):
        stats.Rule(min_effect=0.01, margin=0.02)


def test_interval_resamples_rounds_not_samples(rng):
    # Many samples per round must not shrink the interval when rounds disagree.
    few = stats.ratio_interval(
        synthetic_rounds(rng, 1.0, per_round=5, between=0.02),
        synthetic_rounds(rng, 1.0, per_round=5, between=0.02),
        confidence=0.95,
        rng=rng,
    )
    many = stats.ratio_interval(
        synthetic_rounds(rng, 1.0, per_round=500, between=0.02),
        synthetic_rounds(rng, 1.0, per_round=500, between=0.02),
        confidence=0.95,
        rng=rng,
    )
    width = lambda iv: np.log(iv.high / iv.low)  # noqa: E731
    assert width(many) > 0.3 * width(few)


def test_interval_needs_two_rounds(rng):
    with pytest.raises(ValueError, match="two rounds"):
        stats.ratio_interval([[1.0, 1.1]], [[1.0], [1.1]], confidence=0.95, rng=rng)


def test_identical_rounds_give_a_point_interval(rng):
    iv = stats.ratio_interval([[1.0], [1.0]], [[2.0], [2.0]], confidence=0.95, rng=rng)
    assert iv == Interval(2.0, 2.0, 2.0, 0.95)


def test_two_rounds_at_high_confidence_stay_finite_and_decide_nothing(rng):
    # t(0.9995, df=1) is about 636: exp(log ratio + t * se) used to overflow to inf.
    iv = stats.ratio_interval([[5.0], [0.5]], [[0.5], [0.5]], confidence=0.999, rng=rng)
    assert np.isfinite([iv.ratio, iv.low, iv.high]).all()
    assert iv.capped and iv.low <= iv.ratio <= iv.high
    assert stats.classify(iv, RULE) is Verdict.INCONCLUSIVE


def test_extreme_times_give_a_finite_capped_interval(rng):
    iv = stats.ratio_interval([[1e-300], [2e-300]], [[1e300], [3e300]], confidence=0.999, rng=rng)
    assert np.isfinite([iv.ratio, iv.low, iv.high]).all() and iv.capped


def test_capped_interval_is_never_unchanged_or_regression():
    inside = Interval(1.0, 0.999, 1.001, 0.99, capped=True)
    above = Interval(5.0, 4.0, 6.0, 0.99, capped=True)
    assert stats.classify(inside, RULE) is Verdict.INCONCLUSIVE
    assert stats.classify(above, RULE) is Verdict.INCONCLUSIVE


def test_ratio_estimate_without_interval():
    assert stats.ratio_estimate([[1.0, 1.0, 5.0]], [[2.0, 2.0, 0.1]]) == pytest.approx(2.0)
    with pytest.raises(ValueError, match="one round"):
        stats.ratio_estimate([], [[1.0]])


@pytest.mark.parametrize(
    ("low", "high", "expected"),
    [
        (1.03, 1.05, Verdict.REGRESSION),
        (1.006, 1.01, Verdict.REGRESSION),
        (0.95, 0.97, Verdict.IMPROVEMENT),
        (0.99, 1.01, Verdict.UNCHANGED),
        (0.97, 1.01, Verdict.UNCHANGED),
        (1.004, 1.04, Verdict.INCONCLUSIVE),
        (0.97, 1.03, Verdict.INCONCLUSIVE),
    ],
)
def test_classify_against_the_rule(low, high, expected):
    assert stats.classify(Interval(1.0, low, high, 0.99), RULE) is expected


def test_family_confidence_bonferroni():
    assert stats.family_confidence(0.01, 1) == pytest.approx(0.98)
    assert stats.family_confidence(0.01, 10) == pytest.approx(0.998)
    with pytest.raises(ValueError):
        stats.family_confidence(0.0, 3)


@pytest.mark.parametrize("text", ["median:2%", " median : 0.5 % ", "median:10%", "min:5%"])
def test_threshold_parse(text):
    t = Threshold.parse(text)
    assert 0 < t.min_effect < 1
    assert t.statistic == text.split(":")[0].strip()
    assert Threshold.parse(str(t)) == t


@pytest.mark.parametrize(
    "text", ["mean:2%", "median:2", "median:0%", "median:150%", "", "2%", "max:5%", "min:0%"]
)
def test_threshold_rejects(text):
    with pytest.raises(ValueError):
        Threshold.parse(text)


def test_summary_matches_numpy():
    data = [3.0, 1.0, 2.0, 10.0]
    s = stats.summary(data)
    assert s["median"] == pytest.approx(2.5)
    assert s["min"] == 1.0 and s["max"] == 10.0 and s["rounds"] == 4
    assert s["iqr_outliers"] == 1  # 10 lies past q3 + 1.5 iqr


@pytest.mark.parametrize(
    ("interval", "verdict", "basis"),
    [
        # The one-sided 95% bound decides "unchanged", though the interval reaches +2.5%.
        (
            Interval(1.0, 0.99, 1.025, 0.998, bound=1.015, bound_confidence=0.95),
            Verdict.UNCHANGED,
            stats.Basis(1.015, 1.02, 0.95),
        ),
        (
            Interval(1.0, 0.99, 1.025, 0.998, bound=1.021, bound_confidence=0.95),
            Verdict.INCONCLUSIVE,
            stats.Basis(1.021, 1.02, 0.95),
        ),
        (Interval(1.04, 1.031, 1.05, 0.998), Verdict.REGRESSION, stats.Basis(1.031, 1.005)),
        (Interval(0.95, 0.94, 0.96, 0.998), Verdict.IMPROVEMENT, stats.Basis(0.96, 0.995)),
        (Interval(5.0, 4.0, 6.0, 0.99, capped=True), Verdict.INCONCLUSIVE, stats.Basis(None, 1.02)),
    ],
)
def test_judge_names_the_number_each_verdict_rests_on(interval, verdict, basis):
    got_verdict, got_basis = stats.judge(interval, RULE)
    assert got_verdict is verdict is stats.classify(interval, RULE)
    assert got_basis.value == pytest.approx(basis.value)
    assert got_basis.limit == pytest.approx(basis.limit)
    assert got_basis.level == basis.level


def test_rounds_to_decide_shrinks_with_the_interval_and_needs_a_slowdown():
    wide = Interval(3.2, 0.446, 22.774, 0.98)
    narrow = Interval(3.2, 1.0, 10.24, 0.98)
    n_wide = stats.rounds_to_decide(wide, RULE, 3)
    n_narrow = stats.rounds_to_decide(narrow, RULE, 3)
    assert n_wide is not None and n_narrow is not None
    assert 3 < n_narrow < n_wide < 50
    # A ratio within the margin is never decided a regression, however many rounds.
    with pytest.raises(ValueError, match="within the margin"):
        stats.rounds_to_decide(Interval(1.004, 0.5, 2.0, 0.98), RULE, 3)
    # Barely past the margin under huge noise: beyond the rounds a case may have.
    assert stats.rounds_to_decide(Interval(1.006, 0.01, 100.0, 0.98), RULE, 3) is None


def test_the_min_statistic_is_the_fastest_half_of_the_rounds():
    rounds = [(1.0,), (1.0,), (4.0,), (9.0,)]
    assert stats.case_time(rounds, "min") == pytest.approx(1.0)
    # An odd arm's middle round counts half: (log 2 + log 8 / 2) / 1.5.
    assert stats.case_time([(2.0,), (8.0,), (100.0,)], "min") == pytest.approx(2 ** (5 / 3))
    # The ratio the interval reports is the ratio of the case times shown.
    cand = [(1.1,), (1.1,), (1.1,), (5.0,)]
    iv = stats.ratio_interval(
        rounds, cand, confidence=0.99, rng=np.random.default_rng(0), statistic="min"
    )
    assert iv.ratio == pytest.approx(stats.case_time(cand, "min") / stats.case_time(rounds, "min"))
    assert stats.ratio_estimate(rounds, cand, "min") == pytest.approx(1.1)


def test_the_degrees_of_freedom_are_yuens_for_the_trimmed_mean(rng):
    """The winsorized variances behind Yuen's degrees of freedom, checked against
    scipy's winsorize (the median statistic trims 20% from each end)."""
    from scipy.stats import mstats

    for n in (5, 8, 13):
        lb, lc = rng.normal(0, 1, n), rng.lognormal(0, 1, n)
        g = int(stats.TRIM * n)
        h = n - 2 * g

        def part(x, h=h):
            w = mstats.winsorize(x, limits=(stats.TRIM, stats.TRIM)).data
            return np.var(w, ddof=1) * (x.size - 1) / (h * (h - 1))

        db, dc = part(lb), part(lc)
        want = (db + dc) ** 2 / (db**2 / (h - 1) + dc**2 / (h - 1))
        assert stats._trimmed_df(lb, lc) == pytest.approx(want)


def test_on_real_shared_cpu_processes_the_fastest_half_decides_more_often(rng):
    """The study behind min:N% (docs/PYTEST.md), on the committed processes: at 12
    rounds a side the fastest half decides both an unchanged pair and a 10% plant far
    more often than the trimmed mean, and never calls an unchanged pair a regression."""
    import json

    from benchmarks import min_statistic_study as study

    calls = np.asarray(json.loads(study.DATA.read_text())["fastest_call"]["test_checksum"])
    assert calls.size == 58 and np.all(calls > 0)
    u_half, f_half, c_half = study.rates(calls, 12, "min", 40, rng)
    u_trim, f_trim, c_trim = study.rates(calls, 12, "median", 40, rng)
    assert f_half == 0 and f_trim == 0
    assert u_half >= 0.75 and c_half >= 0.75
    assert u_trim <= 0.6 and c_trim <= 0.6


def test_the_fastest_half_does_not_move_with_the_parity_of_the_arm():
    """Evenly spaced quantiles of one distribution: the fastest half's mean is about
    the same at every arm size (an odd arm's middle round counts half; kept whole, 5
    rounds against 6 would differ by 5% of the spread, more than a 0.5% margin)."""
    for n in range(4, 13):
        x = (np.arange(n) + 0.5) / n  # quantiles of U(0, 1): its lower half's mean is 0.25
        assert stats._centre(x, "min") == pytest.approx(0.25, abs=0.011), n


def test_under_min_an_arm_of_one_kept_round_has_the_fewest_degrees_of_freedom(rng):
    """Two rounds keep one under min: its spread is unknown, so the interval gets
    the widest t (df 1), however many rounds the other arm has."""
    wide = rng.normal(0.0, 0.05, 20)
    assert stats._trimmed_df(np.array([0.0, 0.1]), wide, "min") == 1.0
    assert stats._trimmed_df(np.array([0.0, 0.1, 0.05]), wide, "min") > 1.0
    # Equal arms: the half kept, Welch-combined (6 rounds keep 3: df 4).
    assert stats._equal_arms_df(6, "min") == 4.0 and stats._equal_arms_df(6) == 6.0
