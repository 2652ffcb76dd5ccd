"""Step detection (guard.store.changepoint): pure functions, plain sequences in, Steps out.

The store's use of it (indexes mapped past failed runs, the case's threshold as the
minimal effect) is tested in test_history.py. The comparison with ruptures and Apache
Otava is benchmarks/changepoint_study.py (docs/notes/changepoints.md), not a test.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from guard.store.changepoint import Step, detect_steps


def _noise(seed: int, n: int, cv: float = 0.01) -> np.ndarray:
    return 20e-6 * np.exp(np.random.default_rng(seed).normal(0.0, cv, n))


def test_planted_step_is_found_where_it_is() -> None:
    x = _noise(1, 40)
    x[25:] *= 1.05
    steps = detect_steps(x)
    assert [s.index for s in steps] == [25]
    assert steps[0].ratio == pytest.approx(1.05, rel=0.01)
    assert steps[0].kind == "slower" and steps[0].p_value < 1e-6


def test_two_steps_each_against_its_neighbours() -> None:
    x = _noise(2, 60)
    x[20:] *= 1.10
    x[40:] /= 1.20
    steps = detect_steps(x)
    assert [s.index for s in steps] == [20, 40]
    assert steps[0].ratio == pytest.approx(1.10, rel=0.01)
    assert steps[1].ratio == pytest.approx(1 / 1.20, rel=0.01)
    assert steps[1].kind == "faster"


def test_recent_step_three_runs_back() -> None:
    x = _noise(3, 20)
    x[17:] *= 1.05
    assert [s.index for s in detect_steps(x)] == [17]
    assert detect_steps(x[:19]) == ()  # two runs back: not yet told from noise


def test_no_false_step_on_flat_noise() -> None:
    """Fixed seeds: 300 flat series of 60 runs at 1% noise, no step at all."""
    found = [s for seed in range(300) for s in detect_steps(_noise(seed, 60))]
    assert found == []


def test_small_significant_shift_is_not_a_step() -> None:
    x = _noise(4, 60, cv=0.001)
    x[30:] *= 1.01  # clearly significant, but under the 2% threshold
    assert detect_steps(x) == ()
    assert [s.index for s in detect_steps(x, min_effect=0.005)] == [30]


def test_outlier_is_not_a_step() -> None:
    for where in (0, 1, 2, 10, 27, 28, 29):
        x = _noise(5, 30)
        x[where] *= 3.0
        assert detect_steps(x) == (), where


def test_detect_steps_edges() -> None:
    assert detect_steps([]) == ()
    assert detect_steps([1e-3] * 10) == ()
    steps = detect_steps([1.0, 1.0, 1.0, 2.0, 2.0, 2.0])
    assert [(s.index, s.before, s.after) for s in steps] == [(3, 1.0, 2.0)]
    with pytest.raises(ValueError, match="positive"):
        detect_steps([1.0, -1.0, 1.0])
    with pytest.raises(ValueError, match="alpha"):
        detect_steps([1.0] * 6, alpha=1.5)
    with pytest.raises(ValueError, match="min_size"):
        detect_steps([1.0] * 6, min_size=1)


def test_scale_invariance() -> None:
    """Seconds or milliseconds, fast kernel or slow: the same steps, same p-values."""
    x = _noise(6, 50)
    x[20:] *= 1.04
    x[35:] /= 1.08
    base = detect_steps(x)
    assert [s.index for s in base] == [20, 35]
    for c in (1e3, 1e6, 3.7e-4):
        scaled = detect_steps(x * c)
        assert [s.index for s in scaled] == [s.index for s in base]
        for a, b in zip(scaled, base, strict=True):
            assert a.before == pytest.approx(b.before * c, rel=1e-12)
            assert a.after == pytest.approx(b.after * c, rel=1e-12)
            assert a.p_value == pytest.approx(b.p_value, rel=1e-6)


def test_time_reversal_mirrors_the_steps() -> None:
    """Read backwards, a history has the same steps at mirrored places, before and
    after swapped: no direction of time or of effect is favoured."""
    x = _noise(7, 45)
    x[12:] *= 1.05
    x[30:] *= 0.90
    n = x.size
    forward = detect_steps(x)
    backward = detect_steps(x[::-1])
    assert [s.index for s in forward] == [12, 30]
    assert [n - s.index for s in reversed(backward)] == [12, 30]
    for f, b in zip(forward, reversed(backward), strict=True):
        assert (b.before, b.after) == pytest.approx((f.after, f.before), rel=1e-12)
        assert b.p_value == pytest.approx(f.p_value, rel=1e-6)


def test_plain_sequences_in_frozen_steps_out() -> None:
    x = [1.0] * 5 + [1.1] * 5
    for values in (x, tuple(x), np.array(x)):
        steps = detect_steps(values)
        assert isinstance(steps, tuple) and [s.index for s in steps] == [5]
        assert isinstance(steps[0], Step)
    with pytest.raises(dataclasses.FrozenInstanceError):
        steps[0].index = 3  # type: ignore[misc]


def test_history_uses_this_module() -> None:
    from guard.store import history

    assert history.detect_steps is detect_steps and history.Step is Step


# The H100 baselines' history of triton_flash/b2-h8-s2048-d128-causal (us), committed
# 2026-11-26..27: 14% faster at run 3 (308bc5ea12), back at run 7 (e1a18405b0). A single
# split cannot see it: every split mixes the two levels on one side.
H100_SERIES = [57.77, 58.0, 49.7, 49.46, 49.6, 49.59, 57.81, 57.82, 57.81, 57.95, 57.61,
               57.78, 58.26, 58.17, 58.01]  # fmt: skip


def test_the_real_dip_and_return_is_two_steps() -> None:
    steps = detect_steps(H100_SERIES)
    assert [s.index for s in steps] == [2, 6]
    assert [s.kind for s in steps] == ["faster", "slower"]
    assert steps[0].ratio == pytest.approx(49.6 / 57.885, rel=0.01)
    assert steps[1].ratio == pytest.approx(57.81 / 49.6, rel=0.01)


def test_a_regression_fixed_later_is_found_on_both_ends() -> None:
    rng = np.random.default_rng(5)
    level = np.r_[np.ones(5), np.full(5, 1.05), np.ones(5)]
    found = detect_steps((level * rng.lognormal(0, 0.005, level.size)).tolist())
    assert [s.index for s in found] == [5, 10]
    assert found[0].kind == "slower" and found[1].kind == "faster"
