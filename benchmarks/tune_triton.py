"""Time every Triton FlashAttention config on the suite shapes and suggest PINNED entries.

Run on the GPU that the pinned configs are for:

    PYTHONPATH=. python benchmarks/tune_triton.py --out DIR

For each workload of the suite (``suites/default.yaml``, cases of ``triton_flash``) plus
(4, 32, 4096, 128) non-causal fp16, every config of ``kernels.flash_attention.CONFIGS``
that fits this GPU's shared memory is first checked against the float32 reference (the
suite's tolerance rule: error <= factor * error of same-dtype torch SDPA + floor), then
timed with ``triton.testing.do_bench`` (median). The pinned default and torch SDPA's
default backend are timed on the same inputs. One failing config is reported and
skipped, never fatal. Prints a table and suggested ``PINNED`` lines; writes the raw
numbers to DIR/tune_triton-<gpu>.json.

Budget: compiles dominate the first run (Triton caches them in ~/.triton/cache);
``--budget-s`` stops timing new configs once spent, so the run ends in time anyway.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import re
import sys
import time
import traceback
from pathlib import Path

import torch
import torch.nn.functional as F
import triton
import triton.testing

from kernels import triton_flash as tf
from kernels.reference import attention_reference

# (batch, heads, seq, head_dim, causal, dtype): beside the suite's shapes, a large
# bandwidth-rich one where tile choice matters most.
EXTRA_WORKLOADS = [(4, 32, 4096, 128, False, "float16")]
# Used only when the suite cannot be read (guard package missing or changed).
FALLBACK_WORKLOADS = [
    (1, 8, 128, 64, False, "float16"),
    (1, 8, 512, 64, False, "float16"),
    (1, 8, 512, 64, True, "float16"),
    (1, 16, 1024, 64, False, "float16"),
    (4, 16, 1024, 64, True, "float16"),
    (2, 8, 2048, 128, False, "float16"),
    (2, 8, 2048, 128, True, "float16"),
]
# error <= FACTOR * error(SDPA, same dtype) + floor, as in suites/default.yaml.
DEFAULT_FACTOR = 2.0
DEFAULT_FLOORS = {"float16": 1e-3, "bfloat16": 8e-3}
# Above this many scores per tensor the float32 reference runs on two (batch, head)
# slices only: the first and the last, which between them catch stride mistakes.
FULL_CHECK_MAX_SCORES = 1 << 28
DEVICE = "cuda"


def log(message: str) -> None:
    print(message, flush=True)


def flops(batch: int, heads: int, seq_q: int, seq_k: int, head_dim: int, causal: bool) -> float:
    """4*B*H*Sq*Sk*D, half when causal (same rule as guard.store.suite.flops)."""
    total = 4.0 * batch * heads * seq_q * seq_k * head_dim
    return total / 2 if causal else total


def load_workloads(suite_path: str):
    """Unique (B, H, S, D, causal, dtype) of the suite's triton_flash cases, plus extras."""
    tolerances = {dt: (DEFAULT_FACTOR, floor) for dt, floor in DEFAULT_FLOORS.items()}
    try:
        from guard.store.suite import load_suite

        suite = load_suite(suite_path)
        workloads = []
        for case in suite.cases:
            s = case.shape
            if case.kernel != "triton_flash" or s.sk != s.seq_q or s.hkv != s.heads:
                continue
            item = (s.batch, s.heads, s.seq_q, s.head_dim, case.causal, case.dtype)
            if item not in workloads:
                workloads.append(item)
        for dtype, tol in suite.tolerances.items():
            tolerances[dtype] = (tol.factor, tol.rel_norm_floor)
        log(f"suite {suite_path}: {len(workloads)} triton_flash workloads")
    except Exception as exc:  # a guard change must not stop a tuning run
        log(f"could not read the suite ({type(exc).__name__}: {exc}); using the built-in list")
        workloads = list(FALLBACK_WORKLOADS)
    for item in EXTRA_WORKLOADS:
        if item not in workloads:
            workloads.append(item)
    return workloads, tolerances


def rel_err(x: torch.Tensor, ref: torch.Tensor) -> float:
    return ((x.float() - ref).norm() / ref.norm()).item()


def check_slices(batch: int, heads: int, seq: int):
    if batch * heads * seq * seq <= FULL_CHECK_MAX_SCORES:
        return [(slice(None), slice(None))]
    return [(slice(0, 1), slice(0, 1)), (slice(batch - 1, batch), slice(heads - 1, heads))]


class Checker:
    """Reference and SDPA error on fixed slices, computed once per workload."""

    def __init__(self, q, k, v, causal, factor, floor):
        self.q, self.k, self.v, self.causal = q, k, v, causal
        self.slices = check_slices(q.shape[0], q.shape[1], q.shape[2])
        self.refs = []
        self.bound = 0.0
        sdpa_err = 0.0
        for b, h in self.slices:
            qs, ks, vs = q[b, h], k[b, h], v[b, h]
            ref = attention_reference(qs, ks, vs, causal=causal, dtype=torch.float32)
            yard = F.scaled_dot_product_attention(qs, ks, vs, is_causal=causal)
            sdpa_err = max(sdpa_err, rel_err(yard, ref))
            self.refs.append(ref)
        self.sdpa_err = sdpa_err
        self.bound = factor * sdpa_err + floor

    def error(self, out: torch.Tensor) -> float:
        if not torch.isfinite(out).all():
            return math.inf
        return max(
            rel_err(out[b, h], ref) for (b, h), ref in zip(self.slices, self.refs, strict=True)
        )


