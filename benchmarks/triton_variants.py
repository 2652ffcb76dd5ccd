"""Check and time Triton FlashAttention variants side by side with torch SDPA, in one run.

Run on the GPU the numbers are for (one invocation does everything):

    PYTHONPATH=. python3 benchmarks/triton_variants.py --out DIR
    PYTHONPATH=. python3 benchmarks/triton_variants.py --profile 4x32x4096x128:full \
        --variant ws-128x128-w4-s2          # one warm launch, then the profiled one (ncu)

The shapes are the suite's triton_flash workloads plus (4, 32, 4096, 128) non-causal,
read through ``tune_triton.load_workloads``. Each variant is a launcher and a config:
``main`` is ``kernels.flash_attention.flash_attention_fwd`` as it stands (pinned
configs); the others call ``benchmarks/variants/tma_fwd.py`` with one config each.
Every (shape, variant) is first checked against the float32 reference on NaN-poisoned
output (error <= 2x same-dtype SDPA's error + the dtype floor, as in the suite), then
timed with ``triton.testing.do_bench`` (median; do_bench clears L2 between calls).
Compiles run first in parallel worker processes so the Triton cache is warm. Prints a
table per shape and a summary last; writes everything, with each compiled kernel's
registers, spills and shared memory, to DIR/triton_variants-<gpu>.json.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import re
import sys
import time
import traceback
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import torch
import torch.nn.functional as F
import triton
import triton.testing

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tune_triton  # benchmarks/ is not a package

from benchmarks.variants import tma_fwd
from kernels import flash_attention as tf

DEVICE = "cuda"


def _v(tma: int, bm: int, bn: int, warps: int, stages: int, ws: int = 0) -> tuple[str, dict]:
    kind = {0: "ptr", 1: "tma", 2: "dtma"}[tma] if not ws else "ws"
    cfg = {"BLOCK_M": bm, "BLOCK_N": bn, "num_warps": warps, "num_stages": stages, "tma": tma}
    if ws:
        cfg["ws"] = ws
    return f"{kind}-{bm}x{bn}-w{warps}-s{stages}", cfg


# ptr: pointer loads (cp.async), the algorithm of the kernel before TMA; tma: 4-D host
# descriptors; dtma: 2-D device descriptors per (batch, head); ws: dtma plus Hopper
# automatic warp specialization (num_warps=4 becomes 12: a producer and 2 consumers).
VARIANTS: dict[str, dict] = dict(
    [
        _v(0, 64, 64, 4, 3),
        _v(1, 64, 64, 4, 3),
        _v(1, 64, 64, 4, 4),
        _v(1, 64, 128, 4, 3),
        _v(1, 128, 64, 8, 3),
        _v(1, 128, 128, 8, 2),
        _v(2, 64, 64, 4, 3),
        _v(2, 128, 64, 4, 2, ws=1),
        _v(2, 128, 64, 4, 3, ws=1),
        _v(2, 128, 128, 4, 2, ws=1),
        _v(2, 128, 128, 4, 3, ws=1),
    ]
)


def applies(name: str, cfg: dict | None, head_dim: int) -> bool:
    if cfg is None:
        return True
    smem = (cfg["BLOCK_M"] + 2 * cfg["num_stages"] * cfg["BLOCK_N"]) * head_dim * 2
    return smem <= 220 * 1024


def label_of(workload) -> str:
    b, h, s, d, causal, _ = workload
    return f"{b}x{h}x{s}x{d}:{'causal' if causal else 'full'}"


def make_inputs(workload, seed: int = 0):
    b, h, s, d, _, dtype = workload
    gen = torch.Generator(device=DEVICE).manual_seed(seed)
    return [
        torch.randn(b, h, s, d, device=DEVICE, dtype=getattr(torch, dtype), generator=gen)
        for _ in range(3)
    ]


def runner(name: str, cfg: dict | None, q, k, v, out, causal: bool):
    """A zero-argument callable that writes attention into out; returns the kernel."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    if cfg is None:  # main

        def fn():
            return tf.flash_attention_fwd(q, k, v, causal=causal, out=out)

        return fn

    def fn():
        return tma_fwd.launch(q, k, v, out, causal, scale, cfg)

    return fn


def kernel_info(kernel) -> dict:
    info = {}
    for key in ("n_regs", "n_spills"):
        value = getattr(kernel, key, None)
        if value is not None:
            info[key] = int(value)
    meta = getattr(kernel, "metadata", None)
    if meta is not None:
        for key in ("shared", "num_warps", "num_stages"):
            value = getattr(meta, key, None)
            if value is not None:
                info[key] = int(value)
    return info


