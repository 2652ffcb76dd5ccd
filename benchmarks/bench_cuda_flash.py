"""Build, check and time the CUDA FlashAttention-2 forward against torch SDPA.

Run on a GPU machine from the repository root:

    PYTHONPATH=. python benchmarks/bench_cuda_flash.py [--dtype float16 bfloat16]
    SHOW_PTXAS=1 PYTHONPATH=. python benchmarks/bench_cuda_flash.py   # + registers, spills

Shapes come from the suite (``suites/default.yaml``; a built-in copy of its 7 shapes if
the guard package cannot read it). Per shape: the kernel's output is checked against
a float32 reference (max abs error <= 2 x the error of same-dtype torch SDPA + one eps
of the output's magnitude), then ``cuda_flash``, SDPA pinned to its flash backend and
SDPA's default choice are timed on the same inputs, each as the median of
``triton.testing.do_bench`` (CUDA events over many calls when Triton is missing).
TFLOPS use 4*B*H*Sq*Sk*D, half when causal. One failing shape or provider is reported
and skipped, never fatal.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import torch

from kernels import cuda_flash
from kernels.reference import attention_reference
from kernels.sdpa import sdpa_default, sdpa_flash

# (batch, heads, seq, head_dim, causal): used only when the suite cannot be read.
FALLBACK_SHAPES = [
    (1, 8, 128, 64, False),
    (1, 8, 512, 64, False),
    (1, 8, 512, 64, True),
    (1, 16, 1024, 64, False),
    (4, 16, 1024, 64, True),
    (2, 8, 2048, 128, False),
    (2, 8, 2048, 128, True),
]
PROVIDERS: dict[str, Callable[..., torch.Tensor]] = {
    "cuda_flash": cuda_flash.flash_attention_fwd,
    "sdpa_flash": sdpa_flash,
    "sdpa": sdpa_default,
}


def log(message: str = "") -> None:
    print(message, flush=True)


def first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"[:240]


def flops(batch: int, heads: int, seq_q: int, seq_k: int, head_dim: int, causal: bool) -> float:
    """4*B*H*Sq*Sk*D, half when causal (guard.store.suite.flops, without its Shape type)."""
    total = 4.0 * batch * heads * seq_q * seq_k * head_dim
    return total / 2 if causal else total


def load_shapes(suite_path: str) -> list[tuple[int, int, int, int, bool]]:
    try:
        from guard.store.suite import load_suite

        suite = load_suite(suite_path)
        shapes = []
        for case in suite.cases:
            s = case.shape
            if s.sk != s.seq_q or s.hkv != s.heads:
                continue
            item = (s.batch, s.heads, s.seq_q, s.head_dim, case.causal)
            if item not in shapes:
                shapes.append(item)
        log(f"suite {suite_path}: {len(shapes)} shapes")
        return shapes
    except Exception as exc:  # a guard change must not stop a benchmark
        log(f"could not read the suite ({first_line(exc)}); using the built-in shapes")
        return list(FALLBACK_SHAPES)


def make_timer(warmup_ms: int, rep_ms: int) -> Callable[[Callable[[], object]], float]:
    try:
        import triton.testing

        def do_bench(fn: Callable[[], object]) -> float:
            return float(
                triton.testing.do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median")
            )

        log("timing: triton.testing.do_bench, median")
        return do_bench
    except ImportError:
        log("timing: CUDA events, median of per-call times (Triton is not installed)")

    def events(fn: Callable[[], object]) -> float:
        for _ in range(10):
            fn()
        torch.cuda.synchronize()
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        iters = max(20, min(10000, int(rep_ms / max(start.elapsed_time(end), 1e-3))))
        times = []
        for _ in range(iters):
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        return statistics.median(times)

    return events


def check(q, k, v, causal: bool) -> tuple[bool, str]:
    """(ok, text): max abs error of cuda_flash and of same-dtype SDPA vs float32."""
    ref = attention_reference(q, k, v, causal=causal, dtype=torch.float32)
    out = cuda_flash.flash_attention_fwd(q, k, v, causal=causal)
    torch.cuda.synchronize()
    if not torch.isfinite(out).all():
        return False, "non-finite output"
    err = (out.float() - ref).abs().max().item()
    yard = (sdpa_default(q, k, v, causal=causal).float() - ref).abs().max().item()
    bound = 2 * yard + torch.finfo(q.dtype).eps * max(ref.abs().max().item(), 1.0)
    return err <= bound, f"err {err:.1e} (sdpa {yard:.1e})"


def bench_shape(shape, dtype: torch.dtype, timer) -> dict:
    batch, heads, seq, head_dim, causal = shape
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (
        torch.randn(batch, heads, seq, head_dim, device="cuda", dtype=dtype, generator=gen)
        for _ in range(3)
    )
    row: dict = {"shape": shape, "dtype": str(dtype).removeprefix("torch."), "ms": {}}
    try:
        row["ok"], row["check"] = check(q, k, v, causal)
    except Exception as exc:
        row["ok"], row["check"] = False, first_line(exc)
        log(f"  check failed: {first_line(exc)}")
    for name, fn in PROVIDERS.items():
        if name == "cuda_flash" and not row["ok"]:
            continue  # never time a wrong kernel
        try:
            row["ms"][name] = timer(lambda fn=fn: fn(q, k, v, causal=causal))
        except Exception as exc:
            log(f"  {name} failed: {first_line(exc)}")
    row["tflops"] = {
        name: flops(batch, heads, seq, seq, head_dim, causal) / (ms * 1e-3) / 1e12
        for name, ms in row["ms"].items()
    }
    return row


def fmt_ms(value: float | None) -> str:
    return f"{value:9.4f}" if value is not None else f"{'-':>9}"


def fmt_ratio(num: float | None, den: float | None) -> str:
    return f"{num / den:6.2f}x" if num and den else f"{'-':>7}"


def print_table(rows: list[dict]) -> None:
    log()
    log(
        f"{'shape (B,H,S,D)':<20} {'causal':<6} {'dtype':<8} {'cuda ms':>9} {'flash ms':>9} "
        f"{'sdpa ms':>9} {'vs flash':>8} {'vs sdpa':>8} {'TFLOPS':>7} {'flash TF':>8}  check"
    )
    for row in rows:
        b, h, s, d, causal = row["shape"]
        ms, tf = row["ms"], row["tflops"]
        cuda_ms = ms.get("cuda_flash")
        ratios = (
            f"{fmt_ratio(cuda_ms, ms.get('sdpa_flash')):>8} {fmt_ratio(cuda_ms, ms.get('sdpa')):>8}"
        )
        log(
            f"{f'{b},{h},{s},{d}':<20} {'yes' if causal else 'no':<6} {row['dtype']:<8} "
            f"{fmt_ms(cuda_ms)} {fmt_ms(ms.get('sdpa_flash'))} {fmt_ms(ms.get('sdpa'))} "
            f"{ratios} "
            f"{tf.get('cuda_flash', math.nan):7.1f} {tf.get('sdpa_flash', math.nan):8.1f}  "
            f"{'ok' if row['ok'] else 'WRONG'} {row['check']}"
        )
    log("ratio = cuda_flash time / the other's time (below 1 means cuda_flash is faster)")


def show_ptxas(capability: tuple[int, int]) -> None:
    """Compile the kernel TU alone with -Xptxas -v for this GPU and summarise it."""
    gencode = cuda_flash.arch_flags(capability)[0]
    with tempfile.TemporaryDirectory() as tmp:
        proc = cuda_flash.compile_kernel_object(
            gencode, Path(tmp) / "flash_fwd.o", extra_flags=("-Xptxas", "-v")
        )
    text = proc.stdout + proc.stderr
    log(f"\nptxas report ({gencode}, rc {proc.returncode}):")
    name = "?"
    for line in text.splitlines():
        entry = re.search(r"Compiling entry function '(\S+)'", line)
        if entry:
            match = re.search(r"flash_fwd_kernelI(\w+?)Li(\d+)ELb([01])", entry.group(1))
            if match:
                dtype = "bf16" if "bfloat16" in match.group(1) else "fp16"
                name = f"{dtype} hd{match.group(2)} causal={match.group(3)}"
            else:
                name = entry.group(1)
        elif "registers" in line or "spill" in line:
            log(f"  {name:<24} {line.split(':', 1)[-1].strip()}")
        elif "error" in line or "warning" in line:
            log(f"  {line}")
    for head_dim in (64, 128):  # dynamic, so not in ptxas's report; see smem_bytes()
        log(f"  dynamic shared memory hd{head_dim}: {2 * 2 * 64 * (head_dim + 8) * 2} bytes")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", default="suites/default.yaml")
    parser.add_argument("--dtype", nargs="+", default=["float16"], choices=["float16", "bfloat16"])
    parser.add_argument("--warmup-ms", type=int, default=25)
    parser.add_argument("--rep-ms", type=int, default=200)
    args = parser.parse_args(argv)

    reason = cuda_flash.unavailable_reason()
    if reason:
        log(f"cuda_flash cannot run here: {reason}")
        return 3
    capability = torch.cuda.get_device_capability()
    log(
        f"{torch.cuda.get_device_name()} (sm_{capability[0]}{capability[1]}), "
        f"torch {torch.__version__}, CUDA {torch.version.cuda}"
    )
    log(f"build directory: {cuda_flash.build_directory(capability)}")
    start = time.perf_counter()
    try:
        cuda_flash.load_extension(capability)
    except cuda_flash.CudaBuildError as exc:
        log(str(exc))
        return 3
    log(f"extension ready in {time.perf_counter() - start:.1f} s")
    if os.environ.get("SHOW_PTXAS") == "1":
        try:
            show_ptxas(capability)
        except Exception as exc:
            log(f"ptxas report failed: {first_line(exc)}")

    timer = make_timer(args.warmup_ms, args.rep_ms)
    shapes = load_shapes(args.suite)
    rows, crashed = [], 0
    for dtype_name in args.dtype:
        for shape in shapes:
            log(f"== {shape} {dtype_name}")
            try:
                rows.append(bench_shape(shape, getattr(torch, dtype_name), timer))
            except Exception:
                crashed += 1
                log(traceback.format_exc())
    print_table(rows)
    if crashed:
        log(f"{crashed} shape(s) crashed before a result; see the tracebacks above")
    return 0 if rows and not crashed and all(row["ok"] for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
