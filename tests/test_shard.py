"""Shards: the balancer (pure), the flags, and ``guard merge`` deciding the union of the
shards' cases exactly as an unsharded check decides them, at the family alpha."""

from __future__ import annotations

import json
import random
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from report_data import case, env, make_run

from guard.base import shard
from guard.base.errors import BadInput, InfraError
from guard.decide import merge
from guard.decide.compare import compare_runs
from guard.decide.outcome import Outcome, OutcomeFileError, ShardInfo
from guard.store.results import OK, CaseResult, RunResult
from guard.store.suite import TimingPlan

# ----------------------------------------------------------------- the balancer


def test_parse_shard_is_one_based_and_names_what_is_wrong() -> None:
    assert shard.parse_shard("1/4") == shard.ShardSpec(1, 4)
    assert str(shard.parse_shard(" 4 / 4 ")) == "4/4"
    for bad, why in (("0/4", "count from 1"), ("5/4", "count from 1"), ("1/0", "count"),
                     ("1/65", "count"), ("a/b", "I/N"), ("", "I/N"), ("1-4", "I/N")):  # fmt: skip
        with pytest.raises(ValueError, match=why):
            shard.parse_shard(bad)


def test_visible_gpus_counts_among_the_gpus_this_process_sees() -> None:
    # A runner confined to GPUs 2 and 3 that asks for two gets 2 and 3, not 0 and 1.
    assert shard.visible_gpus(("0", "1"), "2,3") == ("2", "3")
    assert shard.visible_gpus(("1",), " 5 , 7 ") == ("7",)
    assert shard.visible_gpus(("0",), "GPU-8c1f,GPU-22aa") == ("GPU-8c1f",)
    assert shard.visible_gpus(("0", "1"), None) == ("0", "1")
    assert shard.visible_gpus(("0", "1"), "") == ("0", "1")
    with pytest.raises(ValueError, match="not among CUDA_VISIBLE_DEVICES"):
        shard.visible_gpus(("0", "2"), "4,5")


def test_parse_gpus() -> None:
    assert shard.parse_gpus("2", 8) == ("0", "1")
    assert shard.parse_gpus("all", 3) == ("0", "1", "2")
    assert shard.parse_gpus("0,2", 4) == ("0", "2")
    assert shard.parse_gpus("2", None) == ("0", "1")  # a CPU run: a count only
    for bad, available in (("3", 2), ("all", None), ("0,0", 4), ("0,4", 4), ("x", 2), ("0", 2)):
        with pytest.raises(ValueError):
            shard.parse_gpus(bad, available)


def _ids(n: int) -> list[str]:
    return [f"k{i % 3}/w{i}" for i in range(n)]


def test_lpt_balances_by_time_not_by_count() -> None:
    rng = random.Random()
    ids = _ids(40)
    costs = {c: rng.uniform(0.5, 2.0) for c in ids}
    heavy = ids[rng.randrange(len(ids))]
    costs[heavy] = sum(costs.values()) / 2  # one case as long as half the rest
    shards = shard.balance(ids, costs, 2)
    assert sorted(c for s in shards for c in s) == sorted(ids)  # a partition
    assert not set(shards[0]) & set(shards[1])
    mine = next(s for s in shards if heavy in s)
    assert len(mine) < len(ids) / 2  # by time: the heavy case's shard holds fewer cases
    loads = [sum(costs[c] for c in s) for s in shards]
    assert max(loads) <= (sum(loads) / 2) * 4 / 3 + max(costs.values())
    for s in shards:  # each in the suite's order
        assert list(s) == [c for c in ids if c in s]


def test_the_split_is_the_same_on_every_machine() -> None:
    ids = _ids(31)
    costs = {c: float(1 + i % 5) for i, c in enumerate(ids)}  # many ties
    one = shard.balance(ids, costs, 4)
    shuffled = dict(sorted(costs.items(), key=lambda _: random.random()))
    assert shard.balance(ids, shuffled, 4) == one
    assert [shard.shard_of(ids, costs, shard.ShardSpec(i, 4)) for i in range(1, 5)] == list(one)


