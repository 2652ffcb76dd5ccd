"""How often the history's step detector finds a step, and how often it invents one.

Synthetic histories of per-run medians: log-normal noise around 1 (between-run sd 0.5%
and 1.5%, the measured between-process spread of large and small shapes on an H100 and
an H200), each condition ``--series`` times with its own seed:

- flat: ``2k`` runs, no step: the share with any step reported is the false-step rate;
- one step of 2%, 5% or 15% with ``k`` runs a side: found = a step reported within one
  run of the planted one;
- there and back (a dip, as a regression fixed later): ``k`` runs, ``k`` runs 5% or 15%
  slower, ``k`` runs at the first level again: found = both steps reported.

``guard.store.changepoint.detect_steps`` runs as the history runs it (alpha 0.01, the
guard's 2% minimum effect, at least 3 runs a side).

    python benchmarks/step_power.py [--series 1000] [--seed 0]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import numpy as np

from guard.store.changepoint import detect_steps

SIDES = (3, 5, 10, 20)
NOISE = (0.005, 0.015)


def _found(steps: Sequence[int], planted: Sequence[int]) -> bool:
    return all(any(abs(s - p) <= 1 for s in steps) for p in planted)


def rate(kind: str, k: int, sd: float, size: float, series: int, seed: int) -> float:
    """Share of ``series`` histories with (flat: any) the planted steps found."""
    rng = np.random.default_rng([seed, k, int(sd * 1e4), int(size * 1e3), len(kind)])
    hits = 0
    for _ in range(series):
        if kind == "flat":
            level, planted = np.ones(2 * k), ()
        elif kind == "step":
            level, planted = np.r_[np.ones(k), np.full(k, 1 + size)], (k,)
        else:  # there and back
            level, planted = np.r_[np.ones(k), np.full(k, 1 + size), np.ones(k)], (k, 2 * k)
        x = level * rng.lognormal(0.0, sd, level.size)
        steps = [s.index for s in detect_steps(x.tolist())]
        hits += bool(steps) if kind == "flat" else _found(steps, planted)
    return hits / series


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--series", type=int, default=1000, help="histories per condition")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    rows = [("flat (false steps)", "flat", 0.0)]
    rows += [(f"one step {s:.0%}", "step", s) for s in (0.02, 0.05, 0.15)]
    rows += [(f"there and back {s:.0%}", "dip", s) for s in (0.05, 0.15)]
    print(f"{args.series} histories per cell; k runs a side; noise = between-run sd")
    head = " | ".join(f"k={k} sd {sd:.1%}" for sd in NOISE for k in SIDES)
    print(f"| history | {head} |")
    print("|---" * (1 + len(SIDES) * len(NOISE)) + "|")
    for label, kind, size in rows:
        cells = [
            f"{rate(kind, k, sd, size, args.series, args.seed):.1%}" for sd in NOISE for k in SIDES
        ]
        print(f"| {label} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