def config_label(config: triton.Config) -> str:
    kw = config.kwargs
    return f"M{kw['BLOCK_M']} N{kw['BLOCK_N']} w{config.num_warps} s{config.num_stages}"


def config_dict(config: triton.Config) -> dict:
    return {
        "BLOCK_M": config.kwargs["BLOCK_M"],
        "BLOCK_N": config.kwargs["BLOCK_N"],
        "num_warps": config.num_warps,
        "num_stages": config.num_stages,
    }


def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:200]


def bench(fn, args) -> float:
    return float(
        triton.testing.do_bench(fn, warmup=args.warmup_ms, rep=args.rep_ms, return_mode="median")
    )


def tune_workload(workload, tolerances, args, deadline):
    batch, heads, seq, head_dim, causal, dtype_name = workload
    dtype = getattr(torch, dtype_name)
    label = f"{batch}x{heads}x{seq}x{head_dim} {'causal' if causal else 'full'} {dtype_name}"
    log(f"\n== {label}")
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    q, k, v = (
        torch.randn(batch, heads, seq, head_dim, device=DEVICE, dtype=dtype, generator=gen)
        for _ in range(3)
    )
    factor, floor = tolerances.get(dtype_name, (DEFAULT_FACTOR, DEFAULT_FLOORS["float16"]))
    checker = Checker(q, k, v, causal, factor, floor)
    work = flops(batch, heads, seq, seq, head_dim, causal)
    result = {
        "shape": [batch, heads, seq, head_dim],
        "causal": causal,
        "dtype": dtype_name,
        "flops": work,
        "sdpa_rel_err": checker.sdpa_err,
        "bound": checker.bound,
        "configs": [],
    }

    try:
        result["sdpa_ms"] = bench(
            lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal), args
        )
    except Exception as exc:
        result["sdpa_ms"] = None
        log(f"  sdpa failed: {first_line(exc)}")

    out = torch.empty_like(q)
    pinned = tf.pinned_config(q.device, head_dim, causal, q.element_size())
    result["pinned"] = config_dict(pinned)
    fitting = tf.prune_configs(tf.CONFIGS, {"Q": q})
    for index, config in enumerate(tf.CONFIGS, 1):
        row = {"config": config_dict(config), "label": config_label(config)}
        result["configs"].append(row)
        prefix = f"  [{index:2d}/{len(tf.CONFIGS)}] {row['label']:<18}"
        if config not in fitting:
            row["status"] = "pruned"
            log(f"{prefix} pruned (smem estimate {tf.smem_bytes(config, head_dim)} B)")
            continue
        if time.monotonic() > deadline:
            row["status"] = "skipped"
            log(f"{prefix} skipped (--budget-s spent)")
            continue
        try:
            out.fill_(float("nan"))
            tf.flash_attention_fwd_config(q, k, v, config, causal=causal, out=out)
            torch.cuda.synchronize(q.device)
            err = checker.error(out)
            row["rel_err"] = err
            if not err <= checker.bound:
                row["status"] = "wrong"
                log(f"{prefix} WRONG rel err {err:.2e} > bound {checker.bound:.2e}")
                continue
            ms = bench(
                lambda c=config: tf.flash_attention_fwd_config(q, k, v, c, causal=causal, out=out),
                args,
            )
            row.update(status="ok", ms=ms, tflops=work / ms / 1e9)
            log(f"{prefix} {ms:8.4f} ms {row['tflops']:7.1f} TFLOPS  err {err:.1e}")
        except Exception as exc:  # one broken config must not end the run
            row.update(status="error", error=first_line(exc))
            log(f"{prefix} ERROR {row['error']}")
            if args.verbose:
                traceback.print_exc()
            torch.cuda.synchronize()

    ok = [r for r in result["configs"] if r.get("status") == "ok"]
    result["best"] = min(ok, key=lambda r: r["ms"]) if ok else None
    pinned_rows = [r for r in ok if r["config"] == result["pinned"]]
    result["pinned_ms"] = pinned_rows[0]["ms"] if pinned_rows else None
    if result["pinned_ms"] is None and time.monotonic() < deadline:
        # The pinned entry is not among CONFIGS (or failed there): time the default path.
        try:
            result["pinned_ms"] = bench(
                lambda: tf.flash_attention_fwd(q, k, v, causal=causal, out=out), args
            )
        except Exception as exc:
            log(f"  pinned default failed: {first_line(exc)}")
    return label, result


