"""Deterministic synthetic runs for the report and history tests (no torch, no timing).

Numbers are shaped like the H100 measurements in DESIGN.md (rounds of CUDA-graph
samples with a small offset per round) but invented: they test rendering, not speed.
Kept apart from conftest.py so that the golden files depend on this file only.
"""

from __future__ import annotations

import numpy as np

from guard.base.stats import Interval, Rule, Threshold, Verdict
from guard.decide.compare import CaseComparison, Comparison, Status
from guard.store.results import (
    CRASHED,
    OK,
    SCHEMA_VERSION,
    WRONG,
    CaseResult,
    Correctness,
    Environment,
    RunResult,
)
from guard.store.suite import Case, Shape


def env(**kw: object) -> Environment:
    base: dict[str, object] = dict(
        device="cuda",
        gpu_name="NVIDIA H100 80GB HBM3",
        gpu_slug="nvidia-h100-80gb-hbm3",
        driver="580.65",
        cuda="13.0",
        torch="2.11.0",
        triton="3.6.0",
        python="3.12.3",
        host="runner-1",
        sm_clock_max_mhz=1980.0,
        mem_clock_max_mhz=2619.0,
        commit="0123456789abcdef0123456789abcdef01234567",
        branch="main",
    )
    base.update(kw)
    return Environment(**base)  # type: ignore[arg-type]


WORKLOADS = {
    "b1-h8-s512-d64-full": (Shape(1, 8, 512, 64), False),
    "b1-h8-s512-d64-causal": (Shape(1, 8, 512, 64), True),
    "b2-h8-s2048-d128-full": (Shape(2, 8, 2048, 128), False),
}
KERNELS = ("triton_flash", "sdpa_flash", "sdpa_efficient")
# median seconds per call: (baseline, candidate) per (kernel, workload)
TIMES = {
    ("triton_flash", "b1-h8-s512-d64-full"): (21.0e-6, 22.6e-6),  # planted regression
    ("triton_flash", "b1-h8-s512-d64-causal"): (15.0e-6, 15.02e-6),  # unchanged
    ("triton_flash", "b2-h8-s2048-d128-full"): (410e-6, 370e-6),  # improvement
    ("sdpa_flash", "b1-h8-s512-d64-full"): (24.0e-6, 24.1e-6),
    ("sdpa_flash", "b1-h8-s512-d64-causal"): (17.5e-6, 17.4e-6),
    ("sdpa_flash", "b2-h8-s2048-d128-full"): (455e-6, 456e-6),
    ("sdpa_efficient", "b1-h8-s512-d64-full"): (31.0e-6, 31.2e-6),
    ("sdpa_efficient", "b1-h8-s512-d64-causal"): (26.0e-6, 26.1e-6),
    ("sdpa_efficient", "b2-h8-s2048-d128-full"): (690e-6, 688e-6),
}


def case(name: str, kernel: str, threshold: str = "median:2%") -> Case:
    shape, causal = WORKLOADS[name]
    return Case(
        name, kernel, shape, "float16", causal, Threshold.parse(threshold), kernel == "triton_flash"
    )


def rounds(
    rng: np.random.Generator, mu: float, n_rounds: int = 6, per_round: int = 12
) -> tuple[tuple[float, ...], ...]:
    return tuple(
        tuple(float(x) for x in mu * np.exp(rng.normal(0, 0.004) + rng.normal(0, 0.01, per_round)))
        for _ in range(n_rounds)
    )


def correctness(seed: int, rel: float = 4.1e-4, ok: bool = True) -> Correctness:
    return Correctness(
        passed=ok,
        rel_norm_err=rel,
        max_abs_err=1.95e-3,
        rel_norm_bound=1.55e-3,
        max_abs_bound=4.9e-3,
        yardstick_rel_norm_err=2.7e-4,
        seed=seed,
        message="" if ok else "relative norm error 2.1e-02 over the bound 1.5e-03",
    )