def _warm(jobs) -> list[str]:
    """Worker: compile (and run once) each (workload, variant); returns error lines."""
    errors = []
    for workload, name in jobs:
        try:
            q, k, v = make_inputs(workload)
            out = torch.empty_like(q)
            runner(name, VARIANTS.get(name), q, k, v, out, workload[4])()
            torch.cuda.synchronize()
        except Exception as exc:
            errors.append(f"{label_of(workload)} {name}: {tune_triton.first_line(exc)}")
    return errors


def precompile(workloads, names, jobs: int) -> None:
    # One job per compile key: the specialization depends on head_dim, causal, dtype and
    # on which ints are multiples of 16, not on the sizes, so the smallest shape does.
    seen, todo = set(), []
    for workload in sorted(workloads, key=lambda w: w[0] * w[1] * w[2]):
        _, _, s, d, causal, dtype = workload
        for name in names:
            key = (d, causal, dtype, s % 16 == 0, name)
            if key not in seen and applies(name, VARIANTS.get(name), d):
                seen.add(key)
                todo.append((workload, name))
    if jobs <= 1 or len(todo) <= 1:
        return
    chunks = [todo[i::jobs] for i in range(jobs)]
    t0 = time.monotonic()
    ctx = __import__("multiprocessing").get_context("spawn")
    with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx) as pool:
        for future in as_completed([pool.submit(_warm, c) for c in chunks if c]):
            for line in future.result():
                print(f"  precompile: {line}", flush=True)
    print(f"precompiled {len(todo)} kernels in {time.monotonic() - t0:.0f} s", flush=True)


