"""The guard's calibration study: false alarms and detection power on a real GPU.

collect  (GPU) measure a pool of fresh-process rounds, each timing every suite
         workload's kernel with a short GPU spin after it ("base"), and with the
         spin longer by 1, 2, 5 and 10 % of the base time ("plus1" ... "plus10").
         Both arms launch the spin, so only its extra length differs.
analyze  (CPU) form PR-like checks from the pool and apply the guard's rule and the
         anchor rules of other tools (benchmarks/calibration_study.py); print the table and
         optionally write docs/CALIBRATION.md and a JSON summary.

compact  (CPU) rewrite pools in the current schema (``SCHEMA_VERSION``), every sample
         kept to the bit.

python benchmarks/calibrate.py collect --out DIR --seconds 500          # on the GPU
python benchmarks/calibrate.py analyze --data docs/data/h100-2026-11-26/calibration-*.json.gz

A pool is gzip-compressed JSON: ``environment``, ``plan``, ``samples_per_round``,
``round_seconds`` and ``rounds``, each round ``{"round", "gpu_state", "samples"}`` with
``samples[workload][arm]`` one arm's samples (seconds per call) in that round. Schema 1
stores them as a list of floats. Schema 2 stores a CUDA-timed arm as what was measured:
``{"calls": c, "tick_ns": g, "delta_ticks": [t0, t1 - t0, t2 - t1, ...]}``, sample i
being ``float32(g * t_i / 1e6) * 1e-3 / c`` (an event pair's elapsed milliseconds, a
float32 of whole nanoseconds, over the calls of one replay); ``c`` is the smallest call
count that gives every sample back to the bit and ``g`` the largest tick dividing those
elapsed times. An arm no such form gives back (a CPU timer's) stays a list of floats.
``load_pool`` reads both schemas and refuses any other.
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
import math
import os
import random
import struct
import subprocess
import sys
import time
from pathlib import Path

ARMS = {"base": 0.0, "plus1": 0.01, "plus2": 0.02, "plus5": 0.05, "plus10": 0.10}
CONTROL = "control"  # torch SDPA (default backend) on the same workload, no spin
SPIN0_CYCLES = 1000  # the spin every arm runs (about 0.5 us at 1.98 GHz)
SCHEMA_VERSION = 2  # what collect and compact write; load_pool reads 1 and 2
MAX_CALLS = 10_000  # measure.Prepared's largest calls per sample
_FLOAT32 = struct.Struct("<f")
ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # run as a script from a checkout


def _plan_timing(suite_path: str, samples: int):
    """The suite's own timing plan (what a PR check does), one host sample to save time."""
    from dataclasses import replace

    from guard.store.suite import load_suite

    return replace(load_suite(suite_path).timing, samples_per_round=samples, host_samples=1)


def _workloads(suite_path: str, kernel: str):
    from guard.store.suite import load_suite

    suite = load_suite(suite_path)
    return [c for c in suite.cases if c.kernel == kernel]


def _spun(fn, cycles: int):
    import torch

    def run(q, k, v, *, causal=False):
        out = fn(q, k, v, causal=causal)
        torch.cuda._sleep(cycles)
        return out

    return run