def make_run(
    which: int, *, label: str, environment: Environment | None = None, seed: int = 7
) -> RunResult:
    """``which``: 0 for the baseline's times, 1 for the candidate's (TIMES)."""
    rng = np.random.default_rng(seed)
    results = []
    for name in WORKLOADS:
        for kernel in KERNELS:
            c = case(name, kernel)
            rs = rounds(rng, TIMES[(kernel, name)][which])
            host = tuple(tuple(x + 6e-6 for x in r[:3]) for r in rs)
            results.append(
                CaseResult(
                    case=c,
                    status=OK,
                    correctness=correctness(seed),
                    rounds=rs,
                    host_rounds=host,
                    kernel_hash="k" + kernel[:6],
                    method="cuda-graph",
                    calls_per_sample=(40,) * len(rs),
                )
            )
    return RunResult(
        SCHEMA_VERSION,
        f"2026-11-2{5 + which}T10:00:00+00:00",
        "attention-fwd",
        "5eed5eed5eed5eed",
        environment or env(),
        tuple(results),
        label=label,
    )


def pair() -> tuple[RunResult, RunResult]:
    """A baseline and a candidate: one regression, one improvement, the rest flat;
    the candidate also has a wrong case and a crashed one, on a newer driver."""
    base = make_run(0, label="baselines/nvidia-h100-80gb-hbm3.json", seed=1)
    cand = make_run(
        1,
        label="results/guard-results.json",
        environment=env(driver="580.82", commit="fedcba9876543210fedcba9876543210fedcba98"),
        seed=2,
    )
    wrong = CaseResult(
        case=case("b1-h8-s512-d64-causal", "cuda_flash"),
        status=WRONG,
        reason="relative norm error 2.1e-02 over the bound 1.5e-03",
        correctness=correctness(2, rel=2.1e-2, ok=False),
    )
    crashed = CaseResult(
        case=case("b1-h8-s512-d64-full", "cuda_flash"),
        status=CRASHED,
        reason="worker died (exit -11)",
        worker_output="Segmentation fault (core dumped)\n<stack>",
    )
    cand = RunResult(
        cand.schema_version,
        cand.created,
        cand.suite_name,
        cand.suite_hash,
        cand.environment,
        (*cand.cases, wrong, crashed),
        label=cand.label,
    )
    return base, cand


# ----------------------------------------------------------- fixed comparisons


def _cc(
    c: Case,
    status: Status,
    *,
    verdict: Verdict | None = None,
    ratio: tuple[float, float, float] | None = None,
    base: float | None = None,
    cand: float | None = None,
    reason: str = "",
) -> CaseComparison:
    return CaseComparison(
        case_id=c.id,
        kernel=c.kernel,
        name=c.name,
        gate=c.gate,
        status=status,
        verdict=verdict,
        interval=None if ratio is None else Interval(*ratio, confidence=0.9967),
        min_effect=c.threshold.min_effect,
        baseline_median=base,
        candidate_median=cand,
        host_ratio=None if ratio is None else ratio[0] * 0.99,
        reason=reason,
        rule=None if ratio is None else Rule(c.threshold.min_effect),  # a paired run's
    )


