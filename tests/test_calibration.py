"""The published calibration figures (docs/CALIBRATION.md) still hold for the current
decision rule, re-run over the committed raw GPU data. A change to guard.base.stats that
makes the guard noisier or blinder fails here."""

from __future__ import annotations

import gzip
import json
import struct
from pathlib import Path

import numpy as np
import pytest

from benchmarks import calibrate
from benchmarks import calibration_study as cal
from guard.base.stats import Rule
from guard.store.suite import load_suite

DATA = Path(__file__).resolve().parent.parent / "docs" / "data"
H100 = DATA / "h100-2026-11-26"
H200 = DATA / "h200-2026-11-26"
# Pools of fresh-process rounds, named by GPU, sampling mode and start time (UTC).
POOLS = {
    "h100-bursts-0151": H100 / "calibration-bursts-0151.json.gz",  # 56 rounds
    "h100-bursts-0605": H100 / "calibration-bursts-0605.json.gz",  # 28 rounds, another machine
    "h200-bursts-0136": H200 / "calibration-bursts-0136.json.gz",  # 61 rounds
    # The suite's "sustained" load mode; 09:00 has the Gluon dispatch on (the four
    # S >= 1024 shapes run it).
    "h100-sustained-0707": H100 / "calibration-sustained-0707.json.gz",  # 23 rounds
    "h100-sustained-0900": H100 / "calibration-sustained-0900.json.gz",  # 25 rounds
    # 28 rounds, hd-64 causal on the overlapped Gluon kernel: enough for the PR check's
    # extension to 14 rounds per arm.
    "h100-sustained-1058": H100 / "calibration-sustained-1058.json.gz",
    # 46 rounds, the same kernels as 10:58: the full plan (to 20 per arm), and an
    # across-machine A/A check with identical kernels.
    "h100-sustained-1119": H100 / "calibration-sustained-1119.json.gz",
    # 42 rounds, hd-128 non-causal on the persistent Gluon kernel.
    "h100-sustained-1401": H100 / "calibration-sustained-1401.json.gz",
    # An H200 in sustained mode (700 W cap), 47 rounds, the kernels of the 14:01 pool.
    "h200-sustained-1525": H200 / "calibration-sustained-1525.json.gz",
}
# Published lower bounds (docs/CALIBRATION.md), less slack for the smaller re-run; the
# +2% goal is for S >= 512 (the 128-token shape is launch-bound: 1-1.8% noise). None:
# a pool too small for the +2% goal (23-25 rounds cap the extension at 11-12 per arm).
MIN_POWER_PLUS2_LONG = {
    "h100-bursts-0151": 0.85,
    "h200-bursts-0136": 0.80,  # one check short of the goal there
    "h100-sustained-0707": None,
    "h100-sustained-0900": None,
    "h100-sustained-1058": 0.85,
    "h100-sustained-1119": 0.85,
    "h100-sustained-1401": 0.85,
    "h200-sustained-1525": 0.80,  # 0.87 at (1, 16, 1024, 64) over 100 checks
}
SHORT = "b1-h8-s128-d64-full"


def _pool(name: str):
    doc = calibrate.load_pool(POOLS[name])
    return [r["samples"] for r in doc["rounds"]], list(doc["plan"]["workloads"])


def _cuda_samples(rng, calls: int, tick_ns: int) -> list[float]:
    """Samples as measure.Prepared takes them: an event pair's float32 milliseconds (a
    whole number of ticks) times 1e-3, over the calls of one replay."""
    ticks = rng.integers(20_000, 40_000, size=25)
    ms = [struct.unpack("<f", struct.pack("<f", int(t) * tick_ns / 1e6))[0] for t in ticks]
    return [m * 1e-3 / calls for m in ms]


def test_the_committed_pools_are_stored_compact_and_read_back_whole():
    for path in POOLS.values():
        with gzip.open(path, "rt") as fh:
            raw = json.load(fh)
        assert raw["schema_version"] == calibrate.SCHEMA_VERSION, path
        arms = [a for r in raw["rounds"] for w in r["samples"].values() for a in w.values()]
        assert all(isinstance(a, dict) for a in arms), path  # every arm CUDA-timed
        doc = calibrate.load_pool(path)
        for r in doc["rounds"]:
            for w in r["samples"].values():
                for xs in w.values():
                    assert len(xs) == doc["samples_per_round"] and min(xs) > 0


