"""How often ``min:N%`` decides on a shared CPU: rounds resampled from real processes.

Each arm is ``n`` rounds drawn (with replacement) from the fastest calls of real fresh
processes (``docs/data/cpu-vm-2026-11-27/fastest-calls.json``); a planted slowdown
multiplies one arm by 1.10. Each pair is decided by the guard's own rule
(``stats.decide``), once with each side as the 20%-trimmed mean of its rounds and once
as the fastest half (what ``min:N%`` does), at the family level of a two-case check.
Prints, per case and arm size, how often an unchanged pair is "unchanged", how often it
is a false "regression", and how often the 10% plant is a "regression". CPU only.

    PYTHONPATH=. python3 benchmarks/min_statistic_study.py [--pairs 300]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from guard.base import stats

DATA = Path(__file__).resolve().parent.parent / "docs/data/cpu-vm-2026-11-27/fastest-calls.json"
CENTRES: dict[str, stats.RoundStatistic] = {"trimmed mean": "median", "fastest half": "min"}


def rates(
    calls: np.ndarray, n: int, statistic: stats.RoundStatistic, pairs: int, rng: np.random.Generator
) -> tuple[float, float, float]:
    rule = stats.Rule(min_effect=0.05, margin=0.005, statistic=statistic)
    conf = stats.family_confidence(0.01, 2)
    unchanged = false_alarm = caught = 0
    for _ in range(pairs):
        base, same, slow = ([(float(x),) for x in rng.choice(calls, n) * k] for k in (1, 1, 1.1))
        v_same = stats.decide(base, same, rule, confidence=conf, rng=rng, n_resamples=1000)[0]
        v_slow = stats.decide(base, slow, rule, confidence=conf, rng=rng, n_resamples=1000)[0]
        unchanged += v_same is stats.Verdict.UNCHANGED
        false_alarm += v_same is stats.Verdict.REGRESSION
        caught += v_slow is stats.Verdict.REGRESSION
    return unchanged / pairs, false_alarm / pairs, caught / pairs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=300)
    parser.add_argument("--sizes", type=int, nargs="+", default=[6, 12, 20])
    args = parser.parse_args()
    doc = json.loads(DATA.read_text())
    rng = np.random.default_rng(11)
    print(
        "| case | rounds a side | centre | unchanged pair: unchanged | false regression "
        "| 10% plant: regression |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for name, calls in doc["fastest_call"].items():
        for n in args.sizes:
            for label, statistic in CENTRES.items():
                u, f, c = rates(np.asarray(calls), n, statistic, args.pairs, rng)
                print(f"| {name} | {n} | {label} | {u:.0%} | {f:.1%} | {c:.0%} |")


if __name__ == "__main__":
    main()