def test_costs_floor_at_the_sample_and_fill_unknown_cases_with_the_mean() -> None:
    per_call = {"a": 1e-6, "b": 0.02, "c": None}
    costs = shard.case_costs(
        ["a", "b", "c", "d"], per_call, rounds=6, samples_per_round=25, sample_target_s=1e-3
    )
    assert costs["a"] == pytest.approx(6 * 25 * 1e-3)  # a sample is at least 1 ms
    assert costs["b"] == pytest.approx(6 * 25 * 0.02)
    assert costs["c"] == costs["d"] == pytest.approx((costs["a"] + costs["b"]) / 2)


# ----------------------------------------------------------------- merging


def _runs(n: int, seed: int) -> tuple[RunResult, RunResult]:
    """n gated cases, 6 rounds a side, fresh random times; a few regress by 8%, one by
    a little under what an unadjusted level would call."""
    rng = np.random.default_rng(seed)
    plan = TimingPlan()
    base_cases, cand_cases = [], []
    slow = set(rng.choice(n, size=3, replace=False).tolist())
    template = case("b1-h8-s512-d64-full", "triton_flash")
    for i in range(n):
        c = replace(template, name=f"w{i}", gate=True)
        t = float(rng.uniform(1e-5, 1e-3))
        factor = 1.08 if i in slow else 1.0 + float(rng.normal(0, 0.004))

        def rounds(scale: float, t: float = t) -> tuple[tuple[float, ...], ...]:
            out = []
            for _ in range(plan.rounds):
                drift = rng.lognormal(0, 0.006)  # a round's own offset
                out.append(tuple(float(x) for x in t * scale * drift * rng.lognormal(0, 0.01, 25)))
            return tuple(out)

        base_cases.append(CaseResult(c, OK, rounds=rounds(1.0), method="cuda-graph"))
        cand_cases.append(CaseResult(c, OK, rounds=rounds(factor), method="cuda-graph"))
    base = replace(make_run(0, label="base", seed=seed), cases=tuple(base_cases))
    cand = replace(make_run(1, label="head", seed=seed + 1), cases=tuple(cand_cases))
    return base, cand


def _shard_outcomes(
    base: RunResult, cand: RunResult, count: int, head: str = "h" * 40
) -> list[tuple[Outcome, str]]:
    ids = [c.id for c in cand.cases]
    costs = {c: random.uniform(1, 3) for c in ids}
    positions = {c: i for i, c in enumerate(ids)}
    out = []
    for i, share in enumerate(shard.balance(ids, costs, count), start=1):
        sb = replace(base, cases=tuple(c for c in base.cases if c.id in share))
        sc = replace(cand, cases=tuple(c for c in cand.cases if c.id in share))
        comp = compare_runs(sb, sc, plan=TimingPlan(), paired=True, family=len(ids))
        info = ShardInfo(
            i, count, "b" * 40, head, cand.suite_name, cand.suite_hash, share,
            merge.evidence(comp, positions, paired=True, use_fingerprints=True),
        )  # fmt: skip
        text = json.dumps(replace(comp.outcome(), shard=info).to_json())  # through a file
        out.append((Outcome.from_json(json.loads(text), f"shard-{i}.json"), f"shard-{i}.json"))
    return out


@pytest.mark.parametrize("count", [2, 3])
def test_merged_shards_decide_as_the_unsharded_check(count: int) -> None:
    base, cand = _runs(12, random.randrange(1 << 30))
    whole = compare_runs(base, cand, plan=TimingPlan(), paired=True)
    shards = _shard_outcomes(base, cand, count)
    merged = merge.merge(list(reversed(shards))).comparison  # any order of files
    assert merged.confidence == whole.confidence  # the family is the union's
    assert [c.case_id for c in merged.cases] == [c.case_id for c in whole.cases]
    for m, w in zip(merged.cases, whole.cases, strict=True):
        assert (m.verdict, m.status) == (w.verdict, w.status), m.case_id
        assert m.interval == w.interval
    assert merged.decision == whole.decision
    assert merge.merged_outcome(merge.merge(shards)).shard is None


