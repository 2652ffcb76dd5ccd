"""Does a kernel stay right while other processes share the GPU (time-sliced contexts)?

Starts ``--procs`` processes at once; each calls the kernel ``--calls`` times on fresh
random inputs into a NaN-filled ``out=`` buffer and counts the calls whose output has
any NaN/Inf (unwritten or wrong) and those off the float32 reference by more than
``--max-err``. The guard's probe and check rounds run several processes on one GPU,
as any shared machine does; a kernel must give the same answer there as alone.

    python benchmarks/concurrent_nan.py --kernel triton_flash --shape 1 16 16384 128 \\
        --procs 4 --calls 40 [--kv-heads 4] [--dtype bfloat16] [--causal]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time


def child(args: argparse.Namespace) -> dict[str, object]:
    import torch

    from guard.measure.reference import attention_reference
    from kernels.registry import REGISTRY

    fn = REGISTRY[args.kernel].loader()
    batch, heads, seq, dim = args.shape
    dtype = getattr(torch, args.dtype)
    gen = torch.Generator(device="cuda").manual_seed(args.seed)
    nan_calls, wrong_calls, worst = 0, 0, 0.0
    for i in range(args.calls):
        q = torch.randn(batch, heads, seq, dim, device="cuda", dtype=dtype, generator=gen)
        k, v = (
            torch.randn(batch, args.kv_heads or heads, seq, dim, device="cuda", dtype=dtype,
                        generator=gen)
            for _ in range(2)
        )  # fmt: skip
        out = torch.full_like(q, float("nan"))
        fn(q, k, v, causal=args.causal, out=out)
        torch.cuda.synchronize()
        if not bool(torch.isfinite(out).all()):
            nan_calls += 1
            continue
        if i % 8 == 0:  # the reference of a few rows of every head
            rows = torch.arange(0, seq, max(1, seq // 64), device="cuda")
            ref = attention_reference(
                q[:, :, rows], k, v, causal=args.causal, dtype=torch.float32, rows=rows
            )
            err = float((out[:, :, rows].float() - ref).abs().max())
            worst = max(worst, err)
            wrong_calls += err > args.max_err
    return {"nan_calls": nan_calls, "wrong_calls": wrong_calls, "max_err": worst}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernel", default="triton_flash")
    parser.add_argument("--shape", type=int, nargs=4, default=[1, 16, 16384, 128])
    parser.add_argument("--kv-heads", type=int, default=0)
    parser.add_argument("--dtype", default="float16")
    parser.add_argument("--causal", action="store_true")
    parser.add_argument("--procs", type=int, default=4)
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument("--max-err", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args)))
        return 0
    t0 = time.perf_counter()
    argv = [a for a in sys.argv[1:]]
    procs = [
        subprocess.Popen([sys.executable, __file__, *argv, "--child", "--seed", str(i + 1)],
                         stdout=subprocess.PIPE, text=True)
        for i in range(args.procs)
    ]  # fmt: skip
    results = [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in procs]
    nan = sum(r["nan_calls"] for r in results)
    wrong = sum(r["wrong_calls"] for r in results)
    worst = max(r["max_err"] for r in results)
    calls = args.procs * args.calls
    print(
        f"{args.kernel} {tuple(args.shape)} kv {args.kv_heads or args.shape[1]} {args.dtype}"
        f"{' causal' if args.causal else ''}, {args.procs} processes: {nan} of {calls} calls "
        f"with NaN/Inf, {wrong} over {args.max_err} (max err {worst:.3g}) "
        f"({time.perf_counter() - t0:.0f} s)"
    )
    return 1 if nan or wrong else 0


if __name__ == "__main__":
    sys.exit(main())
