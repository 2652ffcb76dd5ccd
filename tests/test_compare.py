"""Decisions over whole runs: what passes, what fails, and with which exit code."""

from __future__ import annotations

import dataclasses

import pytest
from conftest import make_case, make_env, make_run, synthetic_rounds

from guard.base import stats
from guard.base.errors import BadInput, ExitCode
from guard.base.stats import Threshold, Verdict
from guard.commands.main import main
from guard.decide.compare import Status, compare_runs, replace_cases
from guard.decide.outcome import CheckVerdict, Outcome
from guard.store import results
from guard.store.results import BUILD_FAILED, CRASHED, WRONG

SHAPES = [f"b1-h8-s{s}-d64-full" for s in (128, 256, 512, 1024, 2048, 4096, 8192)]


def suite_runs(rng, effects: dict[str, float] | None = None, status=None):
    effects = effects or {}
    base, cand = {}, {}
    for name in SHAPES:
        case = make_case(name)
        base[case] = synthetic_rounds(rng, 1e-4)
        cand[case] = synthetic_rounds(rng, 1e-4 * effects.get(name, 1.0))
        sdpa = make_case(name, "sdpa", gate=False)
        base[sdpa] = synthetic_rounds(rng, 1e-4)
        cand[sdpa] = synthetic_rounds(rng, 1e-4)
    return make_run(base, label="base"), make_run(cand, status=status, label="cand")


def test_aa_suite_passes(rng):
    for _ in range(10):
        comparison = compare_runs(*suite_runs(rng))
        assert comparison.exit_code is ExitCode.PASS, comparison.headline
        assert comparison.headline.startswith("PASS")


def test_planted_regression_fails_only_its_case(rng):
    comparison = compare_runs(*suite_runs(rng, {SHAPES[3]: 1.10}))
    assert comparison.exit_code is ExitCode.FAIL
    failing = [c.case_id for c in comparison.cases if c.fails]
    assert failing == [f"triton_flash/{SHAPES[3]}"]
    assert "1 significant regression" in comparison.headline


def test_ungated_regression_is_reported_but_passes(rng):
    base, cand = suite_runs(rng)
    slow = {
        c.case: synthetic_rounds(rng, 2e-4) if c.case.kernel == "sdpa" else c.rounds
        for c in cand.cases
    }
    comparison = compare_runs(base, make_run(slow))
    assert comparison.exit_code is ExitCode.PASS
    assert any(c.verdict is Verdict.REGRESSION and not c.gate for c in comparison.cases)


def test_wrong_results_fail_whatever_the_timing(rng):
    sdpa_id = f"sdpa/{SHAPES[0]}"  # even an ungated kernel
    comparison = compare_runs(*suite_runs(rng, status={sdpa_id: WRONG}))
    assert comparison.exit_code is ExitCode.FAIL
    [wrong] = [c for c in comparison.cases if c.status is Status.WRONG]
    assert wrong.case_id == sdpa_id
    assert "wrong results" in comparison.headline


@pytest.mark.parametrize("status", [CRASHED, BUILD_FAILED])
def test_gated_crash_is_infrastructure(rng, status):
    comparison = compare_runs(*suite_runs(rng, status={f"triton_flash/{SHAPES[1]}": status}))
    assert comparison.exit_code is ExitCode.INFRA
    assert comparison.headline.startswith("ERROR")


def test_regression_outranks_infrastructure(rng):
    comparison = compare_runs(
        *suite_runs(rng, {SHAPES[0]: 1.2}, status={f"triton_flash/{SHAPES[1]}": CRASHED})
    )
    assert comparison.exit_code is ExitCode.FAIL


def test_other_gpu_is_refused(rng):
    base, cand = suite_runs(rng)
    other = dataclasses.replace(
        cand, environment=make_env(gpu_name="NVIDIA L4", gpu_slug="nvidia-l4")
    )
    with pytest.raises(BadInput, match=r"base: environment.gpu_slug"):
        compare_runs(base, other)


def test_other_suite_is_refused(rng):
    base, cand = suite_runs(rng)
    with pytest.raises(BadInput, match="suite_name"):
        compare_runs(base, dataclasses.replace(cand, suite_name="other"))


def test_environment_difference_is_reported(rng):
    base, cand = suite_runs(rng)
    cand = dataclasses.replace(cand, environment=make_env(torch="2.12.0"))
    comparison = compare_runs(base, cand)
    assert ("torch", "2.11.0", "2.12.0") in comparison.environment_diff


