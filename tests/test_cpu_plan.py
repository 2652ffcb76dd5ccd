"""On a CPU the suite's ``cpu_timing`` plan decides, not its GPU ``timing``: identical
kernels timed 1.023x [1.009, 1.037] apart on a busy CPU failed against the GPU's 0.5%
noise floor where the suite gives the CPU 5%."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import numpy as np
from report_data import case, make_run

from guard.ops import compare as ops_compare
from guard.ops import measure as ops_measure
from guard.store.results import OK, CaseResult
from guard.store.suite import TimingPlan


def _pair(factor: float, seed: int = 3) -> tuple:
    rng = np.random.default_rng(seed)
    c = replace(case("b1-h8-s512-d64-full", "triton_flash", "median:10%"), gate=True)

    def rounds(scale: float) -> tuple[tuple[float, ...], ...]:
        return tuple(
            tuple(float(x) for x in 1e-3 * scale * rng.lognormal(0, 0.002, 25)) for _ in range(6)
        )

    base = replace(make_run(0, label="base"), cases=(CaseResult(c, OK, rounds=rounds(1.0)),))
    cand = replace(make_run(1, label="head"), cases=(CaseResult(c, OK, rounds=rounds(factor)),))
    return base, cand


def _decide(plan: TimingPlan, gpu: TimingPlan, factor: float) -> str:
    base, cand = _pair(factor)
    suite = SimpleNamespace(timing=gpu, cases=[c.case for c in cand.cases])
    session = SimpleNamespace(
        suite=suite, plan=plan, rounds_done=plan.max_rounds, lanes=[None], time=lambda *a: None
    )
    opts = ops_measure.MeasureOptions(rounds=plan.rounds, max_rounds=plan.max_rounds)
    comparison = ops_compare.sequential_rounds(session, lambda: (base, cand), opts, paired=True)  # type: ignore[arg-type]
    (only,) = comparison.cases
    return only.verdict.value if hasattr(only.verdict, "value") else str(only.verdict)


def test_the_cpu_plan_decides_on_a_cpu() -> None:
    gpu = TimingPlan(rounds=6, max_rounds=6)
    cpu = replace(gpu, margin=0.05)
    assert _decide(gpu, gpu, 1.023) == "regression"  # 2.3% over a 0.5% floor
    assert _decide(cpu, gpu, 1.023) != "regression"  # within the CPU's 5% floor