def test_a_shard_decided_alone_would_use_a_laxer_level() -> None:
    base, cand = _runs(12, random.randrange(1 << 30))
    (first, _), _ = _shard_outcomes(base, cand, 2)
    alone = compare_runs(
        *(merge._read(first, "x").baseline, merge._read(first, "x").candidate), paired=True
    )
    merged = merge.merge(_shard_outcomes(base, cand, 2)).comparison
    assert alone.confidence < merged.confidence  # per shard: alpha spent twice


def test_a_missing_shard_is_an_infrastructure_failure() -> None:
    base, cand = _runs(6, random.randrange(1 << 30))
    shards = _shard_outcomes(base, cand, 3)
    with pytest.raises(InfraError, match="2/3 missing"):
        merge.merge([shards[0], shards[2]])


def test_a_crashed_shard_is_an_infrastructure_failure() -> None:
    base, cand = _runs(6, random.randrange(1 << 30))
    shards = _shard_outcomes(base, cand, 2)
    outcome, where = shards[1]
    assert outcome.shard is not None
    crashed = replace(outcome, shard=replace(outcome.shard, evidence=None))
    with pytest.raises(InfraError, match="shard 2/2 measured nothing"):
        merge.merge([shards[0], (crashed, where)])


@pytest.mark.parametrize("field", ["base", "head", "suite_hash", "suite_name", "count"])
def test_shards_of_another_check_are_refused_naming_the_field(field: str) -> None:
    base, cand = _runs(6, random.randrange(1 << 30))
    shards = _shard_outcomes(base, cand, 2)
    outcome, where = shards[1]
    assert outcome.shard is not None
    value: object = 3 if field == "count" else "other"
    other = replace(outcome, shard=replace(outcome.shard, **{field: value}))
    with pytest.raises(BadInput, match=rf"shard\.{field}"):
        merge.merge([shards[0], (other, where)])


def test_shards_that_split_the_suite_differently_are_an_infrastructure_failure() -> None:
    base, cand = _runs(6, random.randrange(1 << 30))
    shards = _shard_outcomes(base, cand, 2)
    outcome, where = shards[1]
    assert outcome.shard is not None and outcome.shard.evidence is not None
    evidence = json.loads(json.dumps(outcome.shard.evidence))
    evidence["candidate"]["guard"]["cases"].pop()  # a case no shard measured
    short = replace(outcome, shard=replace(outcome.shard, evidence=evidence))
    with pytest.raises(InfraError, match="hold 5 of the suite's 6 cases"):
        merge.merge([shards[0], (short, where)])


def _with_evidence(shard: tuple[Outcome, str], **edit: object) -> tuple[Outcome, str]:
    outcome, where = shard
    assert outcome.shard is not None and outcome.shard.evidence is not None
    evidence = json.loads(json.dumps(outcome.shard.evidence))
    for key, value in edit.items():
        if key.startswith("plan_"):
            evidence["plan"][key[5:]] = value
        elif value is None:
            evidence.pop(key)
        else:
            evidence[key] = value
    return replace(outcome, shard=replace(outcome.shard, evidence=evidence)), where


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        ({"alpha": 0.999}, "alpha"),  # an unchanged tree failed at this alpha
        ({"alpha": 1e-9}, "alpha"),
        ({"plan_alpha": 0.999}, "plan.alpha"),
        ({"plan_margin": float("nan")}, "plan.margin"),
        ({"plan_margin": float("inf")}, "plan.margin"),
        ({"plan_margin": -0.01}, "plan.margin"),
        ({"plan_margin": "0.005"}, "plan.margin"),
        ({"plan_max_rounds": 10**18}, "plan.max_rounds"),
        ({"plan_sneaky": 1}, "plan"),
    ],
)
def test_merge_holds_a_shards_numbers_to_the_suites_bounds(
    edit: dict[str, object], field: str
) -> None:
    base, cand = _runs(6, random.randrange(1 << 30))
    shards = [_with_evidence(s, **edit) for s in _shard_outcomes(base, cand, 2)]
    with pytest.raises(BadInput, match=rf"shard\.evidence\.{re.escape(field)}"):
        merge.merge(shards)