def test_new_case_has_no_verdict_and_does_not_fail(rng):
    base, cand = suite_runs(rng)
    extra = make_case("b2-h8-s64-d64-full")
    cases = {c.case: c.rounds for c in cand.cases}
    cases[extra] = synthetic_rounds(rng, 1.0)
    comparison = compare_runs(base, make_run(cases))
    [new] = [c for c in comparison.cases if c.case_id == extra.id]
    assert new.status is Status.NEW and new.verdict is None
    assert comparison.exit_code is ExitCode.PASS


def test_changed_parameters_are_not_comparable(rng):
    base, cand = suite_runs(rng)
    first = cand.cases[0]
    changed = dataclasses.replace(first.case, dtype="bfloat16")
    cases = {(changed if c is first else c.case): c.rounds for c in cand.cases}
    comparison = compare_runs(base, make_run(cases))
    assert comparison.cases[0].status is Status.NOT_COMPARABLE


def test_confidence_adjusts_to_gated_cases(rng):
    comparison = compare_runs(*suite_runs(rng), alpha=0.01)
    assert comparison.confidence == pytest.approx(1 - 2 * 0.01 / len(SHAPES))


def test_confirmation_replaces_verdicts(rng):
    stored = compare_runs(*suite_runs(rng, {SHAPES[2]: 1.2}))
    assert stored.exit_code is ExitCode.FAIL
    paired = compare_runs(*suite_runs(rng))  # the paired rerun sees no slowdown
    confirmed = replace_cases(stored, paired)
    assert confirmed.exit_code is ExitCode.PASS
    assert "confirmed by a paired rerun" in confirmed.notes[-1]


def test_verdict_invariant_to_sample_order_and_scale(rng):
    base, cand = suite_runs(rng, {SHAPES[0]: 1.15})
    first = compare_runs(base, cand, seed=3)

    def transform(run, scale, reverse):
        cases = {}
        for c in run.cases:
            rounds = tuple(tuple(x * scale for x in (r[::-1] if reverse else r)) for r in c.rounds)
            cases[c.case] = rounds[::-1] if reverse else rounds
        return make_run(cases, label=run.label)

    second = compare_runs(transform(base, 1000.0, True), transform(cand, 1000.0, True), seed=3)
    assert [c.verdict for c in first.cases] == [c.verdict for c in second.cases]


def test_interval_too_wide_to_mean_anything_is_inconclusive_with_a_reason():
    case = make_case()
    base = make_run({case: ((5.0,), (0.5,))}, label="base")
    cand = make_run({case: ((0.5,), (0.5,))}, label="cand")
    [c] = compare_runs(base, cand, alpha=0.0005).cases
    assert c.verdict is Verdict.INCONCLUSIVE and c.interval is not None
    assert c.interval.high < float("inf") and "wider than a factor of 1000" in c.reason


# Round medians (seconds) of three rounds that swing by 3x: a candidate about 2.6x slower
# whose interval over three rounds still reaches below 1 (as from a busy machine).
NOISY_BASE = (1e-4, 0.6e-4, 2e-4)
NOISY_SLOW = (5e-4, 1.2e-4, 3.4e-4)


def noisy_runs(n_rounds: int, base=NOISY_BASE, cand=NOISY_SLOW):
    """Runs of one gated case with ``n_rounds`` rounds, cycling through the medians."""
    case = make_case()

    def rounds(meds):
        return tuple((meds[i % len(meds)],) * 3 for i in range(n_rounds))

    return make_run({case: rounds(base)}, label="r1"), make_run({case: rounds(cand)}, label="slow")


def test_inconclusive_far_beyond_the_threshold_is_no_verdict_with_the_rounds_to_decide():
    comparison = compare_runs(*noisy_runs(3))
    [case] = comparison.cases
    assert case.verdict is Verdict.INCONCLUSIVE and case.interval is not None
    assert case.interval.low < 1.0 and case.ratio > 2.0  # far off, yet not significant
    assert comparison.verdict is CheckVerdict.NO_VERDICT
    assert comparison.exit_code is ExitCode.BAD_INPUT  # exit 2, as every NO VERDICT
    assert comparison.outcome().exit_code is ExitCode.BAD_INPUT
    assert comparison.headline.startswith("NO VERDICT: 1 gated case(s) inconclusive")
    assert "about 9 rounds per arm would decide it (3 now)" in comparison.headline
    assert "about 9 rounds per arm" in case.reason
    # The estimate holds: the same rounds measured 9 times each decide the regression.
    assert compare_runs(*noisy_runs(9)).verdict is CheckVerdict.REGRESSION


