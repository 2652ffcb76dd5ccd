"""Gluon Hopper forward against the Triton kernel and SDPA: correctness, then speed.

    PYTHONPATH=. python3 benchmarks/bench_gluon.py --out DIR [--budget-s 280]

One GPU process tree, every provider in its own subprocess with a deadline (a deadlocked
mbarrier pipeline must cost one provider, not the run):

1. ``host``: ``benchmarks/host_overhead.py`` (eager µs per call, S <= 1024).
2. per provider (``sdpa`` + ``sdpa-flash`` together, ``triton``, ``gluon-ws``,
   ``gluon-ws-pingpong``, ``gluon-simple``):
   - correctness on fresh random inputs against a float32 reference: odd lengths 1,
     77, 1000, 2049, seq_q != seq_k both ways, GQA, a (B, S, H, D)-strided q, fp16
     and bf16, head_dim 64 and 128, causal and not, NaN-poisoned ``out``. Pass:
     relative norm error <= 2 x SDPA's own error on the same inputs (+1e-6), finite;
   - speed on the nine benchmark shapes: a CUDA graph of k calls (~5 ms) replayed 15 times,
     median per call; the output of each shape checked first on its first and last
     (batch, head) slices.
   ``--base REV`` adds the kernel of another revision: a provider with ``:BASE=1`` runs
   REV's ``kernels/gluon_flash_fwd.py`` (with this tree's plan and launcher), so a
   kernel change is timed beside the kernel it changes in the same rounds. (Where the
   tree has no git history, as in a copy of the files alone, REV may be a file
   holding that module.)
3. ``paired`` (``--paired``, one subprocess): the ratio to SDPA default measured side
   by side: per shape, the providers' CUDA graphs replayed in interleaved rounds
   (the order rotating each round), so a clock or power change between two providers'
   subprocesses cannot pass for a kernel difference; the ratio and its 95% interval
   come from ``guard.base.stats.ratio_interval`` (the guard's own estimator). Each
   provider's output is checked on the shape first; a wrong one is not timed.
4. a summary: ms, TFLOPS (4*B*H*Sq*Sk*D, half when causal), ratios to SDPA default
   (cuDNN on Hopper), SDPA flash and the Triton kernel; then the paired ratios.

Writes DIR/results.jsonl (one JSON object per line) and prints the tables.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# (batch, heads_q, heads_kv, seq_q, seq_k, head_dim, causal, dtype)
CHECKS = [
    (1, 2, 2, 1, 1, 64, False, "float16"),
    (1, 2, 2, 1, 1, 128, True, "bfloat16"),
    (2, 3, 3, 77, 77, 64, True, "float16"),
    (2, 3, 3, 77, 77, 128, False, "bfloat16"),
    (1, 4, 2, 1000, 1000, 64, False, "float16"),
    (1, 4, 2, 1000, 1000, 128, True, "float16"),
    (1, 2, 2, 2049, 2049, 64, True, "bfloat16"),
    (1, 2, 2, 2049, 2049, 128, False, "float16"),
    (1, 2, 2, 2049, 2049, 128, True, "float16"),
    (1, 4, 4, 77, 1000, 64, True, "float16"),
    (1, 4, 4, 77, 1000, 128, False, "bfloat16"),
    (1, 4, 4, 1000, 77, 64, False, "bfloat16"),
    (1, 4, 4, 1000, 77, 128, True, "float16"),
    (1, 4, 2, 1100, 1024, 64, False, "bfloat16"),  # hd-64 non-causal Gluon dispatch
    (1, 8, 2, 300, 2049, 128, True, "bfloat16"),
    (2, 8, 1, 2049, 333, 64, True, "float16"),
    (1, 2, 2, 256, 256, 128, True, "float16"),
    (1, 2, 2, 256, 256, 64, False, "bfloat16"),
    # More CTA tiles than an H100 has SMs: each persistent CTA runs several, so the ring
    # positions and barrier phases that live across tiles are checked.
    (4, 16, 8, 1000, 1000, 64, False, "bfloat16"),
]
STRIDED = [(2, 4, 2, 333, 333, 128, True, "float16"), (2, 4, 4, 1000, 700, 64, False, "bfloat16")]

TABLE = [
    (1, 16, 16, 1024, 1024, 64, False, "float16"),
    (4, 16, 16, 1024, 1024, 64, True, "float16"),
    (2, 8, 8, 2048, 2048, 128, False, "float16"),
    (2, 8, 8, 2048, 2048, 128, True, "float16"),
    (4, 32, 32, 4096, 4096, 128, False, "float16"),
    (4, 32, 32, 4096, 4096, 128, True, "float16"),
    (8, 32, 32, 1024, 1024, 64, True, "bfloat16"),
    (1, 32, 8, 8192, 8192, 128, True, "bfloat16"),
    (1, 16, 16, 16384, 16384, 128, True, "bfloat16"),
]
# The headline shapes beside the table's: head_dim 64 with many
# batches and heads, odd and long head_dim-128 lengths, the headline throughput shapes.
HEADLINE = [
    (16, 16, 16, 512, 512, 64, False, "float16"),
    (4, 16, 16, 2048, 2048, 64, False, "bfloat16"),
    (8, 32, 32, 1024, 1024, 64, True, "bfloat16"),
    (2, 16, 16, 4097, 4097, 128, False, "bfloat16"),
    (1, 32, 4, 16384, 16384, 128, False, "bfloat16"),
    (4, 32, 32, 4096, 4096, 128, False, "float16"),
    (1, 16, 16, 16384, 16384, 128, False, "float16"),
]
# Head_dim 64 non-causal at 128 to 1024 row-block tiles of 128 rows (batch x heads x
# seq_q / 128): where the persistent variant pays against the one-warpgroup kernel.
HD64_TILES = [
    (1, 16, 16, 1024, 1024, 64, False, "float16"),
    (1, 16, 16, 2048, 2048, 64, False, "bfloat16"),
    (2, 16, 16, 1024, 1024, 64, False, "float16"),
    (1, 8, 8, 4096, 4096, 64, False, "float16"),
    (4, 16, 16, 1024, 1024, 64, False, "float16"),
    (8, 16, 16, 512, 512, 64, False, "float16"),
    (16, 16, 16, 512, 512, 64, False, "float16"),
    (4, 16, 16, 2048, 2048, 64, False, "bfloat16"),
    (32, 16, 16, 256, 256, 64, False, "float16"),
]
# Non-causal shapes whose row blocks do not divide evenly among an H100's or H200's 132
# SMs: where runs of key tiles (SPLIT_KEYS) cut row blocks.
CUTS = [
    (16, 16, 16, 512, 512, 64, False, "float16"),
    (4, 16, 16, 2048, 2048, 64, False, "bfloat16"),
    (4, 32, 32, 4096, 4096, 128, False, "float16"),
    (1, 16, 16, 16384, 16384, 128, False, "float16"),
]
# Head_dim 64 causal from one wave of CTAs to many, short and long pairs, GQA: where the
# order of the one-warpgroup grid matters.
HD64_CAUSAL = [
    (1, 8, 8, 512, 512, 64, True, "float16"),
    (4, 16, 16, 512, 512, 64, True, "float16"),
    (16, 16, 16, 512, 512, 64, True, "float16"),
    (8, 16, 16, 256, 256, 64, True, "bfloat16"),
    (32, 16, 16, 256, 256, 64, True, "float16"),
    (4, 32, 8, 512, 512, 64, True, "bfloat16"),
    (4, 16, 16, 1024, 1024, 64, True, "float16"),
    (8, 32, 32, 1024, 1024, 64, True, "bfloat16"),
    (2, 16, 16, 2048, 2048, 64, True, "bfloat16"),
    (4, 32, 8, 2048, 2048, 64, True, "bfloat16"),
    (1, 16, 16, 16384, 16384, 64, True, "bfloat16"),
]
# Head_dim 128 causal from 8192^2 (the per-tile grid): long pairs of 64 to 256 row
# blocks, 8 to 32 pairs, GQA: where the grid's order sets the tail.
HD128_CAUSAL = [
    (1, 16, 16, 16384, 16384, 128, True, "float16"),
    (1, 16, 16, 16384, 16384, 128, True, "bfloat16"),
    (1, 32, 8, 8192, 8192, 128, True, "bfloat16"),
    (2, 16, 16, 8192, 8192, 128, True, "float16"),
    (1, 32, 32, 16384, 16384, 128, True, "bfloat16"),
    (1, 8, 8, 32768, 32768, 128, True, "float16"),
]
# Head_dim 128 causal below 8192^2, from one wave of 128-row CTAs to several: where the
# per-tile grid and the persistent kernel trade places.
HD128_CAUSAL_SHORT = [
    (1, 8, 8, 2048, 2048, 128, True, "float16"),
    (2, 8, 8, 2048, 2048, 128, True, "float16"),
    (4, 8, 8, 2048, 2048, 128, True, "bfloat16"),
    (1, 16, 16, 4096, 4096, 128, True, "float16"),
    (4, 16, 16, 2048, 2048, 128, True, "float16"),
    (1, 32, 8, 4096, 4096, 128, True, "bfloat16"),
    (2, 16, 16, 4096, 4096, 128, True, "float16"),
    (8, 16, 16, 2048, 2048, 128, True, "bfloat16"),
    (4, 32, 32, 4096, 4096, 128, True, "float16"),
]
# Long head_dim 64 causal (from 2048 queries): where the CUDA kernel's 192-row tiles pay.
HD64_CAUSAL_LONG = [
    (4, 32, 32, 2048, 2048, 64, True, "bfloat16"),
    (2, 32, 32, 4096, 4096, 64, True, "bfloat16"),
    (1, 32, 32, 8192, 8192, 64, True, "bfloat16"),
]
SHAPE_SETS = {
    "table": TABLE,
    "headline": HEADLINE,
    "all": TABLE + [c for c in HEADLINE if c not in TABLE],
    "hd64-tiles": HD64_TILES,
    "cuts": CUTS,
    "hd64-causal": HD64_CAUSAL,
    "hd64-causal-long": HD64_CAUSAL_LONG,
    "hd128-causal": HD128_CAUSAL,
    "hd128-causal-short": HD128_CAUSAL_SHORT,
}
SHAPES_ENV = "BENCH_GLUON_SHAPES"  # the workers (subprocesses) read the set from here
TIMES = SHAPE_SETS[os.environ.get(SHAPES_ENV, "table")]

# In order of need: the baseline, then the kernel under test, its fallback, the rest.
PROVIDERS = [
    "sdpa",
    "gluon-ws",
    "gluon-simple",
    "triton",
    "gluon-simple-overlap",
    "gluon-ws-pingpong",
]
# "triton": kernels.flash_attention.flash_attention_fwd as users get it (on sm_90 it
# dispatches to Gluon where measured faster); "triton-portable": the same with
# ATTN_GLUON=0 (the portable Triton kernel only); "triton+gluon": the dispatch, each
# check calling twice so the second call runs through the launch plan;
# "gluon-<variant>[:KEY=VALUE...]" sets config entries, ":hd=D" limits the shapes to
# one head_dim and ":causal=0" (or 1) to non-causal (causal) ones; ":BASE=1" runs the
# kernel module of --base instead of this tree's.
BASE_ENV = "BENCH_GLUON_BASE"  # the workers load --base's kernel module from this file


def flops(b, h, sq, sk, d, causal) -> float:
    total = 4.0 * b * h * sq * sk * d
    return total / 2 if causal else total


# ----------------------------------------------------------------------------------------
# Worker side (one provider per process)
# ----------------------------------------------------------------------------------------


def _functions(provider: str):
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def sdpa(q, k, v, causal, out=None):
        return F.scaled_dot_product_attention(
            q, k, v, is_causal=causal, enable_gqa=q.shape[1] != k.shape[1]
        )

    def sdpa_flash(q, k, v, causal, out=None):
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
            return sdpa(q, k, v, causal)

    if provider == "sdpa":
        return {"sdpa": sdpa, "sdpa-flash": sdpa_flash}
    if provider in ("triton", "triton-portable", "triton+gluon"):
        if provider == "triton-portable":
            os.environ["ATTN_GLUON"] = "0"
        import torch

        from kernels import flash_attention as tf

        if provider in ("triton", "triton-portable"):
            return {provider: lambda q, k, v, causal, out=None: tf.flash_attention_fwd(
                q, k, v, causal=causal, out=out)}  # fmt: skip
        os.environ["ATTN_GLUON"] = "1"

        def dispatched(q, k, v, causal, out=None):
            # Checks (out given) call twice on one key (an `out` of the same layout at
            # another address): the first call compiles and keeps a launch plan, the
            # second, the one checked, runs through that plan and encodes its new
            # address. Timing (no out) calls once: the warm-up calls made the plan.
            if out is not None:
                tf.flash_attention_fwd(q, k, v, causal=causal, out=torch.empty_like(out))
            return tf.flash_attention_fwd(q, k, v, causal=causal, out=out)

        return {provider: dispatched}
    if _entries(provider).get("BASE"):
        gf = _base_module()
    else:
        from kernels import gluon_flash_fwd as gf

    variant, overrides = parse_gluon(provider)
    return {provider: lambda q, k, v, causal, out=None: gf.flash_attention_fwd(
        q, k, v, causal=causal, out=out, variant=variant, **overrides)}  # fmt: skip


SHAPE_FILTERS = ("hd", "causal")  # provider entries that filter shapes, not configs
NOT_CONFIG = (*SHAPE_FILTERS, "BASE")


def write_base_module(base: str, out: Path) -> Path:
    """The kernel module the :BASE=1 providers run, as a file under ``out``: ``base`` is
    a file holding one, else a git revision whose kernels/gluon_flash_fwd.py it is
    (SystemExit naming ``base`` when it is neither)."""
    if Path(base).is_file():
        source = Path(base).read_text()
    else:
        shown = subprocess.run(["git", "show", f"{base}:kernels/gluon_flash_fwd.py"],
                               cwd=ROOT, capture_output=True, text=True)  # fmt: skip
        if shown.returncode:
            raise SystemExit(f"--base {base}: no such file, and git: {shown.stderr.strip()}")
        source = shown.stdout
    path = out / "base-kernel" / "gluon_flash_fwd_base.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(source)
    return path


def _base_module():
    import importlib.util

    path = os.environ.get(BASE_ENV)
    if not path:
        raise SystemExit("a provider with :BASE=1 needs --base")
    spec = importlib.util.spec_from_file_location("gluon_flash_fwd_base", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _entries(provider: str) -> dict[str, int]:
    """ "gluon-ws:STAGES=3:hd=128" -> {"STAGES": 3, "hd": 128}; {} for "sdpa", "triton"."""
    return {key: int(value) for key, value in (item.split("=") for item in provider.split(":")[1:])}


def parse_gluon(provider: str) -> tuple[str, dict]:
    """ "gluon-ws:STAGES=3:hd=128" -> ("ws", {"STAGES": 3}); hd and causal only filter
    shapes."""
    entries = _entries(provider)
    overrides = {key: value for key, value in entries.items() if key not in NOT_CONFIG}
    return provider.removeprefix("gluon-").split(":")[0], overrides


def _takes(provider: str, case) -> bool:
    """Whether the provider's ":hd=D" and ":causal=0/1" filters let this shape through."""
    wanted = _entries(provider)
    return wanted.get("hd", case[5]) == case[5] and bool(wanted.get("causal", case[6])) == case[6]