def test_a_pool_round_trips_to_the_bit(tmp_path):
    rng = np.random.default_rng(5)
    shapes = [(1, 32), (17, 32), (45, 8), (9_999, 2)]  # calls, tick in ns
    cuda = {f"{calls}x{tick}": _cuda_samples(rng, calls, tick) for calls, tick in shapes}
    cpu = {"perf_counter": list(rng.uniform(1e-5, 2e-5, size=25))}
    doc = {
        "schema_version": 1,
        "plan": {"workloads": {"w": {}}},
        "samples_per_round": 25,
        "rounds": [{"round": 0, "samples": {"w": {**cuda, **cpu}}}],
    }
    path = tmp_path / "pool.json.gz"
    calibrate.write_pool(path, doc)
    with gzip.open(path, "rt") as fh:
        stored = json.load(fh)["rounds"][0]["samples"]["w"]
    assert all(isinstance(stored[k], dict) for k in cuda)
    assert stored["perf_counter"] == cpu["perf_counter"]  # not CUDA-timed: kept as floats
    back = calibrate.load_pool(path)
    assert back["rounds"][0]["samples"]["w"] == {**cuda, **cpu}
    assert back["schema_version"] == calibrate.SCHEMA_VERSION
    again = tmp_path / "again.json.gz"
    calibrate.write_pool(again, back)
    assert again.read_bytes() == path.read_bytes()  # the same pool, the same bytes


def _one_arm(stored) -> dict:
    return {"rounds": [{"samples": {"w": {"base": stored}}}]}


@pytest.mark.parametrize(
    "change",
    [
        {"schema_version": 3},
        {"schema_version": None},
        _one_arm({"calls": 1, "tick_ns": 32}),
        _one_arm({"calls": 1, "tick_ns": 32, "delta_ticks": [1], "unit": "ns"}),
        _one_arm({"calls": 0, "tick_ns": 32, "delta_ticks": [1]}),
        _one_arm({"calls": 1, "tick_ns": 1.5, "delta_ticks": [1]}),
        _one_arm(["1e-5"]),
        {"schema_version": 1, **_one_arm({"calls": 1, "tick_ns": 32, "delta_ticks": [1]})},
    ],
)
def test_a_pool_the_reader_does_not_know_is_refused(tmp_path, change):
    doc = {"schema_version": 2, **_one_arm([1e-5]), **change}
    path = tmp_path / "pool.json.gz"
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    with pytest.raises(ValueError, match=r"pool\.json\.gz"):
        calibrate.load_pool(path)


@pytest.mark.parametrize("gpu", list(MIN_POWER_PLUS2_LONG))
def test_paired_rates_hold(gpu):
    """The PR check: both trees on one machine, 6 rounds each growing to 20, or to what
    the pool holds (14 in the 28-round pool, 11-12 in the 23-25-round ones)."""
    plan = load_suite("suites/default.yaml").timing
    rounds, workloads = _pool(gpu)
    rule = Rule(min_effect=0.02, margin=plan.margin)
    reserve = min(14, len(rounds) // 2 - plan.rounds)
    checks = cal.make_checks(len(rounds), plan.rounds, reserve, 25, np.random.default_rng(7))
    rates = cal.evaluate(
        rounds, workloads, ["plus2", "plus5"], cal.rule_guard(rule, plan.alpha), checks, "g", 7
    )
    assert rates.false_alarm == 0.0
    assert rates.aa_inconclusive <= 0.05  # at most 1 gated case in 20 left open
    assert rates.min_power("plus5") >= 0.96
    floor = MIN_POWER_PLUS2_LONG[gpu]
    if floor is not None:
        long = {w: p for w, p in rates.power["plus2"].items() if w != SHORT}
        assert min(long.values()) >= floor


@pytest.mark.parametrize(
    "pair",
    [
        ("h100-bursts-0151", "h100-bursts-0605"),
        ("h100-sustained-1119", "h100-sustained-1058"),
        # One workload's kernel differs (hd-128 full: per-tile, then the persistent
        # kernel, about 3% faster), within the drift allowance both ways.
        ("h100-sustained-1401", "h100-sustained-1119"),
    ],
)
def test_a_stored_baseline_from_another_machine_never_fails_an_unchanged_tree(pair):
    """Baseline from one H100 pool, candidate from another machine: the drift allowance."""
    plan = load_suite("suites/default.yaml").timing
    base, workloads = _pool(pair[0])
    other, _ = _pool(pair[1])
    rule = Rule(min_effect=0.02 + plan.drift, margin=plan.drift)
    checks = cal.make_checks_across(
        len(base), len(other), plan.rounds, 14, 25, np.random.default_rng(3), 20
    )
    rates = cal.evaluate(
        base + other, workloads, ["plus10"], cal.rule_guard(rule, plan.alpha), checks, "s", 3
    )
    assert rates.false_alarm == 0.0
    assert rates.min_power("plus10") >= 0.9  # beyond the drift, still caught


def test_anchor_rules_are_as_published():
    rounds, workloads = _pool("h100-bursts-0151")
    checks = cal.make_checks(len(rounds), 6, 0, 20, np.random.default_rng(3))
    mw = cal.evaluate(rounds, workloads, ["plus2"], cal.rule_mann_whitney, checks, "mw")
    pb = cal.evaluate(rounds, workloads, ["plus5"], cal.rule_pytest_benchmark, checks, "pb")
    assert mw.false_alarm >= 0.3  # pooled-sample U test ignores process-to-process noise
    assert pb.min_power("plus5") <= 0.5  # a fixed 5% median threshold misses most +5%
