"""Step detection on histories like ours: guard.store.changepoint against ruptures and Otava.

Synthetic histories of per-run medians: log-normal noise around a median (between-run
sd 0.5% and 1.5%, the measured between-process noise of large and small shapes on
H100/H200), 30 and 100 runs, flat or with one planted step of +2% or +5% at a uniform
random position leaving at least 3 runs on each side; 200 histories per condition,
each condition seeded on its own (``--seed``).

Methods, each on the same histories:
- ``ours``: ``guard.store.changepoint.detect_steps`` (binary segmentation, Bonferroni
  t-tests on log medians, alpha 0.01).
- ``ruptures Pelt`` / ``ruptures Binseg``: ``model="l2"``, ``min_size=3``, ``jump=1``
  on the log medians, ``pen = beta * sigma_hat**2`` with ``sigma_hat`` the noise
  estimated from the history itself (median absolute first difference / (0.6745 *
  sqrt 2): robust to one step and one outlier), so that one ``beta`` serves every
  noise level, as it would in CI where the noise of a case is not known beforehand.
- ``ruptures Pelt, sd known``: the same with the true sd in place of ``sigma_hat``
  (an oracle, no CI has it: an upper bound for a penalty method).
- ``otava``: Apache Otava's ``compute_change_points`` (E-divisive candidates in
  windows of 50, t-test significance, merge step), its default analysis.
- ``otava orig E-divisive``: Otava's ``compute_change_points_orig`` (Matteson and
  James: permutation test, 100 permutations), ``max_pvalue`` 0.001 (Otava's
  default); its p-values come in steps of 1/101, so it cannot be calibrated finely.

Calibration (per history length, on a separate set of ``--calibration`` flat histories
per noise level, other seeds): ``beta`` and Otava's ``max_pvalue`` are set so that
the method reports a step on exactly as many flat calibration histories as ``ours``
(with ``min_effect=0``) does. For ruptures this is exact: a history gets a step iff
its critical penalty (Binseg: the gain of its best split; Pelt: the largest penalty
at which the optimal segmentation still has a change, from an exact dynamic program,
checked against ``rpt.Pelt`` just below and above it on 20 histories per length)
exceeds ``pen``, so ``beta`` is put between the T-th and (T+1)-th largest
critical ``pen / sigma_hat**2``. For Otava, ``max_pvalue`` is bisected (log scale)
for the largest value giving at most T.

Two blocks are reported. "Test alone": ``min_effect=0`` everywhere, the statistical
detectors compared at one false-alarm rate. "As the guard runs it": the guard's
``min_effect=0.02`` (history flags what a PR check would fail on): ``ours`` and
Otava (``min_magnitude``) have it built in; for ruptures and Otava's original
E-divisive the same gate is applied to their change points (the change with the
smallest ratio of neighbouring segment medians is dropped while it is under 2%).

Metrics: FP = flat histories with any step reported (of 200); for planted steps,
found = histories with any step, "+-2" = the reported step nearest the planted one
within 2 runs of it, "exact" = at it, |err| = mean distance of the nearest reported
step among found; false steps = reported steps farther than 2 runs from the planted
one; "vs ours" = histories where only ours / only this method found the planted step
(+-2), with the exact McNemar p-value of that paired difference.

Run (Otava's wheel pins numpy==2.2.0.* and pulls in BigQuery, Slack and Postgres
clients; its change-point code needs only numpy and scipy, so install it aside)::

    pip install ruptures==1.1.10
    pip install --no-deps --target /tmp/otava-site apache-otava==0.8.0
    PYTHONPATH=.:/tmp/otava-site python3 benchmarks/changepoint_study.py --json out.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from guard.store.changepoint import detect_steps

LENGTHS = (30, 100)
NOISE = (0.005, 0.015)
STEPS = (0.0, 0.02, 0.05)
MIN_SIZE = 3
MIN_EFFECT = 0.02
ALPHA = 0.01
MEDIAN = 20e-6  # seconds; irrelevant (every method here is scale-free)
ORIG_MAX_P = 0.001

try:
    import ruptures as rpt
except ImportError:  # pragma: no cover - reported in the output
    rpt = None
try:
    from otava.analysis import compute_change_points, compute_change_points_orig
except ImportError:  # pragma: no cover
    compute_change_points = compute_change_points_orig = None


# ------------------------------------------------------------------ histories


def history(seed: Sequence[int], n: int, sd: float, step: float) -> tuple[np.ndarray, int]:
    """One history (medians, oldest first) and the index of its first stepped run
    (-1 when flat)."""
    rng = np.random.default_rng(list(seed))
    x = MEDIAN * np.exp(rng.normal(0.0, sd, n))
    if step == 0.0:
        return x, -1
    k = int(rng.integers(MIN_SIZE, n - MIN_SIZE + 1))
    x[k:] *= 1.0 + step
    return x, k


def seeds(base: int, purpose: int, n: int, sd: float, step: float, count: int) -> list[list[int]]:
    """Independent seeds per condition (no two conditions share noise)."""
    key = [base, purpose, n, round(sd * 1e4), round(step * 1e4)]
    return [[*key, i] for i in range(count)]


# ------------------------------------------------------------------- methods


def sigma_hat(logs: np.ndarray) -> float:
    """Noise sd from the history itself: MAD of first differences, robust to a step."""
    d = np.diff(logs)
    return float(np.median(np.abs(d - np.median(d))) / 0.6745 / math.sqrt(2.0))


def gate(x: np.ndarray, bkps: Sequence[int], min_effect: float) -> list[int]:
    """Drop, one at a time, the change whose neighbouring segment medians differ least,
    while that difference is under ``min_effect`` (what ``ours`` does at split time)."""
    bkps = sorted(int(b) for b in bkps if 0 < b < x.size)
    while bkps and min_effect > 0:
        edges = [0, *bkps, x.size]
        medians = [float(np.median(x[a:b])) for a, b in itertools.pairwise(edges)]
        effects = [abs(after / before - 1) for before, after in itertools.pairwise(medians)]
        weakest = int(np.argmin(effects))
        if effects[weakest] >= min_effect:
            break
        del bkps[weakest]
    return bkps


def ours(x: np.ndarray, min_effect: float) -> list[int]:
    return [s.index for s in detect_steps(x, alpha=ALPHA, min_effect=min_effect)]


def _ruptures(algo: str, logs: np.ndarray, pen: float) -> list[int]:
    cls = rpt.Pelt if algo == "pelt" else rpt.Binseg
    return [int(b) for b in cls(model="l2", min_size=MIN_SIZE, jump=1).fit(logs).predict(pen=pen)][
        :-1
    ]


def otava(x: np.ndarray, max_p: float, min_effect: float) -> list[int]:
    cps, _ = compute_change_points(
        [float(v) for v in x], window_len=50, max_pvalue=max_p, min_magnitude=min_effect
    )
    return sorted(int(c.index) for c in cps)


def otava_orig(x: np.ndarray, seed: Sequence[int]) -> list[int]:
    s = int(np.random.SeedSequence(list(seed)).generate_state(1)[0])
    cps, _ = compute_change_points_orig([float(v) for v in x], max_pvalue=ORIG_MAX_P, seed=s)
    return sorted(int(c.index) for c in cps)


# --------------------------------------------------------------- calibration


def pelt_critical(logs: np.ndarray) -> float:
    """The largest penalty at which the optimal l2 segmentation (what Pelt finds) still
    has a change: ``max over K >= 1 of (SSE_0 - SSE_K) / K``, SSE_K the least squared
    error with K changes and segments of at least ``MIN_SIZE`` (exact dynamic program;
    ruptures' pure-Python Pelt is too slow to bisect for thousands of histories).
    ``check_against_ruptures`` confirms it against ``rpt.Pelt`` itself."""
    n = logs.size
    y = logs - logs.mean()
    c1 = np.concatenate([[0.0], np.cumsum(y)])
    c2 = np.concatenate([[0.0], np.cumsum(y * y)])
    i, j = np.arange(n + 1)[:, None], np.arange(n + 1)[None, :]
    length = (j - i).astype(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        cost = c2[j] - c2[i] - (c1[j] - c1[i]) ** 2 / length
    cost[length < MIN_SIZE] = np.inf
    sse0 = float(cost[0, n])
    best = cost[0].copy()  # best[j]: least error of y[:j] with K changes
    crit = 0.0
    for k in range(1, n // MIN_SIZE):
        best = np.min(best[:, None] + cost, axis=0)
        if not np.isfinite(best[n]):
            break
        crit = max(crit, (sse0 - float(best[n])) / k)
    return crit


def check_against_ruptures(xs: Sequence[np.ndarray]) -> None:
    """Critical penalties as ruptures sees them: a change just below, none just above."""
    for x in xs:
        logs = np.log(x)
        for algo, c in (("pelt", pelt_critical(logs)), ("binseg", binseg_critical(logs))):
            assert _ruptures(algo, logs, c * (1 - 1e-6)), (algo, "below")
            assert not _ruptures(algo, logs, c * (1 + 1e-6)), (algo, "above")


def binseg_critical(logs: np.ndarray) -> float:
    """Binseg goes on while the best split's gain exceeds ``pen``: the first gain."""
    _, gain = rpt.Binseg(model="l2", min_size=MIN_SIZE, jump=1).fit(logs).single_bkp(0, logs.size)
    return float(gain)


def critical(x: np.ndarray) -> dict[str, float]:
    """Per flat history: does ``ours`` (min_effect 0) see a step; the critical ruptures
    penalties; the noise estimate."""
    logs = np.log(x)
    out: dict[str, float] = {"ours": float(bool(ours(x, 0.0))), "sigma_hat": sigma_hat(logs)}
    if rpt is not None:
        out["binseg"] = binseg_critical(logs)
        out["pelt"] = pelt_critical(logs)
    return out


def _critical_task(args: tuple[list[int], int, float]) -> dict[str, float]:
    seed, n, sd = args
    x, _ = history(seed, n, sd, 0.0)
    out = critical(x)
    out["sd"] = sd
    return out


def _otava_count_task(args: tuple[list[list[int]], int, float, float]) -> int:
    chunk, n, sd, max_p = args
    return sum(bool(otava(history(s, n, sd, 0.0)[0], max_p, 0.0)) for s in chunk)


def _between(values: np.ndarray, target: int) -> float:
    """A threshold with exactly ``target`` of ``values`` strictly above it."""
    v = np.sort(values)[::-1]
    upper = v[target - 1] if target > 0 else v[0] * 2
    lower = v[target]
    return float(math.sqrt(upper * lower)) if lower > 0 else float(upper / 2)


@dataclass
class Calibration:
    n: int
    histories: int
    target: int  # flat histories where ours (min_effect 0) reports a step
    beta: dict[str, float]  # ruptures variant -> beta
    otava_max_p: float | None
    otava_count: int | None


def calibrate(pool: ProcessPoolExecutor, n: int, count: int, base: int) -> Calibration:
    tasks = [(s, n, sd) for sd in NOISE for s in seeds(base, 1, n, sd, 0.0, count)]
    if rpt is not None:
        sample = tasks[:: max(1, count // 10)]  # 20 histories
        check_against_ruptures([history(s, n, sd, 0.0)[0] for s, _, sd in sample])
    rows = list(pool.map(_critical_task, tasks, chunksize=50))
    target = int(sum(r["ours"] for r in rows))
    beta: dict[str, float] = {}
    if rpt is not None:
        sig = np.array([r["sigma_hat"] for r in rows])
        sd = np.array([r["sd"] for r in rows])
        for algo in ("pelt", "binseg"):
            c = np.array([r[algo] for r in rows])
            beta[algo] = _between(c / sig**2, target)
        beta["pelt-oracle"] = _between(np.array([r["pelt"] for r in rows]) / sd**2, target)
    max_p = found = None
    if compute_change_points is not None:
        chunks = [
            (seeds(base, 1, n, s, 0.0, count)[i : i + 100], n, s, 0.0)
            for s in NOISE
            for i in range(0, count, 100)
        ]

        def fp(p: float) -> int:
            return sum(pool.map(_otava_count_task, [(c[0], c[1], c[2], p) for c in chunks]))

        lo, hi = -12.0, math.log10(0.5)  # log10 max_pvalue; fp(lo) <= target < fp(hi)
        best, best_fp = lo, fp(10**lo)
        for _ in range(16):
            mid = 0.5 * (lo + hi)
            got = fp(10**mid)
            if got <= target:
                lo, best, best_fp = mid, mid, got
            else:
                hi = mid
        max_p, found = 10**best, best_fp
    return Calibration(n, 2 * count, target, beta, max_p, found)


# ---------------------------------------------------------------- evaluation


def _evaluate_task(
    args: tuple[list[int], int, float, float, dict[str, float], float | None, bool],
) -> tuple[int, dict[str, tuple[list[int], list[int]]]]:
    """(planted index, {method: (steps at min_effect 0, steps at the guard's 2%)})."""
    seed, n, sd, step, beta, max_p, orig = args
    x, k = history(seed, n, sd, step)
    logs = np.log(x)
    out: dict[str, tuple[list[int], list[int]]] = {"ours": (ours(x, 0.0), ours(x, MIN_EFFECT))}
    if rpt is not None:
        sig = sigma_hat(logs)
        for name, algo, scale in (
            ("ruptures Pelt", "pelt", sig),
            ("ruptures Binseg", "binseg", sig),
            ("ruptures Pelt, sd known", "pelt", sd),
        ):
            key = "pelt-oracle" if name.endswith("known") else algo
            b = _ruptures(algo, logs, beta[key] * scale**2)
            out[name] = (b, gate(x, b, MIN_EFFECT))
    if max_p is not None:
        out["otava"] = (otava(x, max_p, 0.0), otava(x, max_p, MIN_EFFECT))
    if orig and compute_change_points_orig is not None:
        b = otava_orig(x, seed)
        out["otava orig E-divisive"] = (b, gate(x, b, MIN_EFFECT))
    return k, out


@dataclass
class Tally:
    histories: int = 0
    any_step: int = 0
    exact: int = 0
    within2: int = 0
    err_sum: int = 0
    false_steps: int = 0  # steps reported farther than 2 runs from the planted one
    ours_only: int = 0  # planted step found (+-2) by ours, not by this method
    it_only: int = 0  # ... by this method, not by ours

    def add(self, k: int, found: list[int]) -> None:
        self.histories += 1
        self.false_steps += sum(k < 0 or abs(f - k) > 2 for f in found)
        if not found:
            return
        self.any_step += 1
        if k >= 0:
            err = min(abs(f - k) for f in found)
            self.exact += err == 0
            self.within2 += err <= 2
            self.err_sum += err

    @property
    def mean_err(self) -> float:
        return self.err_sum / self.any_step if self.any_step else float("nan")


def evaluate(
    pool: ProcessPoolExecutor,
    cal: dict[int, Calibration],
    count: int,
    base: int,
    orig: bool,
) -> dict[tuple[str, int, float, float, int], Tally]:
    """Tallies keyed by (method, n, sd, step, block) with block 0: min_effect 0, 1: 2%."""
    tally: dict[tuple[str, int, float, float, int], Tally] = {}
    for n in LENGTHS:
        for sd in NOISE:
            for step in STEPS:
                c = cal[n]
                tasks = [
                    (s, n, sd, step, c.beta, c.otava_max_p, orig)
                    for s in seeds(base, 2, n, sd, step, count)
                ]
                for k, res in pool.map(_evaluate_task, tasks, chunksize=10):
                    for method, pair in res.items():
                        for block, found in enumerate(pair):
                            t = tally.setdefault((method, n, sd, step, block), Tally())
                            t.add(k, found)
                            if k >= 0:
                                mine, theirs = hit(res["ours"][block], k), hit(found, k)
                                t.ours_only += mine and not theirs
                                t.it_only += theirs and not mine
    return tally


def hit(found: Sequence[int], k: int) -> bool:
    return any(abs(f - k) <= 2 for f in found)


# -------------------------------------------------------------------- output


def mcnemar(a: int, b: int) -> str:
    """Discordant pairs against ours, with the exact two-sided McNemar p-value."""
    p = sps.binomtest(min(a, b), a + b, 0.5).pvalue if a + b else 1.0
    return f"{a} / {b} (p {p:.2g})"


def methods_of(tally: dict) -> list[str]:
    seen: list[str] = []
    for key in tally:
        if key[0] not in seen:
            seen.append(key[0])
    return seen


def table(tally: dict, block: int, count: int) -> list[str]:
    head = (
        "| n | sd | method | FP flat | +2% found | +2% ±2 | +2% \\|err\\| "
        "| +5% found | +5% exact | +5% ±2 | +5% \\|err\\| | false steps (2%, 5%) |"
    )
    lines = [head, "|" + "---|" * 12]
    for n in LENGTHS:
        for sd in NOISE:
            for m in methods_of(tally):
                flat = tally[(m, n, sd, 0.0, block)]
                s2 = tally[(m, n, sd, 0.02, block)]
                s5 = tally[(m, n, sd, 0.05, block)]
                lines.append(
                    f"| {n} | {sd:.1%} | {m} | {flat.any_step}/{count} "
                    f"| {s2.any_step} | {s2.within2} | {s2.mean_err:.2f} "
                    f"| {s5.any_step} | {s5.exact} | {s5.within2} | {s5.mean_err:.2f} "
                    f"| {s2.false_steps}, {s5.false_steps} |"
                )
    return lines


def summary(tally: dict, block: int, count: int) -> list[str]:
    """Pooled over the four (n, sd) conditions."""
    total = count * len(LENGTHS) * len(NOISE)
    lines = [
        f"| method ({total} histories per column) | FP flat | +2% found | +2% ±2 "
        "| +2% ±2 vs ours: ours only / it only | +5% found | +5% ±2 "
        "| +5% ±2 vs ours | +5% \\|err\\| | false steps in stepped histories |",
        "|" + "---|" * 10,
    ]
    for m in methods_of(tally):
        agg = {}
        for step in STEPS:
            t = Tally()
            for n in LENGTHS:
                for sd in NOISE:
                    u = tally[(m, n, sd, step, block)]
                    for f in t.__dict__:
                        setattr(t, f, getattr(t, f) + getattr(u, f))
            agg[step] = t
        a2, a5 = agg[0.02], agg[0.05]
        vs2 = "-" if m == "ours" else mcnemar(a2.ours_only, a2.it_only)
        vs5 = "-" if m == "ours" else mcnemar(a5.ours_only, a5.it_only)
        lines.append(
            f"| {m} | {agg[0.0].any_step} | {a2.any_step} | {a2.within2} | {vs2} "
            f"| {a5.any_step} | {a5.within2} | {vs5} | {a5.mean_err:.2f} "
            f"| {a2.false_steps + a5.false_steps} |"
        )
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--histories", type=int, default=200, help="per condition (default 200)")
    p.add_argument("--calibration", type=int, default=2000, help="flat, per length and sd")
    p.add_argument("--seed", type=int, default=20261201)
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    p.add_argument("--no-orig", action="store_true", help="skip Otava's permutation E-divisive")
    p.add_argument("--json", help="also write the tallies and calibration here")
    args = p.parse_args(argv)

    versions = {"numpy": np.__version__}
    if rpt is not None:
        versions["ruptures"] = rpt.__version__
    else:
        print("ruptures not installed: its rows are left out", file=sys.stderr)
    if compute_change_points is None:
        print("otava not importable: its rows are left out", file=sys.stderr)
    else:
        from importlib.metadata import PackageNotFoundError, version

        try:
            versions["apache-otava"] = version("apache-otava")
        except PackageNotFoundError:
            versions["apache-otava"] = "?"
    t0 = time.perf_counter()
    with ProcessPoolExecutor(args.jobs) as pool:
        cal = {n: calibrate(pool, n, args.calibration, args.seed) for n in LENGTHS}
        t1 = time.perf_counter()
        tally = evaluate(pool, cal, args.histories, args.seed, not args.no_orig)
    t2 = time.perf_counter()

    out: list[str] = [
        f"versions: {', '.join(f'{k} {v}' for k, v in versions.items())}; seed {args.seed}; "
        f"calibration {t1 - t0:.0f} s, evaluation {t2 - t1:.0f} s on {args.jobs} process(es)",
        "",
        "Calibration (flat histories, both noise levels, other seeds than below):",
        "",
        "| n | flat histories | ours (min_effect 0) with a step | beta Pelt | beta Binseg "
        "| beta Pelt sd known | otava max_pvalue (its count) |",
        "|---|---|---|---|---|---|---|",
    ]
    for n, c in cal.items():
        b = c.beta
        otv = f"{c.otava_max_p:.2e} ({c.otava_count})" if c.otava_max_p is not None else "-"
        out.append(
            f"| {n} | {c.histories} | {c.target} | {b.get('pelt', math.nan):.1f} "
            f"| {b.get('binseg', math.nan):.1f} | {b.get('pelt-oracle', math.nan):.1f} | {otv} |"
        )
    for block, title in ((0, "Test alone (min_effect = 0)"), (1, "As the guard runs it (2%)")):
        out += ["", f"### {title}", "", *summary(tally, block, args.histories), ""]
        out += table(tally, block, args.histories)
    print("\n".join(out))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "versions": versions,
                    "seed": args.seed,
                    "calibration": {str(n): c.__dict__ for n, c in cal.items()},
                    "tallies": [
                        {"method": k[0], "n": k[1], "sd": k[2], "step": k[3], "block": k[4]}
                        | t.__dict__
                        for k, t in tally.items()
                    ],
                },
                f,
                indent=1,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
