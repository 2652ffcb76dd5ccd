"""Time the CUDA C++ kernels side by side with SDPA's default backend, in interleaved rounds.

    PYTHONPATH=. python benchmarks/cuda_vs_cudnn.py [--rounds 5] [--json OUT.json]

Per shape: each round times the Hopper kernel (``kernel="hopper"``, sm_90 only), the
``mma.sync`` kernel and ``torch.nn.functional.scaled_dot_product_attention`` with its
default backend choice (cuDNN on Hopper), in an order that rotates each round, on the
same fresh random inputs (``triton.testing.do_bench``: median of CUDA-event timings).
The ratio ours / SDPA is taken within each round; the table gives its median over rounds
and the [min, max] of the rounds. TFLOPS count 4*B*Hq*Sq*Sk*D, half when causal.
Before timing, each kernel's output is checked against a float32 reference (max error
at most 2x SDPA's + one eps of the output's magnitude); a wrong kernel is not timed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kernels import cuda_flash
from kernels.reference import attention_reference
from kernels.sdpa import sdpa_default

# (batch, heads, heads_kv, seq, head_dim, dtype, causal): docs/PERFORMANCE.md's shapes
# and the default suite's.
SHAPES: list[tuple[int, int, int, int, int, str, bool]] = [
    (1, 8, 8, 128, 64, "float16", False),
    (1, 8, 8, 512, 64, "float16", False),
    (1, 8, 8, 512, 64, "float16", True),
    (1, 16, 16, 1024, 64, "float16", False),
    (4, 16, 16, 1024, 64, "float16", True),
    (2, 8, 8, 2048, 128, "float16", False),
    (2, 8, 8, 2048, 128, "float16", True),
    (4, 32, 32, 4096, 128, "float16", False),
    (4, 32, 32, 4096, 128, "float16", True),
    (1, 32, 8, 8192, 128, "bfloat16", True),
    (16, 16, 16, 512, 64, "float16", False),
    (4, 16, 16, 2048, 64, "bfloat16", False),
    (8, 32, 32, 1024, 64, "bfloat16", True),
    (1, 16, 16, 16384, 128, "float16", False),
    (1, 16, 16, 16384, 128, "bfloat16", True),
    (2, 16, 16, 4097, 128, "bfloat16", False),
    (1, 32, 4, 16384, 128, "bfloat16", False),
]


def tflops(shape: tuple[int, int, int, int, int, str, bool], ms: float) -> float:
    b, h, _, s, d, _, causal = shape
    flops = 4.0 * b * h * s * s * d * (0.5 if causal else 1.0)
    return flops / (ms * 1e-3) / 1e12


def check(out: torch.Tensor, q, k, v, causal: bool) -> str | None:
    # The reference of the first batch's first key head and its query heads (a float32
    # reference of the whole problem can take more memory than the GPU has).
    group = q.shape[1] // k.shape[1]
    out, q, k, v = out[:1, :group], q[:1, :group], k[:1, :1], v[:1, :1]
    ref = attention_reference(q, k, v, causal=causal, dtype=torch.float32)
    if not torch.isfinite(out).all():
        return "non-finite output"
    err = (out.float() - ref).abs().max().item()
    sdpa_err = (sdpa_default(q, k, v, causal=causal).float() - ref).abs().max().item()
    floor = torch.finfo(q.dtype).eps * max(ref.abs().max().item(), 1.0)
    if err > 2 * sdpa_err + floor:
        return f"max error {err:.3e} > 2 x SDPA's {sdpa_err:.3e} + {floor:.1e}"
    return None


def make_providers(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, *, hopper: bool, mma_sync: bool
) -> dict[str, Callable[[], torch.Tensor]]:
    providers: dict[str, Callable[[], torch.Tensor]] = {
        "sdpa": lambda: sdpa_default(q, k, v, causal=causal),
    }
    if mma_sync:
        providers["mma_sync"] = lambda: cuda_flash.flash_attention_fwd(
            q, k, v, causal=causal, kernel="mma_sync"
        )
    if hopper:
        providers["hopper"] = lambda: cuda_flash.flash_attention_fwd(
            q, k, v, causal=causal, kernel="hopper"
        )
    return providers


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--max-shapes", type=int, default=len(SHAPES))
    parser.add_argument("--no-mma-sync", action="store_true", help="time the Hopper kernel only")
    parser.add_argument("--head-dim", type=int, choices=(64, 128), help="only these shapes")
    args = parser.parse_args(argv)
    import triton.testing

    hopper = torch.cuda.get_device_capability() == cuda_flash.HOPPER
    t0 = time.perf_counter()
    cuda_flash.load_extension(torch.cuda.get_device_capability())
    build_s = time.perf_counter() - t0
    print(f"{torch.cuda.get_device_name()}: extension ready in {build_s:.1f} s", flush=True)
    rows = []
    shapes = [x for x in SHAPES if args.head_dim in (None, x[4])]
    for shape in shapes[: args.max_shapes]:
        b, h, hkv, s, d, dtype_name, causal = shape
        dtype = getattr(torch, dtype_name)
        q = torch.randn(b, h, s, d, device="cuda", dtype=dtype)
        k = torch.randn(b, hkv, s, d, device="cuda", dtype=dtype)
        v = torch.randn(b, hkv, s, d, device="cuda", dtype=dtype)
        providers = make_providers(q, k, v, causal, hopper=hopper, mma_sync=not args.no_mma_sync)
        wrong = {}
        for name in [n for n in providers if n != "sdpa"]:
            reason = check(providers[name](), q, k, v, causal)
            if reason:
                wrong[name] = reason
                del providers[name]
        names = list(providers)
        times: dict[str, list[float]] = {n: [] for n in names}
        for r in range(args.rounds):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                times[name].append(triton.testing.do_bench(providers[name], warmup=25, rep=100))
        row: dict[str, object] = {"shape": shape, "wrong": wrong}
        for name in names:
            row[f"{name}_ms"] = statistics.median(times[name])
            row[f"{name}_tflops"] = tflops(shape, statistics.median(times[name]))
            if name != "sdpa":
                ratios = [a / c for a, c in zip(times[name], times["sdpa"], strict=True)]
                row[f"{name}_ratio"] = statistics.median(ratios)
                row[f"{name}_ratio_range"] = (min(ratios), max(ratios))
        rows.append(row)
        parts = [f"{b},{h},{hkv},{s},{d} {dtype_name[:4]} {'causal' if causal else 'full'}:"]
        for name in names:
            if name == "sdpa":
                parts.append(f"sdpa {row['sdpa_ms']:.3f} ms ({row['sdpa_tflops']:.0f} TF)")
            else:
                lo, hi = row[f"{name}_ratio_range"]  # type: ignore[misc]
                parts.append(
                    f"{name} {row[f'{name}_ratio']:.3f}x [{lo:.3f}, {hi:.3f}] "
                    f"({row[f'{name}_tflops']:.0f} TF)"
                )
        parts += [f"{n} WRONG: {w}" for n, w in wrong.items()]
        print("  ".join(parts), flush=True)
    if args.json:
        args.json.write_text(
            json.dumps(
                {"gpu": torch.cuda.get_device_name(), "build_s": build_s, "rows": rows}, indent=1
            )
        )
    return 1 if any(row["wrong"] for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
