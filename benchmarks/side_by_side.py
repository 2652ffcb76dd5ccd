"""Attention forwards side by side on one GPU: ours, SDPA's default (cuDNN) and
FlashAttention-3, in interleaved rounds.

    PYTHONPATH=. python3 benchmarks/side_by_side.py --set decode --out DIR [--rounds 5]

For each shape: inputs drawn once (randn); every arm's output checked against a float32
reference first (relative norm error, max error; NaN fails); then ``--rounds`` rounds,
the order of the arms rotated each round, each arm's time in a round the median of CUDA
graph replays (``triton.testing.do_bench_cudagraph``). Reported per arm: the median over
rounds, the ratio to SDPA's default per round and its median, and ``eager``: the wall
time per Python call of a loop of calls (host cost included).

Arms (``--arms``; default per set):

- a registry name: ``flash_attention`` (the entry point), ``triton_flash``, ``gluon_flash``,
  ``cuda_flash``, ``sdpa`` (the default backend: cuDNN on Hopper), ``sdpa_flash``, ...;
- ``fa3``: FlashAttention-3's forward from the ``fa3-fwd`` wheel (PyPI; bf16 only, sm_90),
  given (B, S, H, D) contiguous copies of the same inputs, its own split heuristic
  (``num_splits=0``); where it does not load the arm is refused with its reason;
- ``decode[:splits=N,bm=M,bn=N,w=W,s=S]``: the split-KV kernel (``kernels/triton_decode.py``)
  with a split count or config of its own;
- ``pointer``: the Triton kernel's row-block path, never the split-KV kernel;
- ``cuda_flash:FLAGS``: the CUDA kernel's Hopper path built with the tuning flags FLAGS
  (e.g. ``"cuda_flash:-DFLASH_SM90_D64_CAUSAL_M=192"``, the macros at the top of
  ``kernels/csrc/flash_fwd_sm90.cuh``): each variant its own build, side by side in one
  process with the others.

Writes ``DIR/side_by_side.jsonl`` (one line per shape and arm) and prints a table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

Shape = tuple[int, int, int, int, int, int, bool, str]  # B, Hq, Hkv, Sq, Sk, D, causal, dtype
Fn = Callable[[], torch.Tensor]

SETS: dict[str, list[Shape]] = {
    # Decode: a few queries against a long cache (the first three: the split-KV goals).
    "decode": [
        (4, 32, 8, 1, 32768, 128, False, "bfloat16"),
        (64, 32, 8, 1, 4096, 128, False, "bfloat16"),
        (1, 64, 8, 4, 131072, 128, False, "bfloat16"),
        (32, 16, 16, 1, 16384, 64, False, "bfloat16"),
        (8, 32, 8, 16, 8192, 128, False, "float16"),
        (4, 32, 8, 1, 32768, 64, False, "float16"),
    ],
    # Where the split-KV kernel starts to pay (flash_plan.DECODE_MIN_SEQ_K).
    "decode-short": [
        (4, 32, 8, sq, sk, d, False, "bfloat16")
        for sq in (1, 16)
        for d in (64, 128)
        for sk in (128, 256, 512, 1024, 2048)
    ],
    # The entry point against its own kernels around the dispatch boundaries.
    "entry-grid": [
        (4, 16, 16, s, s, d, causal, "bfloat16")
        for d in (64, 128)
        for causal in (False, True)
        for s in (256, 512, 1023, 1024, 1536, 2047, 2048, 4095)
    ],
    # The head_dim-128 half of entry-grid, and its small-batch neighbours.
    "entry-hd128": [
        (b, h, h, s, s, 128, causal, "bfloat16")
        for b, h in ((4, 16), (1, 8))
        for causal in (False, True)
        for s in (512, 1023, 1536, 2047)
    ],
    # Few (batch, head) pairs, where a persistent grid has few tiles to deal.
    "entry-small": [
        (b, 8, 8, s, s, 128, causal, "bfloat16")
        for b in (1, 2)
        for causal in (False, True)
        for s in (384, 512, 1023, 1536)
    ],
    # docs/PERFORMANCE.md's bf16 shapes from 1024 up.
    "table": [
        (4, 32, 32, 4096, 4096, 128, False, "bfloat16"),
        (1, 32, 8, 8192, 8192, 128, True, "bfloat16"),
        (1, 16, 16, 16384, 16384, 128, True, "bfloat16"),
        (2, 16, 16, 4097, 4097, 128, False, "bfloat16"),
        (1, 32, 4, 16384, 16384, 128, False, "bfloat16"),
        (1, 64, 8, 32768, 32768, 128, True, "bfloat16"),
        (2, 32, 32, 4096, 4096, 64, True, "bfloat16"),
        (4, 16, 16, 2048, 2048, 64, False, "bfloat16"),
        (8, 32, 32, 1024, 1024, 64, True, "bfloat16"),
    ],
}
SETS["table-d64"] = [shape for shape in SETS["table"] if shape[5] == 64]
SETS["table-d128"] = [shape for shape in SETS["table"] if shape[5] == 128 and shape[3] <= 16384]
# Causal head_dim 64 around the CUDA kernel's switch to 192-row tiles (D64_CAUSAL_LONG_Q).
SETS["d64-causal"] = [
    (b, 32, 32, s, s, 64, True, "bfloat16")
    for b, s in ((8, 1024), (8, 1536), (4, 2048), (4, 3072), (2, 4096), (1, 8192))
]
# Non-causal head_dim 64 on the CUDA kernel's 192-key tiles: the ragged last block of
# 192, 128 (narrowed) and 64 (narrowed) keys.
SETS["d64-full"] = [
    (b, h, hkv, s, s, 64, False, dtype)
    for b, h, hkv, s, dtype in (
        (4, 16, 16, 1536, "bfloat16"),
        (4, 16, 16, 2048, "bfloat16"),
        (2, 32, 32, 4096, "bfloat16"),
        (2, 16, 16, 4097, "bfloat16"),
        (1, 32, 8, 8192, "bfloat16"),
        (4, 16, 16, 2048, "float16"),
    )
]
TABLE_ARMS = "sdpa,fa3,flash_attention,gluon_flash,cuda_flash"
DEFAULT_ARMS = {
    "decode": "sdpa,fa3,flash_attention,triton_flash,gluon_flash",
    "decode-short": "sdpa,flash_attention,decode,pointer,gluon_flash",
    "table": TABLE_ARMS,
    "table-d64": TABLE_ARMS,
    "table-d128": TABLE_ARMS,
    "d64-causal": "sdpa,fa3,gluon_flash,cuda_flash",
    "d64-full": "sdpa,fa3,gluon_flash,cuda_flash",
    "entry-grid": "sdpa,flash_attention,triton_flash,gluon_flash",
    "entry-small": "sdpa,flash_attention,triton_flash,gluon_flash",
    "entry-hd128": "flash_attention,triton_flash,gluon_flash",
}


REFERENCE_SCORES = 2**28  # float32 scores (1 GiB) above which the reference samples rows
REFERENCE_ROWS = 256


def _fa3(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> Fn | str:
    try:
        from fa3_fwd_interface import flash_attn_func  # the fa3-fwd wheel
    except ImportError as exc:
        return f"the fa3-fwd wheel does not load here ({exc}): pip install fa3-fwd"
    if q.dtype != torch.bfloat16:
        return "fa3-fwd has bf16 kernels only"
    if torch.cuda.get_device_capability(q.device) != (9, 0):
        return "fa3-fwd runs on sm_90 only"
    if causal and q.shape[2] != k.shape[2]:
        return "FA3 aligns causal bottom-right, ours top-left: not the same attention"
    qt, kt, vt = (t.transpose(1, 2).contiguous() for t in (q, k, v))

    def call() -> torch.Tensor:
        out: torch.Tensor = flash_attn_func(qt, kt, vt, causal=causal, num_splits=0)
        return out

    return call


def _decode_arm(spec: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> Fn:
    import triton

    from kernels import flash_plan, triton_decode
    from kernels.flash_launch import prepare

    opts = dict(kv.split("=") for kv in spec.split(":", 1)[1].split(",")) if ":" in spec else {}
    base = flash_plan.DECODE_CONFIGS[q.shape[-1]]
    config = triton.Config(
        {"BLOCK_M": int(opts.get("bm", base.kwargs["BLOCK_M"])),
         "BLOCK_N": int(opts.get("bn", base.kwargs["BLOCK_N"]))},
        num_warps=int(opts.get("w", base.num_warps)),
        num_stages=int(opts.get("s", base.num_stages)),
    )  # fmt: skip
    splits = int(opts["splits"]) if "splits" in opts else None
    q, k, v, out, scale = prepare(q, k, v, False, None, None)

    def call() -> torch.Tensor:
        triton_decode.launch(q, k, v, out, scale, config, splits=splits)
        return out

    return call


def _cuda_variant(
    spec: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool
) -> Fn | str:
    from kernels import cuda_flash

    reason = cuda_flash.unavailable_reason()
    if reason:
        return reason
    flags = spec.split(":", 1)[1]
    return lambda: cuda_flash.flash_attention_fwd(
        q, k, v, causal=causal, kernel="hopper", tuning=flags
    )


def arm(name: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> Fn | str:
    """A no-argument call of ``name`` on these inputs, or the reason it cannot run."""
    if name.startswith("cuda_flash:"):
        return _cuda_variant(name, q, k, v, causal)
    if name == "fa3":
        return _fa3(q, k, v, causal)
    if name.startswith("decode"):
        return "the split-KV kernel is not causal here" if causal else _decode_arm(name, q, k, v)
    if name == "pointer":
        from kernels import triton_flash

        config = triton_flash.pinned_config(q.device, q.shape[-1], causal, q.element_size())
        return lambda: triton_flash.flash_attention_fwd_config(q, k, v, config, causal=causal)
    from kernels import registry

    spec = registry.get(name)
    reason = spec.probe("cuda")
    if reason:
        return reason
    fn = spec.loader()
    return lambda: fn(q, k, v, causal=causal)


def random_inputs(shape: Shape) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q, k, v of ``shape`` on the GPU, drawn fresh (randn)."""
    batch, heads_q, heads_kv, seq_q, seq_k, head_dim, _, dtype = shape
    kind = getattr(torch, dtype)
    q = torch.randn(batch, heads_q, seq_q, head_dim, device="cuda", dtype=kind)
    k = torch.randn(batch, heads_kv, seq_k, head_dim, device="cuda", dtype=kind)
    return q, k, torch.randn_like(k)