def test_inconclusive_near_one_still_passes():
    # As noisy, but no slowdown in the estimate: nothing suggests a regression.
    comparison = compare_runs(*noisy_runs(3, cand=(1.1e-4, 0.5e-4, 2.1e-4)))
    [case] = comparison.cases
    assert case.verdict is Verdict.INCONCLUSIVE and not case.unresolved
    assert comparison.exit_code is ExitCode.PASS
    assert comparison.headline == "PASS: no significant regression (1 inconclusive)"


def test_cli_compare_of_a_slow_noisy_pair_exits_two(tmp_path, capsys):
    paths = []
    for run in noisy_runs(3):
        paths.append(tmp_path / f"{run.label}.json")
        results.save(run, paths[-1])
    assert main(["compare", *map(str, paths)]) == 2
    out = capsys.readouterr().out
    assert "NO VERDICT" in out and "PASS" not in out
    assert "rounds per arm would decide it" in out


def test_every_case_carries_the_number_its_verdict_rests_on(rng):
    comparison = compare_runs(*suite_runs(rng, {SHAPES[3]: 1.10}))
    by_verdict = {c.verdict: c.outcome() for c in comparison.cases if c.gate}
    unchanged, regression = by_verdict[Verdict.UNCHANGED], by_verdict[Verdict.REGRESSION]
    # Against a stored baseline the drift (3%) is added: unchanged below 1.05 ...
    assert unchanged.bound is not None and unchanged.bound < unchanged.limit == pytest.approx(1.05)
    assert unchanged.bound_level == pytest.approx(0.95)
    assert unchanged.verdict_text == f"unchanged: ≤ {unchanged.bound:.3f}x (95% bound) < 1.05"
    # ... and a regression's interval clears 1.03.
    assert regression.bound == pytest.approx(regression.low) and regression.limit == 1.03
    assert regression.verdict_text == f"regression: ≥ {regression.low:.3f}x > 1.03"
    # The bound survives the outcome file.
    again = Outcome.from_json(comparison.outcome().to_json())
    assert {c.verdict_text for c in again.cases} >= {unchanged.verdict_text}
    # A control (not gated) shows its ratio, never a verdict's basis.
    control = next(c.outcome() for c in comparison.cases if not c.gate)
    assert control.verdict_text == "control (not gated)" and control.bound is None


def test_rounds_of_another_statistic_are_not_comparable(rng):
    """Round medians against fastest samples would compare unlike numbers."""
    base, cand = suite_runs(rng)
    first = cand.cases[0]
    fastest = dataclasses.replace(first.case, threshold=Threshold.parse("min:2%"))
    cases = {(fastest if c is first else c.case): c.rounds for c in cand.cases}
    comparison = compare_runs(base, make_run(cases))
    [case] = [c for c in comparison.cases if c.case_id == first.id]
    assert case.status is Status.NOT_COMPARABLE
    assert "the baseline's rounds stand as their median" in case.reason
    assert "min:2%" in case.reason


def test_under_min_the_times_shown_give_the_ratio_shown(rng):
    """A min:N% case shows each side's fastest half, and the ratio is theirs."""
    case = make_case(threshold="min:5%")
    base = tuple((float(x),) for x in rng.uniform(1.0, 1.5, 9))
    cand = tuple((float(x) * 1.07,) for x in rng.uniform(1.0, 1.5, 8))
    [cc] = compare_runs(make_run({case: base}), make_run({case: cand})).cases
    assert cc.status is Status.COMPARED and cc.interval is not None
    assert cc.candidate_median / cc.baseline_median == pytest.approx(cc.interval.ratio)
    assert cc.baseline_median == pytest.approx(stats.case_time(base, "min"))
    assert cc.baseline_median < stats.case_time(base)  # the fastest half, not the trimmed mean


def test_the_headline_counts_what_it_names():
    """Three unresolved cases: the headline counts three, names the first, and says the
    rest are in the table (it named one of "3 gated case(s)" before)."""
    cases = [make_case(name=f"b1-h8-s512-d64-full-{i}") for i in range(3)]

    def rounds(meds):
        return tuple((meds[i % len(meds)],) * 3 for i in range(3))

    base = make_run({c: rounds(NOISY_BASE) for c in cases}, label="r1")
    slow = make_run({c: rounds(NOISY_SLOW) for c in cases}, label="slow")
    comparison = compare_runs(base, slow)
    assert comparison.verdict is CheckVerdict.NO_VERDICT
    assert comparison.headline.startswith("NO VERDICT: 3 gated case(s) inconclusive")
    assert "(and 2 more, in the table)" in comparison.headline
