"""Eager host overhead per call: our Triton launcher against torch SDPA, on a GPU.

    PYTHONPATH=. python3 benchmarks/host_overhead.py [--max-seq 1024] [--calls 2000]

For each case of the suite (``suites/default.yaml``) with seq_len <= ``--max-seq``
(the launch-bound shapes), on the same inputs, three numbers per provider, medians
of ``--repeats`` repeats:

- ``host``: wall time of ``--calls`` back-to-back eager calls, stopped *before* the
  closing synchronize, divided by the count: what the Python call costs the CPU
  (the GPU queue absorbs the kernels; 1024 launches fit in it).
- ``b2b``: the same loop timed *after* the closing synchronize: max(host, device)
  per call, the guard's "host-inclusive" figure.
- ``sync``: one call followed by ``torch.cuda.synchronize()``, repeated: launch
  latency plus the kernel plus the wake-up.

Providers: ``triton`` (``kernels.flash_attention.flash_attention_fwd`` as it is:
a cached launch plan after the first call), ``triton-jit`` (the same launcher with
the plan cache off: validation, config lookup and ``JITFunction.run`` on every call,
the path before the cache), ``sdpa`` (torch's default backend, cuDNN on Hopper) and
``sdpa-flash``.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kernels import flash_attention as tf
from kernels import flash_launch

Case = tuple[int, int, int, int, bool]  # batch, heads, seq, head_dim, causal


def suite_cases(path: str, max_seq: int) -> list[Case]:
    """The suite's (B, H, S, D, causal) with S <= max_seq, in suite order, fp16."""
    from guard.store.suite import load_suite

    cases: list[Case] = []
    for case in load_suite(path).cases:
        s = case.shape
        item = (s.batch, s.heads, s.seq_q, s.head_dim, case.causal)
        if s.seq_q <= max_seq and s.sk == s.seq_q and item not in cases:
            cases.append(item)
    return cases


def _jit_every_call(q, k, v, *, causal=False):
    # The launcher with its plan cache bypassed: what every call cost before the cache.
    saved = flash_launch.plan_key
    flash_launch.plan_key = lambda *args: None
    try:
        return tf.flash_attention_fwd(q, k, v, causal=causal)
    finally:
        flash_launch.plan_key = saved


def _sdpa(q, k, v, *, causal=False):
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def _sdpa_flash(q, k, v, *, causal=False):
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


PROVIDERS: dict[str, Callable] = {
    "triton": tf.flash_attention_fwd,
    "triton-jit": _jit_every_call,
    "sdpa": _sdpa,
    "sdpa-flash": _sdpa_flash,
}


def measure(fn: Callable[[], object], calls: int, repeats: int) -> dict[str, float]:
    """Median µs per call: host (before the sync), b2b (after it), sync (per call)."""
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    host, b2b, sync = [], [], []
    for _ in range(repeats):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        host.append((t1 - t0) / calls * 1e6)
        b2b.append((t2 - t0) / calls * 1e6)
        n = max(calls // 10, 20)
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
            torch.cuda.synchronize()
        sync.append((time.perf_counter() - t0) / n * 1e6)
    return {
        "host": statistics.median(host),
        "b2b": statistics.median(b2b),
        "sync": statistics.median(sync),
    }


def run(cases: list[Case], providers: list[str], calls: int, repeats: int) -> list[dict]:
    rows = []
    for batch, heads, seq, head_dim, causal in cases:
        gen = torch.Generator(device="cuda").manual_seed(0)
        q, k, v = (
            torch.randn(batch, heads, seq, head_dim, device="cuda", dtype=torch.float16,
                        generator=gen)
            for _ in range(3)
        )  # fmt: skip
        row: dict = {"shape": (batch, heads, seq, head_dim), "causal": causal}
        for name in providers:
            fn = PROVIDERS[name]
            call = functools.partial(fn, q, k, v, causal=causal)
            row[name] = measure(call, calls, repeats)
        rows.append(row)
    return rows


def table(rows: list[dict], providers: list[str]) -> str:
    head = "| shape (B,H,S,D) | causal | " + " | ".join(
        f"{p} host / b2b / sync µs" for p in providers
    )
    lines = [head + " |", "|---|---|" + "---|" * len(providers)]
    for row in rows:
        cells = ["{host:.1f} / {b2b:.1f} / {sync:.1f}".format(**row[p]) for p in providers]
        lines.append(
            f"| {row['shape']} | {'yes' if row['causal'] else 'no'} | " + " | ".join(cells) + " |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", default="suites/default.yaml")
    parser.add_argument("--max-seq", type=int, default=1024)
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--providers", default=",".join(PROVIDERS))
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("host_overhead: needs a CUDA GPU", file=sys.stderr)
        return 2
    providers = [p for p in args.providers.split(",") if p]
    rows = run(suite_cases(args.suite, args.max_seq), providers, args.calls, args.repeats)
    print(f"{torch.cuda.get_device_name()} · torch {torch.__version__} · "
          f"calls {args.calls} x {args.repeats} repeats (median)")  # fmt: skip
    print(table(rows, providers))
    return 0


if __name__ == "__main__":
    sys.exit(main())