def _errors(out: torch.Tensor, ref: torch.Tensor) -> tuple[float, float]:
    if not torch.isfinite(out).all():
        return float("nan"), float("nan")
    diff = out.float() - ref
    return (diff.norm() / ref.norm()).item(), diff.abs().max().item()


def _eager_us(fn: Fn, calls: int = 100) -> float:
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls * 1e6


def checked_arms(
    shape: Shape,
    arms: list[str],
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    ref: torch.Tensor,
    sample: torch.Tensor | None = None,
) -> tuple[dict[str, Fn], dict[str, dict[str, Any]]]:
    """Each arm's call, checked against ``ref`` first (the reference of the first
    ``ref.shape[0]`` batch rows, at the query positions ``sample`` where given), and its
    row: errors, or why it is refused."""
    causal = shape[6]
    fns: dict[str, Fn] = {}
    rows: dict[str, dict[str, Any]] = {}
    for name in arms:
        row: dict[str, Any] = {"shape": list(shape), "arm": name}
        rows[name] = row
        made = arm(name, q, k, v, causal)
        if isinstance(made, str):
            row["refused"] = made
            continue
        try:
            out = made()
            if out.shape != q.shape:  # FA3: (B, S, H, D)
                out = out.transpose(1, 2)
            # Every element finite, also the rows a sampled reference does not cover.
            finite = bool(torch.isfinite(out).all())
            out = out[: ref.shape[0]] if sample is None else out[: ref.shape[0], :, sample]
            rel, worst = _errors(out, ref)
        except Exception as exc:  # a kernel that cannot take the shape: say so, go on
            row["refused"] = f"{type(exc).__name__}: {exc}"
            continue
        if not finite:
            row["refused"] = "wrong: NaN or inf in the output"
            continue
        row["rel_err"], row["max_err"] = rel, worst
        if rel != rel or rel > 2e-2:  # NaN, or far off: never timed
            row["refused"] = f"wrong: rel err {rel:.3g}"
            continue
        fns[name] = made
    return fns, rows