def _inputs(case, seed, strided=False):
    import torch

    b, hq, hkv, sq, sk, d, _, dtype = case
    dt = getattr(torch, dtype)
    gen = torch.Generator(device="cuda").manual_seed(seed)

    def make(h, s):
        if strided:  # (B, S, H, D) storage seen as (B, H, S, D)
            return torch.randn(b, s, h, d, device="cuda", generator=gen).to(dt).transpose(1, 2)
        return torch.randn(b, h, s, d, device="cuda", generator=gen).to(dt)

    return make(hq, sq), make(hkv, sk), make(hkv, sk)


def _rel(x, ref) -> float:
    return ((x.float() - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def _check(fns, yard, case, seed, strided, slices_only=False):
    """{name: (err, bound, ok)} for every function in fns on one case."""
    import torch

    from kernels.reference import attention_reference

    q, k, v = _inputs(case, seed, strided)
    causal = case[6]
    group = q.shape[1] // k.shape[1]
    if slices_only:
        picks = [(0, 0), (q.shape[0] - 1, q.shape[1] - 1)]
    else:
        picks = [(slice(None), slice(None))]
    refs, yards = [], []
    for bi, hi in picks:
        if slices_only:
            hk = hi // group
            qs = q[bi : bi + 1, hi : hi + 1]
            ks, vs = k[bi : bi + 1, hk : hk + 1], v[bi : bi + 1, hk : hk + 1]
        else:
            qs, ks, vs = q, k, v
        refs.append(attention_reference(qs, ks, vs, causal=causal, dtype=torch.float32))
        yards.append(_rel(yard(qs, ks, vs, causal), refs[-1]))
    base = max(yards)
    result = {}
    for name, fn in fns.items():
        out = torch.full_like(q, float("nan")) if "sdpa" not in name else None
        o = fn(q, k, v, causal, out=out)
        torch.cuda.synchronize()
        errs = []
        for (bi, hi), ref in zip(picks, refs, strict=True):
            os_ = o[bi : bi + 1, hi : hi + 1] if slices_only else o
            errs.append(math.inf if not torch.isfinite(os_).all() else _rel(os_, ref))
        err = max(errs)
        bound = 2 * base + 1e-6
        result[name] = (err, base, err <= bound)
    return result


def _graph(fn):
    """A CUDA graph of k calls of fn (k for about 5 ms) and k."""
    import torch

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(5):
        fn()
    end.record()
    torch.cuda.synchronize()
    per = start.elapsed_time(end) / 5
    calls = max(1, min(200, round(5.0 / max(per, 1e-4))))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    return graph, calls


def _replays(graph, calls: int, n: int) -> list[float]:
    """ms per call of n replays, one at a time."""
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    samples = []
    for _ in range(n):
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        samples.append(start.elapsed_time(end) / calls)
    return samples


def _time_graph(fn) -> float:
    """Median ms per call over 15 replays of a CUDA graph of k calls (~5 ms each)."""
    graph, calls = _graph(fn)
    return statistics.median(_replays(graph, calls, 15))


def _emit(out_path: Path, obj: dict) -> None:
    """One result row, with the GPU it ran on: appended to results.jsonl and printed."""
    import torch

    line = json.dumps({**obj, "gpu": torch.cuda.get_device_name()})
    with open(out_path, "a") as fh:
        fh.write(line + "\n")
    print(line, flush=True)


def worker(provider: str, out_path: Path, do_checks: bool) -> None:
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    fns = _functions(provider)
    yard = _functions("sdpa")["sdpa"]

    def emit(obj):
        _emit(out_path, {**obj, "provider": provider})

    if do_checks:
        for i, case in enumerate(CHECKS + STRIDED):
            if not _takes(provider, case):
                continue
            strided = i >= len(CHECKS)
            try:
                res = _check(fns, yard, case, seed=100 + i, strided=strided)
                for name, (err, base, ok) in res.items():
                    emit({"kind": "check", "name": name, "case": case, "strided": strided,
                          "err": err, "sdpa_err": base, "ok": ok})  # fmt: skip
            except Exception as exc:  # one failing case must not hide the others
                emit({"kind": "check", "name": provider, "case": case, "strided": strided,
                      "error": f"{type(exc).__name__}: {str(exc)[:400]}", "ok": False})  # fmt: skip
    for i, case in enumerate(TIMES):
        b, hq, _, sq, sk, d, causal, _ = case
        if not _takes(provider, case):
            continue
        try:
            res = _check(fns, yard, case, seed=500 + i, strided=False, slices_only=True)
        except Exception as exc:
            emit({"kind": "time", "name": provider, "case": case,
                  "error": f"{type(exc).__name__}: {str(exc)[:400]}"})  # fmt: skip
            continue
        q, k, v = _inputs(case, seed=900 + i)
        for name, fn in fns.items():
            err, base, ok = res[name]
            entry = {"kind": "time", "name": name, "case": case, "err": err, "sdpa_err": base,
                     "ok": ok}  # fmt: skip
            try:
                ms = _time_graph(lambda fn=fn, q=q, k=k, v=v, c=causal: fn(q, k, v, c))
                entry.update(ms=ms, tflops=flops(b, hq, sq, sk, d, causal) / ms / 1e9)
            except Exception as exc:
                entry["error"] = f"{type(exc).__name__}: {str(exc)[:400]}"
            emit(entry)
        del q, k, v
        torch.cuda.empty_cache()


def _with_env(fn, env: dict[str, str]):
    """fn with os.environ set as given while it runs (the dispatch reads ATTN_GLUON at
    each call; a CUDA graph keeps the kernel chosen at capture)."""

    def call(*args, **kwargs):
        saved = {key: os.environ.get(key) for key in env}
        os.environ.update(env)
        try:
            return fn(*args, **kwargs)
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value

    return call


def paired_worker(providers: list[str], out_path: Path, rounds: int) -> None:
    """Ratios to SDPA default from interleaved rounds, shape by shape."""
    import numpy as np
    import torch

    from guard.base import stats

    torch.backends.cuda.matmul.allow_tf32 = False
    fns = {"sdpa": _functions("sdpa")["sdpa"]}
    for p in providers:
        if p == "sdpa":
            continue
        env = {"ATTN_GLUON": "0"} if p == "triton-portable" else {"ATTN_GLUON": "1"}
        fn = next(iter(_functions(p).values()))
        fns[p] = _with_env(fn, env)
    os.environ.pop("ATTN_GLUON", None)
    yard = fns["sdpa"]
    rng = np.random.default_rng(0)

    def emit(obj):
        _emit(out_path, {**obj, "kind": "paired"})

    for i, case in enumerate(TIMES):
        b, hq, _, sq, sk, d, causal, _ = case
        here = {n: f for n, f in fns.items() if n == "sdpa" or _takes(n, case)}
        q, k, v = _inputs(case, seed=900 + i)
        graphs = {}
        for n, f in here.items():
            try:  # a variant that fails to build or is wrong costs its cell, not the run
                if n != "sdpa":
                    _, _, ok = _check({n: f}, yard, case, seed=700 + i, strided=False,
                                      slices_only=True)[n]  # fmt: skip
                    if not ok:
                        raise RuntimeError("wrong output on this shape: not timed")
                graphs[n] = _graph(lambda f=f, q=q, k=k, v=v, c=causal: f(q, k, v, c))
            except Exception as exc:
                emit({"name": n, "case": case, "ok": False,
                      "error": f"{type(exc).__name__}: {exc}"[:300]})  # fmt: skip
        names = list(graphs)
        samples: dict[str, list[list[float]]] = {n: [] for n in names}
        for r in range(rounds):
            for n in names[r % len(names) :] + names[: r % len(names)]:
                samples[n].append(_replays(*graphs[n], 3))
        for n in names:
            entry = {"name": n, "case": case, "rounds": rounds, "ok": True,
                     "ms": stats.case_time(samples[n])}  # fmt: skip
            entry["tflops"] = flops(b, hq, sq, sk, d, causal) / entry["ms"] / 1e9
            if n != "sdpa" and "sdpa" in samples:
                iv = stats.ratio_interval(samples["sdpa"], samples[n], confidence=0.95, rng=rng)
                entry.update(ratio=iv.ratio, low=iv.low, high=iv.high)
            emit(entry)
        del graphs, q, k, v
        torch.cuda.empty_cache()


# ----------------------------------------------------------------------------------------
# Driver
# ----------------------------------------------------------------------------------------


def _run(cmd: list[str], timeout: float, log, extra_env: dict | None = None) -> None:
    log(f"$ {' '.join(cmd)}  (timeout {timeout:.0f} s) {extra_env or ''}")
    t0 = time.time()
    try:
        env = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", "."), **(extra_env or {})}
        proc = subprocess.run(cmd, timeout=timeout, capture_output=True, text=True, env=env)
        tail = (proc.stdout + proc.stderr).strip().splitlines()
        shown = [line for line in tail if not line.startswith("{")]
        for line in shown[-25:]:
            log("  " + line)
        log(f"  rc={proc.returncode} in {time.time() - t0:.1f} s")
    except subprocess.TimeoutExpired:
        log(f"  TIMEOUT after {timeout:.0f} s (a hang: this provider's remaining cases lost)")


def summary(rows: list[dict], log) -> None:
    checks = [r for r in rows if r["kind"] == "check"]
    log("\n== correctness (rel. norm error vs float32; pass: <= 2x SDPA's own) ==")
    by_name: dict[str, list] = {}
    for r in checks:
        by_name.setdefault(r["name"], []).append(r)
    for name, rs in by_name.items():
        bad = [r for r in rs if not r.get("ok")]
        worst = max((r.get("err", math.inf) / max(r.get("sdpa_err", 0), 1e-9) for r in rs),
                    default=math.nan)  # fmt: skip
        log(f"{name:<20} {len(rs) - len(bad)}/{len(rs)} pass, worst err/sdpa_err {worst:.2f}")
        for r in bad[:8]:
            log(f"   FAIL {r['case']} strided={r.get('strided')} err={r.get('err')} "
                f"sdpa={r.get('sdpa_err')} {r.get('error', '')}")  # fmt: skip
    times = [r for r in rows if r["kind"] == "time"]
    names = list(dict.fromkeys(r["name"] for r in times))
    log("\n== speed (ms per call, CUDA-graph median; TFLOPS; ratio = time / SDPA default) ==")
    log("| shape (B,Hq,Hkv,Sq,D) dtype causal | " + " | ".join(names) + " | best gluon / sdpa"
        " | best gluon / sdpa-flash | best gluon / triton-portable | triton / sdpa"
        " | triton-portable / sdpa | triton / triton-portable |")  # fmt: skip
    log("|---|" + "---|" * (len(names) + 6))
    for case in TIMES:
        b, hq, hkv, sq, _, d, causal, dtype = case
        cell, ms = [], {}
        for n in names:
            r = next((r for r in times if r["name"] == n and tuple(r["case"]) == case), None)
            if r is None or "ms" not in r:
                cell.append("—" if r is None else "ERR")
                continue
            ms[n] = r["ms"]
            mark = "" if r.get("ok") else " WRONG"
            cell.append(f"{r['ms']:.4f} ({r['tflops']:.0f}){mark}")
        ok_gluon = [
            ms[n] for n in ms if n.startswith("gluon")
            and next(r for r in times if r["name"] == n and tuple(r["case"]) == case).get("ok")
        ]  # fmt: skip
        best = min(ok_gluon) if ok_gluon else None

        def ratio(a, b):
            return f"{a / b:.3f}" if a is not None and b is not None else "—"

        ratios = [
            ratio(best, ms.get("sdpa")),
            ratio(best, ms.get("sdpa-flash")),
            ratio(best, ms.get("triton-portable")),
            ratio(ms.get("triton"), ms.get("sdpa")),
            ratio(ms.get("triton-portable"), ms.get("sdpa")),
            ratio(ms.get("triton"), ms.get("triton-portable")),
        ]
        label = f"({b},{hq},{hkv},{sq},{d}) {dtype} {'causal' if causal else 'full'}"
        log(f"| {label} | " + " | ".join(cell + ratios) + " |")
    paired = [r for r in rows if r["kind"] == "paired"]
    if not paired:
        return
    rounds = max(r.get("rounds", 0) for r in paired)
    names = [n for n in dict.fromkeys(r["name"] for r in paired) if n != "sdpa"]
    log(f"\n== side by side: ratio to SDPA default, {rounds} interleaved rounds "
        "(95% interval); ms per call ==")  # fmt: skip
    log("| shape (B,Hq,Hkv,Sq,D) dtype causal | sdpa ms | " + " | ".join(names) + " |")
    log("|---|---|" + "---|" * len(names))
    for case in TIMES:
        b, hq, hkv, sq, _, d, causal, dtype = case
        mine = {r["name"]: r for r in paired if tuple(r["case"]) == case}
        if not mine:
            continue
        base = mine.get("sdpa", {}).get("ms")
        cell = [f"{base:.4f}" if base else "—"]
        for n in names:
            r = mine.get(n)
            if r is None:
                cell.append("—")
            elif "ratio" not in r:
                cell.append(r.get("error", "ERR"))
            else:
                cell.append(f"**{r['ratio']:.3f}** [{r['low']:.3f}, {r['high']:.3f}] "
                            f"{r['ms']:.4f}")  # fmt: skip
        label = f"({b},{hq},{hkv},{sq},{d}) {dtype} {'causal' if causal else 'full'}"
        log(f"| {label} | " + " | ".join(cell) + " |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--budget-s", type=float, default=280)
    parser.add_argument("--providers", default=",".join(PROVIDERS))
    parser.add_argument("--no-host", action="store_true")
    parser.add_argument("--no-checks", action="store_true")
    parser.add_argument("--unchecked", default="", help="providers to time without checks")
    parser.add_argument("--suite", default=str(ROOT / "suites/default.yaml"))
    parser.add_argument(
        "--paired",
        default="sdpa,triton,triton-portable",
        help="providers timed side by side in interleaved rounds ('' skips)",
    )
    parser.add_argument("--rounds", type=int, default=15, help="rounds of the paired phase")
    parser.add_argument("--worker", default=None)
    parser.add_argument(
        "--base",
        default=None,
        help="git revision (or file) whose kernels/gluon_flash_fwd.py the :BASE=1 providers run",
    )
    parser.add_argument(
        "--shapes",
        choices=sorted(SHAPE_SETS),
        default=None,
        help="timed shapes: the PERFORMANCE.md table (default), the headline shapes, both (all),"
        " head_dim 64 non-causal at 128 to 1024 row-block tiles (hd64-tiles), or the"
        " non-causal shapes where runs of key tiles cut row blocks (cuts), or head_dim 64"
        " causal from one wave of CTAs to many (hd64-causal) or from 2048 queries"
        " (hd64-causal-long), or head_dim 128 causal from"
        " 8192^2 (hd128-causal) or below it (hd128-causal-short)",
    )
    args = parser.parse_args(argv)
    if args.shapes:
        global TIMES
        os.environ[SHAPES_ENV] = args.shapes
        TIMES = SHAPE_SETS[args.shapes]
    args.out.mkdir(parents=True, exist_ok=True)
    results = args.out / "results.jsonl"
    if args.worker == "paired":
        paired_worker(args.paired.split(","), results, args.rounds)
        return 0
    if args.worker:
        worker(args.worker, results, not args.no_checks)
        return 0
    results.unlink(missing_ok=True)  # an earlier run's rows in $OUT would mix in otherwise
    if args.base:
        os.environ[BASE_ENV] = str(write_base_module(args.base, args.out))

    deadline = time.time() + args.budget_s
    log_path = args.out / "bench.log"

    def log(msg: str) -> None:
        print(msg, flush=True)
        with open(log_path, "a") as fh:
            fh.write(msg + "\n")

    import torch

    log(f"{torch.cuda.get_device_name()} · torch {torch.__version__} · "
        f"cuda {torch.version.cuda}")  # fmt: skip
    try:
        import triton

        log(f"triton {triton.__version__}")
    except ImportError:
        pass
    steps: list[tuple[list[str], float, dict]] = []
    if not args.no_host:
        host = [sys.executable, str(ROOT / "benchmarks/host_overhead.py"), "--suite", args.suite,
                "--calls", "500", "--repeats", "5"]  # fmt: skip
        steps.append((host, 40, {}))
        # The same launcher without the Gluon dispatch (the portable kernel's launch).
        steps.append(([*host, "--providers", "triton,sdpa"], 30, {"ATTN_GLUON": "0"}))
    unchecked = set(args.unchecked.split(","))
    for p in args.providers.split(","):
        cmd = [sys.executable, __file__, "--out", str(args.out), "--worker", p]
        if args.no_checks or p in unchecked:
            cmd.append("--no-checks")
        steps.append((cmd, {"sdpa": 40, "triton": 70, "triton-portable": 70}.get(p, 75), {}))
    if args.paired:
        cmd = [sys.executable, __file__, "--out", str(args.out), "--worker", "paired",
               "--paired", args.paired, "--rounds", str(args.rounds)]  # fmt: skip
        steps.append((cmd, math.inf, {}))  # whatever the budget leaves
    for cmd, limit, env in steps:
        left = deadline - time.time()
        if left < 10:
            log(f"budget spent: skipped {' '.join(cmd[-2:])}")
            continue
        _run(cmd, min(limit, left), log, env)
    rows = []
    if results.exists():
        rows = [json.loads(line) for line in results.read_text().splitlines() if line.strip()]
    summary(rows, log)
    return 0


if __name__ == "__main__":
    sys.exit(main())