def test_a_shard_count_beyond_the_limit_is_refused_at_once(tmp_path: Path) -> None:
    base, cand = _runs(4, random.randrange(1 << 30))
    outcome, where = _shard_outcomes(base, cand, 2)[0]
    data = outcome.to_json()
    data["shard"]["count"] = 10**18  # a list of the missing ones took 7.9 GB
    with pytest.raises(OutcomeFileError, match="count: not an integer from 1 to 64"):
        Outcome.from_json(data, where)


def test_shards_that_do_not_say_how_many_cases_the_suite_has_are_refused() -> None:
    # Without the count a shard that lost its share would pass on what the others hold.
    base, cand = _runs(4, random.randrange(1 << 30))
    shards = [_with_evidence(s, suite_cases=None) for s in _shard_outcomes(base, cand, 2)]
    with pytest.raises(BadInput, match="suite_cases: not a positive integer"):
        merge.merge(shards)


def test_a_shard_with_no_case_of_its_share_is_an_infrastructure_failure() -> None:
    base, cand = _runs(4, random.randrange(1 << 30))
    first, second = _shard_outcomes(base, cand, 2)
    outcome, where = second
    assert outcome.shard is not None and outcome.shard.evidence is not None
    evidence = json.loads(json.dumps(outcome.shard.evidence))
    evidence["candidate"]["guard"]["cases"] = []
    evidence["baseline"]["guard"]["cases"] = []
    empty = replace(outcome, shard=replace(outcome.shard, evidence=evidence))
    with pytest.raises(InfraError, match="the check is incomplete"):
        merge.merge([first, (empty, where)])


def test_a_shard_given_twice_is_refused() -> None:
    base, cand = _runs(6, random.randrange(1 << 30))
    shards = _shard_outcomes(base, cand, 2)
    with pytest.raises(BadInput, match=r"shard\.index"):
        merge.merge([shards[0], shards[0], shards[1]])


def test_outcome_schema_3_round_trips_and_newer_is_refused(tmp_path: Path) -> None:
    base, cand = _runs(4, random.randrange(1 << 30))
    outcome, _ = _shard_outcomes(base, cand, 2)[0]
    data = outcome.to_json()
    assert data["schema_version"] == 3 and data["shard"]["index"] == 1
    assert Outcome.from_json(data) == outcome
    with pytest.raises(OutcomeFileError, match="schema_version"):
        Outcome.from_json({**data, "schema_version": 4})
    old = {k: v for k, v in data.items() if k != "shard"}
    assert Outcome.from_json({**old, "schema_version": 2}).shard is None
    assert env().gpu_slug  # the synthetic runs' GPU


def test_the_comment_says_when_an_outcome_is_one_shard_alone() -> None:
    from guard.report import comment

    base, cand = _runs(4, random.randrange(1 << 30))
    shards = _shard_outcomes(base, cand, 2)
    alone = replace(shards[0][0], gpu="h100")
    assert "h100 (shard 1/2 only)" in comment.markdown([alone])
    merged = replace(merge.merged_outcome(merge.merge(shards)), gpu="h100")
    [heading] = [x for x in comment.markdown([merged]).splitlines() if x.startswith("### ")]
    assert heading.startswith("### ") and "h100" in heading and "shard" not in heading