def measure(shape: Shape, arms: list[str], rounds: int, rep_ms: int) -> list[dict[str, Any]]:
    import triton.testing

    from kernels.reference import attention_reference

    causal = shape[6]
    q, k, v = random_inputs(shape)
    sample = None
    if shape[0] * shape[1] * shape[3] * shape[4] > REFERENCE_SCORES:
        # A float32 score matrix this large does not fit: the first batch row, at
        # REFERENCE_ROWS query positions spread over the sequence, the last included.
        sample = torch.linspace(0, shape[3] - 1, REFERENCE_ROWS, device=q.device).long()
        ref = attention_reference(
            q[:1, :, sample], k[:1], v[:1], causal=causal, dtype=torch.float32, rows=sample
        )
    else:
        ref = attention_reference(q, k, v, causal=causal, dtype=torch.float32)
    fns, rows = checked_arms(shape, arms, q, k, v, ref, sample)
    del ref
    times: dict[str, list[float]] = {name: [] for name in fns}
    order = list(fns)
    for r in range(rounds):
        turn = order[r % len(order) :] + order[: r % len(order)] if order else []
        for name in turn:
            ms = triton.testing.do_bench_cudagraph(fns[name], rep=rep_ms, return_mode="median")
            times[name].append(ms * 1e3)
    base = times.get("sdpa")
    for name, us in times.items():
        row = rows[name]
        row["us_rounds"] = us
        row["us_med"] = statistics.median(us)
        if base:
            per_round = [a / b for a, b in zip(us, base, strict=True)]
            row["over_sdpa_rounds"] = per_round
            row["over_sdpa"] = statistics.median(per_round)
        row["eager_us"] = _eager_us(fns[name])
    return list(rows.values())