def bench_workload(workload, names, tolerances, args, deadline) -> dict:
    b, h, s, d, causal, dtype = workload
    label = label_of(workload)
    print(f"\n== {label} {dtype}", flush=True)
    q, k, v = make_inputs(workload)
    factor, floor = tolerances.get(dtype, (2.0, 1e-3))
    checker = tune_triton.Checker(q, k, v, causal, factor, floor)
    work = tune_triton.flops(b, h, s, s, d, causal)
    result = {"label": label, "shape": [b, h, s, d], "causal": causal, "dtype": dtype}
    result.update(flops=work, bound=checker.bound, sdpa_rel_err=checker.sdpa_err, variants={})

    def bench(fn) -> float:
        return float(
            triton.testing.do_bench(
                fn, warmup=args.warmup_ms, rep=args.rep_ms, return_mode="median"
            )
        )

    result["sdpa_ms"] = bench(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
    print(f"  {'sdpa default':<24} {result['sdpa_ms']:8.4f} ms", flush=True)
    out = torch.empty_like(q)
    for name in names:
        cfg = VARIANTS.get(name)
        if not applies(name, cfg, d):
            continue
        row: dict = {}
        result["variants"][name] = row
        if time.monotonic() > deadline:
            row["status"] = "skipped"
            continue
        try:
            fn = runner(name, cfg, q, k, v, out, causal)
            out.fill_(float("nan"))
            kernel = fn()
            torch.cuda.synchronize()
            row.update(kernel_info(kernel) if cfg is not None else {})
            err = checker.error(out)
            row["rel_err"] = err
            if not err <= checker.bound:
                row["status"] = "wrong"
                print(f"  {name:<24} WRONG err {err:.2e} > {checker.bound:.2e}", flush=True)
                continue
            ms = bench(fn)
            row.update(status="ok", ms=ms, tflops=work / ms / 1e9)
            regs = f"regs {row.get('n_regs', '-')} spills {row.get('n_spills', '-')}"
            regs += f" smem {row.get('shared', '-')}"
            print(
                f"  {name:<24} {ms:8.4f} ms {row['tflops']:6.1f} TF "
                f"{ms / result['sdpa_ms']:5.2f}x sdpa  err {err:.1e}  {regs}",
                flush=True,
            )
        except Exception as exc:
            row.update(status="error", error=tune_triton.first_line(exc))
            print(f"  {name:<24} ERROR {row['error']}", flush=True)
            if args.verbose:
                traceback.print_exc()
            torch.cuda.synchronize()
    return result


def summary(results) -> None:
    print("\n" + "=" * 100)
    print(f"{'shape':<22} {'sdpa ms':>8} {'main ms':>8} {'main/sdpa':>9}  best variant")
    for r in results:
        ok = {n: row for n, row in r["variants"].items() if row.get("status") == "ok"}
        main = ok.get("main")
        best = min(ok, key=lambda n: ok[n]["ms"]) if ok else None
        main_txt = f"{main['ms']:8.4f} {main['ms'] / r['sdpa_ms']:8.2f}x" if main else " " * 18
        best_txt = ""
        if best:
            row = ok[best]
            best_txt = f"{best} {row['ms']:.4f} ms {row['tflops']:.1f} TF "
            best_txt += f"{row['ms'] / r['sdpa_ms']:.2f}x"
        print(f"{r['label']:<22} {r['sdpa_ms']:8.4f} {main_txt}  {best_txt}")
    names = list(dict.fromkeys(n for r in results for n in r["variants"]))
    print("\nvariant / sdpa time per shape (- not run, W wrong, E error):")
    print(f"{'variant':<24} " + " ".join(f"{r['label'].split(':')[0][-9:]:>9}" for r in results))
    print(f"{'':<24} " + " ".join(f"{r['label'].split(':')[1][:9]:>9}" for r in results))
    for name in names:
        cells = []
        for r in results:
            row = r["variants"].get(name)
            if row is None or row.get("status") == "skipped":
                cells.append(f"{'-':>9}")
            elif row.get("status") == "ok":
                cells.append(f"{row['ms'] / r['sdpa_ms']:9.3f}")
            else:
                cells.append(f"{'W' if row.get('status') == 'wrong' else 'E':>9}")
        print(f"{name:<24} " + " ".join(cells))


def profile(args) -> int:
    workload = next(w for w in tune_triton.load_workloads(args.suite)[0]
                    if label_of(w) == args.profile)  # fmt: skip
    q, k, v = make_inputs(workload)
    out = torch.empty_like(q)
    fn = runner(args.variant, VARIANTS.get(args.variant), q, k, v, out, workload[4])
    fn()  # compile and warm; ncu --launch-skip 1 profiles the next one
    torch.cuda.synchronize()
    kernel = fn()
    torch.cuda.synchronize()
    print(args.profile, args.variant, kernel_info(kernel) if kernel is not None else {})
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.environ.get("OUT", "gpu-out"))
    parser.add_argument("--suite", default="suites/default.yaml")
    parser.add_argument("--variants", default="", help="regex on variant names ('main' too)")
    parser.add_argument("--no-main", action="store_true", help="skip the main kernel")
    parser.add_argument("--only", default="", help="regex on the shape label")
    parser.add_argument("--warmup-ms", type=float, default=10.0)
    parser.add_argument("--rep-ms", type=float, default=60.0)
    parser.add_argument("--jobs", type=int, default=8, help="parallel compile workers")
    parser.add_argument("--budget-s", type=float, default=200.0)
    parser.add_argument("--profile", default="", help="shape label: one launch for ncu")
    parser.add_argument("--variant", default="main")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("triton_variants: needs a CUDA GPU")
        return 3
    if args.profile:
        return profile(args)

    start = time.monotonic()
    env = tune_triton.environment()
    env["date"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    env["command"] = "PYTHONPATH=. python3 benchmarks/triton_variants.py " + " ".join(
        argv if argv is not None else sys.argv[1:]
    )
    print(json.dumps(env), flush=True)
    workloads, tolerances = tune_triton.load_workloads(args.suite)
    if args.only:
        workloads = [w for w in workloads if re.search(args.only, label_of(w))]
    names = ([] if args.no_main else ["main"]) + list(VARIANTS)
    if args.variants:
        names = [n for n in names if re.search(args.variants, n)]
    precompile(workloads, names, args.jobs)

    deadline = start + args.budget_s
    results = []
    for workload in workloads:
        try:
            results.append(bench_workload(workload, names, tolerances, args, deadline))
        except Exception as exc:
            print(f"{label_of(workload)} failed: {tune_triton.first_line(exc)}", flush=True)
        torch.cuda.empty_cache()

    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    slug = re.sub(r"[^a-z0-9]+", "-", env["gpu"].lower()).strip("-")
    payload = {
        "schema_version": 1,
        "environment": env,
        "do_bench": {"warmup_ms": args.warmup_ms, "rep_ms": args.rep_ms, "return_mode": "median"},
        "variants": {n: VARIANTS.get(n) for n in names},
        "elapsed_s": time.monotonic() - start,
        "workloads": results,
    }
    path = out_dir / f"triton_variants-{slug}.json"
    path.write_text(json.dumps(payload, indent=2, default=str) + "\n", encoding="utf-8")
    summary(results)
    print(f"\ndone in {time.monotonic() - start:.0f} s; wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