def test_a_pinned_worker_reads_its_own_gpus_clocks(monkeypatch: pytest.MonkeyPatch) -> None:
    # nvidia-smi ignores CUDA_VISIBLE_DEVICES: a worker pinned to GPU 3 must ask for GPU 3.
    import subprocess

    from guard.measure import env as guard_env

    asked: list[list[str]] = []

    def fake_run(args: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        asked.append(args)
        return subprocess.CompletedProcess(args, 0, stdout="1980, 2619, 41, 120.5, 0x0\n")

    monkeypatch.setattr(guard_env.shutil, "which", lambda _: "/usr/bin/nvidia-smi")
    monkeypatch.setattr(guard_env.subprocess, "run", fake_run)
    gpu = str(random.randrange(1, 8))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", f"{gpu},0")
    assert guard_env.gpu_state()["sm_clock_mhz"] == 1980.0
    assert asked[-1][asked[-1].index("-i") + 1] == gpu
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    guard_env.gpu_state()
    assert asked[-1][asked[-1].index("-i") + 1] == "0"
    assert guard_env.smi_gpu_id("GPU-5d2c,GPU-77aa") == "GPU-5d2c"
    assert guard_env.smi_gpu_id("MIG-1/2/3") == "0"  # not an nvidia-smi -i id: the first GPU


# ----------------------------------------------------------------- cases the baseline lacks


def test_a_case_the_baseline_lacks_is_estimated_from_its_work() -> None:
    per_call = {"a": 0.002, "b": 0.008, "c": None}  # 1e-15 s and 2e-15 s per unit of work
    work = {"a": 2e12, "b": 4e12, "c": 3e12, "d": 1e13}
    costs = shard.case_costs(
        ["a", "b", "c", "d"], per_call, rounds=2, samples_per_round=10, sample_target_s=1e-3,
        work=work,
    )  # fmt: skip
    rate = 2e-15  # the median of the two known rates (the upper one of two)
    assert costs["c"] == pytest.approx(2 * 10 * 3e12 * rate)
    assert costs["d"] == pytest.approx(2 * 10 * 1e13 * rate)
    # Nothing known: the default rate, so a long case still weighs more than a short one.
    alone = shard.case_costs(
        ["c", "d"], {}, rounds=2, samples_per_round=10, sample_target_s=1e-3, work=work
    )
    assert alone["d"] == pytest.approx(2 * 10 * 1e13 * shard.DEFAULT_S_PER_WORK)
    assert alone["d"] > alone["c"]
    # The rate comes from every measured case, in this suite or not: a baseline of
    # another suite prices this one.
    other = shard.case_costs(
        ["c", "d"], per_call, rounds=2, samples_per_round=10, sample_target_s=1e-3, work=work
    )
    assert other["d"] == pytest.approx(costs["d"])


def test_the_full_suite_without_its_baseline_splits_by_flops_not_by_count() -> None:
    """Two shards of suites/full.yaml with a baseline of the default suite only: with
    each case's time proportional to its FLOPs (floored at the sample target), the
    slower shard carries at most 2% more than half the work (by count: 5.5%)."""
    from conftest import ROOT

    from guard.ops import shards as ops_shards
    from guard.store.suite import flops, load_suite

    suite = load_suite(ROOT / "suites" / "full.yaml")
    plan = suite.timing
    costs = ops_shards.shard_costs(suite, None)
    true = {
        c.id: plan.rounds
        * (plan.samples_per_round * max(flops(c.shape, c.causal) * 3e-15, 1e-3) + 0.0)
        for c in suite.cases
    }
    ids = [c.id for c in suite.cases]
    two = shard.balance(ids, costs, 2)
    assert shard.makespan(true, two) <= 1.02 * sum(true.values()) / 2
    assert (
        costs["triton_flash/b1-h8-s16384-d128-causal"] > costs["triton_flash/b1-h8-s128-d64-full"]
    )