def fixed_comparison(kind: str) -> Comparison:
    """Hand-set verdicts and intervals (no bootstrap), for the Markdown golden files.

    ``kind``: "fail" (regression, wrong results, a crash, another driver, notes) or
    "pass" (nothing moved, same machine).
    """
    base, cand = pair()
    full, causal, big = WORKLOADS
    if kind == "fail":
        cases = (
            _cc(
                case(full, "triton_flash"),
                Status.COMPARED,
                verdict=Verdict.REGRESSION,
                ratio=(1.0762, 1.0581, 1.0947),
                base=21.0e-6,
                cand=22.6e-6,
            ),
            _cc(
                case(causal, "triton_flash"),
                Status.COMPARED,
                verdict=Verdict.UNCHANGED,
                ratio=(1.0013, 0.9921, 1.0106),
                base=15.0e-6,
                cand=15.02e-6,
            ),
            _cc(
                case(big, "triton_flash"),
                Status.COMPARED,
                verdict=Verdict.IMPROVEMENT,
                ratio=(0.9024, 0.8957, 0.9092),
                base=410e-6,
                cand=370e-6,
            ),
            _cc(
                case(full, "sdpa_flash"),
                Status.COMPARED,
                verdict=Verdict.INCONCLUSIVE,
                ratio=(1.0042, 0.9755, 1.0338),
                base=24.0e-6,
                cand=24.1e-6,
            ),
            _cc(
                case(causal, "cuda_flash"),
                Status.WRONG,
                reason="relative norm error 2.1e-02 over the bound 1.5e-03",
            ),
            _cc(case(full, "cuda_flash"), Status.ERROR, reason="crashed: worker died (exit -11)"),
            _cc(
                case(big, "sdpa_flash"),
                Status.NEW,
                cand=456e-6,
                reason="no such case in the baseline",
            ),
        )
        return Comparison(
            baseline=base,
            candidate=cand,
            cases=cases,
            confidence=0.9967,
            alpha=0.01,
            environment_diff=(("driver", "580.65", "580.82"),),
            notes=("2 candidate round(s) ran while the GPU was throttled",),
        )
    cases = (
        _cc(
            case(full, "triton_flash"),
            Status.COMPARED,
            verdict=Verdict.UNCHANGED,
            ratio=(0.9987, 0.9893, 1.0082),
            base=21.0e-6,
            cand=20.97e-6,
        ),
        _cc(
            case(causal, "triton_flash"),
            Status.COMPARED,
            verdict=Verdict.UNCHANGED,
            ratio=(1.0013, 0.9921, 1.0106),
            base=15.0e-6,
            cand=15.02e-6,
        ),
        _cc(
            case(full, "sdpa_flash"),
            Status.COMPARED,
            verdict=Verdict.UNCHANGED,
            ratio=(1.0042, 0.9955, 1.0138),
            base=24.0e-6,
            cand=24.1e-6,
        ),
    )
    return Comparison(baseline=base, candidate=base, cases=cases, confidence=0.995, alpha=0.01)


def fixed_run() -> RunResult:
    """A small run with literal samples (no generator), for the run Markdown golden."""
    full, causal, _ = WORKLOADS
    r1 = ((21.0e-6, 21.2e-6, 20.9e-6), (21.4e-6, 21.1e-6, 21.3e-6))
    r2 = ((24.0e-6, 24.2e-6, 23.9e-6), (24.1e-6, 24.3e-6, 24.0e-6))
    results = (
        CaseResult(case(full, "triton_flash"), OK, correctness=correctness(3), rounds=r1),
        CaseResult(case(full, "sdpa_flash"), OK, correctness=correctness(3), rounds=r2),
        CaseResult(
            case(causal, "cuda_flash"),
            WRONG,
            reason="output holds NaN",
            correctness=correctness(3, rel=0.93, ok=False),
        ),
    )
    return RunResult(
        SCHEMA_VERSION,
        "2026-11-26T10:00:00+00:00",
        "attention-fwd",
        "5eed5eed5eed5eed",
        env(),
        results,
        notes=("1 round ran while the GPU was throttled",),
        label="results/guard-results.json",
    )


def history_runs(n: int = 30, step_at: int = 20, factor: float = 1.07) -> list[RunResult]:
    """``n`` runs on successive commits; ``triton_flash`` on the first workload gets
    ``factor`` times slower from run ``step_at`` on, every other case stays flat."""
    out = []
    for i in range(n):
        rng = np.random.default_rng(1000 + i)
        results = []
        for name in WORKLOADS:
            for kernel in KERNELS:
                mu = TIMES[(kernel, name)][0]
                if kernel == "triton_flash" and name == "b1-h8-s512-d64-full" and i >= step_at:
                    mu *= factor
                results.append(
                    CaseResult(
                        case(name, kernel),
                        OK,
                        rounds=rounds(rng, mu, n_rounds=4, per_round=6),
                        method="cuda-graph",
                    )
                )
        out.append(
            RunResult(
                SCHEMA_VERSION,
                f"2026-10-{1 + i // 2:02d}T{10 + i % 2:02d}:00:00+00:00",
                "attention-fwd",
                "5eed5eed5eed5eed",
                env(commit=f"{i:02d}" + "c0ffee" * 6 + "00"),
                tuple(results),
                label=f"main@{i}",
            )
        )
    return out