def _table(rows: list[dict[str, Any]]) -> str:
    lines = ["| shape (B,Hq,Hkv,Sq,Sk,D,causal,dtype) | arm | us | / sdpa | eager us | rel err |",
             "|---|---|---:|---:|---:|---:|"]  # fmt: skip
    for row in rows:
        shape = ",".join(str(x) for x in row["shape"])
        if "refused" in row:
            lines.append(f"| {shape} | {row['arm']} | refused: {row['refused']} | | | |")
            continue
        ratio = f"{row['over_sdpa']:.3f}" if "over_sdpa" in row else ""
        lines.append(
            f"| {shape} | {row['arm']} | {row['us_med']:.1f} | {ratio} | "
            f"{row['eager_us']:.1f} | {row['rel_err']:.2e} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--set", choices=sorted(SETS), default="decode")
    parser.add_argument("--arms", nargs="+", default=None, help="arms (default per set)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--rep-ms", type=int, default=50, help="do_bench_cudagraph's rep")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("side_by_side: needs a CUDA GPU", file=sys.stderr)
        return 2
    arms = args.arms or DEFAULT_ARMS[args.set].split(",")
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "side_by_side.jsonl"
    rows: list[dict[str, Any]] = []
    with path.open("a", encoding="utf-8") as sink:
        for shape in SETS[args.set]:
            got = measure(shape, arms, args.rounds, args.rep_ms)
            for row in got:
                row["set"] = args.set
                sink.write(json.dumps(row) + "\n")
            sink.flush()
            rows.extend(got)
            print(_table(got).split("\n", 2)[2], flush=True)
    print(_table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