def suggest_pinned(arch: str, results) -> list[str]:
    """Per (head_dim, causal): the config with the best geometric-mean slowdown vs each
    shape's best, so one pinned entry serves every sequence length of that group."""
    groups: dict[tuple[int, bool], list[dict]] = {}
    for r in results:
        groups.setdefault((r["shape"][3], r["causal"]), []).append(r)
    lines = []
    for (head_dim, causal), rs in sorted(groups.items()):
        scores: dict[str, list[float]] = {}
        configs: dict[str, dict] = {}
        for r in rs:
            if not r.get("best"):
                continue
            for row in r["configs"]:
                if row.get("status") == "ok":
                    scores.setdefault(row["label"], []).append(row["ms"] / r["best"]["ms"])
                    configs[row["label"]] = row["config"]
        complete = {k: s for k, s in scores.items() if len(s) == len(rs)}
        if not complete:
            continue
        label = min(complete, key=lambda k: sum(map(math.log, complete[k])))
        c = configs[label]
        slowdown = math.exp(sum(map(math.log, complete[label])) / len(complete[label]))
        lines.append(
            f'PINNED[("{arch}", {head_dim}, {causal})] = _config({c["BLOCK_M"]}, {c["BLOCK_N"]}, '
            f"{c['num_warps']}, {c['num_stages']})  # geo-mean {slowdown:.3f}x of per-shape best"
        )
    return lines


def environment() -> dict:
    index = torch.cuda.current_device()
    props = torch.cuda.get_device_properties(index)
    major, minor = torch.cuda.get_device_capability(index)
    return {
        "gpu": props.name,
        "arch": f"sm_{major}{minor}",
        "sm_count": props.multi_processor_count,
        "max_shared_mem": tf.smem_budget(torch.device("cuda", index)),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "triton": triton.__version__,
        "python": platform.python_version(),
    }


def print_table(results) -> None:
    def cell(value, width):
        return f"{value:>{width}.4f}" if value is not None else f"{'-':>{width}}"

    header = (
        f"{'shape':<27} {'best config':<18} {'ms':>8} {'TFLOPS':>8} "
        f"{'pinned ms':>9} {'sdpa ms':>8} {'best/sdpa':>9}"
    )
    log("\n" + header)
    for label, r in results:
        best, sdpa = r.get("best"), r.get("sdpa_ms")
        if best is None:
            log(f"{label:<27} (no config passed)")
            continue
        ratio = f"{best['ms'] / sdpa:8.2f}x" if sdpa else f"{'-':>9}"
        log(
            f"{label:<27} {best['label']:<18} {best['ms']:8.4f} {best['tflops']:8.1f} "
            f"{cell(r.get('pinned_ms'), 9)} {cell(sdpa, 8)} {ratio}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="directory for the JSON results")
    parser.add_argument("--suite", default="suites/default.yaml")
    parser.add_argument("--warmup-ms", type=float, default=10.0, help="do_bench warmup")
    parser.add_argument("--rep-ms", type=float, default=50.0, help="do_bench repetition time")
    parser.add_argument(
        "--budget-s", type=float, default=200.0, help="stop timing new configs after this"
    )
    parser.add_argument("--only", default="", help="regex on the workload label, e.g. 'x128 '")
    parser.add_argument(
        "--verbose", action="store_true", help="print tracebacks of failing configs"
    )
    args = parser.parse_args(argv)

    if not torch.cuda.is_available():
        log("tune_triton: needs a CUDA GPU (torch sees none)")
        return 3
    start = time.monotonic()
    deadline = start + args.budget_s
    env = environment()
    log(
        f"{env['gpu']} {env['arch']}, {env['sm_count']} SMs, {env['max_shared_mem']} B smem/block; "
        f"torch {env['torch']}, triton {env['triton']}"
    )
    workloads, tolerances = load_workloads(args.suite)
    if args.only:
        workloads = [w for w in workloads if re.search(args.only, "{}x{}x{}x{} ".format(*w[:4]))]

    results = []
    for workload in workloads:
        try:
            results.append(tune_workload(workload, tolerances, args, deadline))
        except Exception as exc:  # e.g. out of memory for the reference
            log(f"workload {workload} failed: {first_line(exc)}")
            if args.verbose:
                traceback.print_exc()
        torch.cuda.empty_cache()

    print_table(results)
    suggestions = suggest_pinned(env["arch"], [r for _, r in results])
    if suggestions:
        log("\nsuggested PINNED entries (kernels/flash_plan.py):")
        for line in suggestions:
            log("  " + line)
    elapsed = time.monotonic() - start
    log(f"\ndone in {elapsed:.0f} s")

    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    slug = re.sub(r"[^a-z0-9]+", "-", env["gpu"].lower()).strip("-")
    path = out_dir / f"tune_triton-{slug}.json"
    payload = {
        "schema_version": 1,
        "environment": env,
        "do_bench": {"warmup_ms": args.warmup_ms, "rep_ms": args.rep_ms, "return_mode": "median"},
        "elapsed_s": elapsed,
        "workloads": [r for _, r in results],
        "suggested_pinned": suggestions,
    }
    path.write_text(json.dumps(payload, indent=2, default=str) + "\n", encoding="utf-8")
    log(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