def worker_setup(args) -> dict:
    """Measure the base arm's time per workload and the spin's cycles per second."""
    import torch

    import kernels
    from guard.measure import measure

    fn = kernels.get(args.kernel).loader()
    plan = _plan_timing(args.suite, 15)
    # Spin rate: time a long spin in the same way samples are taken.
    big = 2_000_000
    g = torch.cuda.CUDAGraph()
    torch.cuda._sleep(big)
    torch.cuda.synchronize()
    with torch.cuda.graph(g):
        torch.cuda._sleep(big)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    rates = []
    for _ in range(10):
        start.record()
        g.replay()
        end.record()
        end.synchronize()
        rates.append(big / (start.elapsed_time(end) * 1e-3))
    rate = sorted(rates)[len(rates) // 2]
    out = {
        "kernel": args.kernel,
        "control": "sdpa",
        "suite": args.suite,
        "cycles_per_s": rate,
        "workloads": {},
    }
    for case in _workloads(args.suite, args.kernel):
        timing = measure.time_case(_spun(fn, SPIN0_CYCLES), case, plan, 1, "cuda")
        base_s = sorted(timing.samples)[len(timing.samples) // 2]
        out["workloads"][case.name] = {
            "case": case.to_json(),
            "base_s": base_s,
            "cycles": {
                arm: SPIN0_CYCLES + round(frac * base_s * rate) for arm, frac in ARMS.items()
            },
        }
    return out


def worker_round(args) -> dict:
    import kernels
    from guard.measure import env as guard_env
    from guard.measure import measure
    from guard.store.suite import Case

    plan_doc = json.loads(Path(args.plan).read_text())
    fn = kernels.get(plan_doc["kernel"]).loader()
    control = kernels.get(plan_doc.get("control", "sdpa")).loader()
    timing = _plan_timing(plan_doc.get("suite", "suites/default.yaml"), args.samples)
    jobs = [(name, arm) for name in plan_doc["workloads"] for arm in [*ARMS, CONTROL]]
    random.Random(args.round).shuffle(jobs)  # interleave arms and workloads
    state0 = guard_env.gpu_state()
    prepared = []
    for name, arm in jobs:
        w = plan_doc["workloads"][name]
        case = Case.from_json(w["case"])
        run = control if arm == CONTROL else _spun(fn, w["cycles"][arm])
        prep = measure.Prepared(run, case, timing, args.round * 7919, "cuda")
        prepared.append(((name, arm), prep))
    # Exactly as the guard's worker samples a round: warm-up, then passes.
    measure.warm_round([p for _, p in prepared], timing)
    result: dict = {}
    for i, n in enumerate(measure.pass_sizes(timing)):
        for (name, arm), prep in prepared[i % len(prepared) :] + prepared[: i % len(prepared)]:
            result.setdefault(name, {}).setdefault(arm, []).extend(prep.sample(n))
    return {
        "round": args.round,
        "gpu_state": {"start": state0, "end": guard_env.gpu_state()},
        "samples": result,
    }


def _python_worker(*extra: str, timeout: float = 300) -> dict:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.run(
        [sys.executable, __file__, *extra],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        cwd=ROOT,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"worker failed: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def collect(args) -> int:
    from guard.measure import env as guard_env

    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    plan = _python_worker("worker-setup", "--kernel", args.kernel, "--suite", args.suite)
    plan_path = out_dir / "calibration-plan.json"
    plan_path.write_text(json.dumps(plan, indent=1))
    print(
        f"setup in {time.monotonic() - t0:.0f} s: spin {plan['cycles_per_s'] / 1e9:.2f} Gcycles/s",
        flush=True,
    )
    environment = guard_env.collect("cuda").__dict__
    rounds, durations = [], []
    r = 0
    while time.monotonic() - t0 < args.seconds - (max(durations) if durations else 30):
        t = time.monotonic()
        try:
            rounds.append(
                _python_worker(
                    "worker-round",
                    "--plan",
                    str(plan_path),
                    "--round",
                    str(r),
                    "--samples",
                    str(args.samples),
                )
            )
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            print(f"round {r} failed: {exc}", flush=True)
        durations.append(time.monotonic() - t)
        r += 1
        if r % 10 == 0:
            print(f"{r} rounds, {time.monotonic() - t0:.0f} s", flush=True)
    doc = {
        "schema_version": SCHEMA_VERSION,
        "environment": environment,
        "plan": plan,
        "samples_per_round": args.samples,
        "rounds": rounds,
        "round_seconds": durations,
    }
    name = (
        out_dir / f"calibration-{environment['gpu_slug']}-{time.strftime('%Y%m%dT%H%M%S')}.json.gz"
    )
    write_pool(name, doc)
    mean_round = sum(durations) / max(len(durations), 1)
    print(f"wrote {name}: {len(rounds)} rounds, {mean_round:.1f} s per round", flush=True)
    return 0


def _float32(value: float) -> float:
    """``value`` rounded to the nearest float32 (as a CUDA event's elapsed time is)."""
    return _FLOAT32.unpack(_FLOAT32.pack(value))[0]


def decode_samples(stored: object, where: str = "samples") -> list[float]:
    """One arm's samples of one round, in seconds per call, from a pool's stored form."""
    if isinstance(stored, list):
        if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in stored):
            raise ValueError(f"{where}: a list of samples holds a non-number")
        return [float(x) for x in stored]
    if not isinstance(stored, dict) or set(stored) != {"calls", "tick_ns", "delta_ticks"}:
        raise ValueError(f"{where}: neither a list of samples nor {{calls, tick_ns, delta_ticks}}")
    calls, tick, deltas = stored["calls"], stored["tick_ns"], stored["delta_ticks"]
    ints = [calls, tick, *deltas] if isinstance(deltas, list) else None
    if ints is None or not all(isinstance(v, int) and not isinstance(v, bool) for v in ints):
        raise ValueError(f"{where}: calls, tick_ns and delta_ticks must be whole numbers")
    if calls < 1 or tick < 1:
        raise ValueError(f"{where}: calls and tick_ns must be positive")
    out, ticks = [], 0
    for d in deltas:
        ticks += d
        out.append(_float32(tick * ticks / 1e6) * 1e-3 / calls)
    return out


def encode_samples(samples: list[float]) -> object:
    """The stored form of one arm's samples (schema 2): the CUDA event form when one
    gives every sample back to the bit (``decode_samples``), the list itself otherwise."""
    import numpy as np

    x = np.asarray(samples, dtype=np.float64)
    if x.size == 0 or not np.all(np.isfinite(x)) or np.any(x <= 0):
        return list(samples)
    calls = np.arange(1, MAX_CALLS + 1, dtype=np.float64)[:, None]
    ns = np.rint(x[None, :] * calls * 1e9)
    back = (ns / 1e6).astype(np.float32).astype(np.float64) * 1e-3 / calls
    for row in np.flatnonzero(np.all(back == x[None, :], axis=1)):
        whole = [int(v) for v in ns[row]]
        tick = math.gcd(*whole)
        if tick < 1:
            continue
        ticks = [v // tick for v in whole]
        stored = {
            "calls": int(row) + 1,
            "tick_ns": tick,
            "delta_ticks": [ticks[0]] + [b - a for a, b in itertools.pairwise(ticks)],
        }
        if decode_samples(stored) == [float(v) for v in samples]:
            return stored
    return list(samples)


def load_pool(path: str | Path) -> dict:
    """A pool with every arm's samples as a list of floats (seconds per call), whatever
    schema it is stored in; a schema this reader does not know is refused."""
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        doc = json.load(fh)
    version = doc.get("schema_version") if isinstance(doc, dict) else None
    if version not in (1, 2):
        raise ValueError(
            f"{path}: calibration pool schema_version {version!r} is not one this reader "
            f"knows (1, 2)"
        )
    for i, r in enumerate(doc["rounds"]):
        decoded: dict[str, dict[str, list[float]]] = {}
        for w, arms in r["samples"].items():
            for arm, stored in arms.items():
                where = f"{path}: rounds[{i}].samples.{w}.{arm}"
                if version == 1 and not isinstance(stored, list):
                    raise ValueError(f"{where}: schema 1 stores samples as a list")
                decoded.setdefault(w, {})[arm] = decode_samples(stored, where)
        r["samples"] = decoded
    return doc


def write_pool(path: str | Path, doc: dict) -> None:
    """Write ``doc`` (samples as lists of floats) in the current schema, gzip-compressed,
    the same bytes for the same pool; every sample reads back as it was
    (``encode_samples``)."""
    rounds = []
    for r in doc["rounds"]:
        samples = {
            w: {a: encode_samples(xs) for a, xs in arms.items()} for w, arms in r["samples"].items()
        }
        rounds.append({**r, "samples": samples})
    out = {**doc, "schema_version": SCHEMA_VERSION, "rounds": rounds}
    data = json.dumps(out, separators=(",", ":")).encode("utf-8")
    Path(path).write_bytes(gzip.compress(data, compresslevel=9, mtime=0))


def load_pools(paths: list[str]):
    return [load_pool(p) for p in paths]


def compact(args) -> int:
    for p in args.pools:
        before = Path(p).stat().st_size
        write_pool(p, load_pool(p))
        print(f"{p}: {before} -> {Path(p).stat().st_size} bytes")
    return 0


def analyze(args) -> int:
    """The guard's rule (and the anchors) over PR-like checks formed from the pools.

    ``--mode paired``: both arms from one pool (one machine), both growing from
    ``--rounds`` to ``--max-rounds`` (the PR check: ``core.compare_arms``), rule with
    the calibrated margin. ``--mode stored``: a stored baseline of
    ``--baseline-rounds`` against a candidate growing; with ``--across`` the baseline
    comes from the first ``--data`` pool and the candidate from the ``--across`` pool
    (another machine), and the rule adds the drift allowance."""
    import numpy as np

    from benchmarks import calibration_study as cal
    from guard.base.stats import Rule
    from guard.store.suite import load_suite

    docs = load_pools(args.data)
    plan = load_suite(args.suite).timing
    rounds = [r["samples"] for d in docs for r in d["rounds"]]
    workloads = list(docs[0]["plan"]["workloads"])
    arms = [a for a in ARMS if a != "base"]
    rng = np.random.default_rng(args.seed)
    grow = args.max_rounds - args.rounds
    if args.across:
        other = load_pools(args.across)
        n_a = len(rounds)
        rounds += [r["samples"] for d in other for r in d["rounds"]]
        checks = cal.make_checks_across(
            n_a, len(rounds) - n_a, args.rounds, grow, args.checks, rng, args.baseline_rounds
        )
    elif args.mode == "paired":
        checks = cal.make_checks(len(rounds), args.rounds, grow, args.checks, rng)
    else:
        checks = cal.make_checks(
            len(rounds), args.rounds, grow, args.checks, rng, baseline_rounds=args.baseline_rounds
        )
    paired = args.mode == "paired" and not args.across
    rules = {}
    for d in args.min_effect:
        rule = Rule(d, plan.margin) if paired else Rule(d + plan.drift, plan.drift)
        label = f"guard {'paired' if paired else 'stored'} (d {d:.0%}, margin {rule.margin:.1%})"
        rules[label] = cal.rule_guard(rule, plan.alpha)
    if not args.guard_only:
        rules.update(
            {
                "pytest-benchmark median:5%": cal.rule_pytest_benchmark,
                "mann-whitney p<0.05": cal.rule_mann_whitney,
                "asv (p<0.002, >10%)": cal.rule_asv,
                "criterion (95% CI > +1%)": cal.rule_criterion,
            }
        )
    rates = [
        cal.evaluate(rounds, workloads, arms, rule, checks, name, seed=args.seed)
        for name, rule in rules.items()
    ]
    noise = {w: cal.variance_components(rounds, w) for w in workloads}
    summary = {
        "gpu": docs[0]["environment"]["gpu_name"],
        "mode": "across" if args.across else args.mode,
        "n_rounds": len(rounds),
        "n_pools": len(docs) + len(args.across or []),
        "checks": args.checks,
        "rounds_per_arm": args.rounds,
        "baseline_rounds": args.baseline_rounds,
        "max_rounds": args.max_rounds,
        "noise": noise,
        "rules": [
            {
                "rule": r.rule,
                "false_alarm": r.false_alarm,
                "aa_inconclusive": r.aa_inconclusive,
                "power": r.power,
            }
            for r in rates
        ],
    }
    header = f"{'rule':44} {'A/A fail':>8} {'A/A open':>8} " + " ".join(f"{a:>7}" for a in arms)
    print(header)
    for r in rates:
        print(
            f"{r.rule:44} {r.false_alarm:8.2f} {r.aa_inconclusive:8.3f} "
            + " ".join(f"{r.min_power(a):7.2f}" for a in arms)
        )
    print("(power: the lowest per-workload detection rate over the suite)")
    for r in rates[: len(args.min_effect)]:
        for arm in ("plus2", "plus5"):
            per = " ".join(f"{w.split('-', 1)[1]}={p:.2f}" for w, p in r.power[arm].items())
            print(f"  {r.rule} {arm}: {per}")
    for w, (between, within, normalized) in noise.items():
        print(
            f"noise {w:28} between {between:.2%} within {within:.2%} "
            f"between/control {normalized:.2%}"
        )
    if args.coverage:
        # Does the interval (6 rounds each side, the per-case level) hold the pool's
        # own ratio? At a nominal 90% a level that is too narrow shows up at once.
        cov_checks = cal.make_checks(len(rounds), args.rounds, 0, args.coverage, rng)
        summary["coverage_at_90"] = {
            arm: cal.coverage(rounds, workloads, arm, cov_checks, 0.90, seed=args.seed)
            for arm in ("plus2", "plus5")
        }
        print(f"interval coverage at a nominal 90%: {summary['coverage_at_90']}")
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=1) + "\n")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("collect")
    c.add_argument("--out", required=True)
    c.add_argument("--seconds", type=float, default=500)
    c.add_argument("--kernel", default="triton_flash")
    c.add_argument("--suite", default="suites/default.yaml")
    c.add_argument("--samples", type=int, default=25)
    s = sub.add_parser("worker-setup")
    s.add_argument("--kernel", required=True)
    s.add_argument("--suite", required=True)
    w = sub.add_parser("worker-round")
    w.add_argument("--plan", required=True)
    w.add_argument("--round", type=int, required=True)
    w.add_argument("--samples", type=int, default=25)
    a = sub.add_parser("analyze")
    a.add_argument("--data", nargs="+", required=True)
    a.add_argument("--rounds", type=int, default=6)
    a.add_argument("--max-rounds", type=int, default=20)
    a.add_argument("--checks", type=int, default=100)
    a.add_argument(
        "--baseline-rounds",
        type=int,
        default=20,
        help="rounds of the stored baseline (0: a live comparison, both arms grow)",
    )
    a.add_argument("--min-effect", type=float, nargs="+", default=[0.02])
    a.add_argument("--mode", choices=["paired", "stored"], default="paired")
    a.add_argument("--across", nargs="+", help="candidate pools from another machine (stored)")
    a.add_argument("--suite", default="suites/default.yaml", help="margin, drift, alpha")
    a.add_argument("--guard-only", action="store_true", help="skip the anchor rules")
    a.add_argument("--seed", type=int, default=0)
    a.add_argument(
        "--coverage",
        type=int,
        default=0,
        metavar="N",
        help="also measure interval coverage over N checks",
    )
    a.add_argument("--json")
    k = sub.add_parser("compact")
    k.add_argument("pools", nargs="+", help="pool files, rewritten in place")
    args = parser.parse_args()
    if args.cmd == "collect":
        return collect(args)
    if args.cmd == "compact":
        return compact(args)
    if args.cmd == "worker-setup":
        print(json.dumps(worker_setup(args)))
        return 0
    if args.cmd == "worker-round":
        print(json.dumps(worker_round(args)))
        return 0
    return analyze(args)


if __name__ == "__main__":
    sys.exit(main())
