"""The entry point's dispatch table: measure the Triton and Gluon kernels on a grid of
shapes, build the table ``kernels/flash_plan.choose`` reads, check the entry point with it.

    # on the GPU: the kernels by name on the grid (2 interleaved rounds)
    PYTHONPATH=. python3 benchmarks/dispatch_table.py measure --out DIR
    # anywhere: the table from that data (the fastest kernel per shape)
    PYTHONPATH=. python3 benchmarks/dispatch_table.py build DIR/dispatch-grid.jsonl \\
        --gpu "NVIDIA H200" --source docs/data/h200-.../dispatch-grid.jsonl \\
        --out kernels/dispatch/nvidia-h200.json
    # on the GPU: the entry point with that table beside both kernels (3 rounds), then
    # the worst ratio of the entry point to the faster of its kernels per shape
    ATTN_DISPATCH_TABLE=kernels/dispatch/nvidia-h200.json PYTHONPATH=. python3 \\
        benchmarks/dispatch_table.py measure --check --out DIR
    PYTHONPATH=. python3 benchmarks/dispatch_table.py check DIR/entry-check.jsonl

The grid (``GRID``): S from 64 to 32768 with the odd lengths beside each power of two
(127, 1023, 1025, 4095, ...), head_dim 64 and 128, causal or not, fp16 and bf16, many
(batch, head) pairs and few, GQA, and seq_q != seq_k. Each shape: inputs drawn once
(randn), each arm checked against a float32 reference on its first head (NaN or a
relative error above 2e-2 is never timed), then rounds with the arms' order rotated, each
time the median of CUDA-graph replays (``benchmarks/side_by_side.py``).
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from kernels import dispatch_table
from kernels.dispatch_table import DispatchTable, Point

Shape = tuple[int, int, int, int, int, int, bool, str]  # B, Hq, Hkv, Sq, Sk, D, causal, dtype

LENGTHS = (64, 127, 128, 255, 256, 511, 512, 1023, 1024, 1025, 2047, 2048, 2049, 4095, 4096,
           4097, 8191, 8192, 16384, 32768)  # fmt: skip
TOKENS = 1 << 19  # batch x heads x S of a "many pairs" shape (16 heads)


def _grid() -> list[Shape]:
    shapes: list[Shape] = []
    for dtype in ("bfloat16", "float16"):
        for d in (128, 64):
            for causal in (False, True):
                for s in LENGTHS:
                    shapes.append((max(1, TOKENS // (16 * s)), 16, 16, s, s, d, causal, dtype))
                    if s <= 4097 and dtype == "bfloat16":  # few pairs: few tiles to deal
                        shapes.append((1, 8, 8, s, s, d, causal, dtype))
    for d in (128, 64):
        for causal in (False, True):
            for s in (512, 1023, 2048, 4096, 8192, 16384):  # GQA, 4 query heads per KV head
                shapes.append((max(1, TOKENS // (32 * s)), 32, 8, s, s, d, causal, "bfloat16"))
            for sq, sk in ((1024, 4096), (512, 8192), (2048, 16384), (4096, 1024)):
                shapes.append((2, 16, 16, sq, sk, d, causal, "bfloat16"))
    return shapes


GRID = _grid()
KERNEL_ARMS = {"triton_flash": "triton", "gluon_flash": "gluon"}
ENTRY = "flash_attention"


def _measure_shape(shape: Shape, arms: list[str], rounds: int, rep_ms: int) -> list[dict[str, Any]]:
    import torch
    import triton.testing

    from benchmarks.side_by_side import checked_arms, random_inputs
    from kernels.reference import attention_reference

    causal = shape[6]
    q, k, v = random_inputs(shape)
    # The reference of the first head only: a float32 score matrix of S x S per head.
    ref = attention_reference(q[:1, :1], k[:1, :1], v[:1, :1], causal=causal, dtype=torch.float32)
    fns, rows = checked_arms(shape, arms, q, k, v, ref)
    del ref
    order = list(fns)
    times: dict[str, list[float]] = {name: [] for name in order}
    for r in range(rounds):
        for name in order[r % len(order) :] + order[: r % len(order)] if order else []:
            ms = triton.testing.do_bench_cudagraph(fns[name], rep=rep_ms, return_mode="median")
            times[name].append(ms * 1e3)
    for name, us in times.items():
        rows[name]["us_rounds"] = us
        rows[name]["us_med"] = statistics.median(us)
    return list(rows.values())


def measure(out: Path, check: bool, rounds: int, rep_ms: int, shapes: list[Shape]) -> int:
    import torch

    if not torch.cuda.is_available():
        print("dispatch_table: measure needs a CUDA GPU", file=sys.stderr)
        return 2
    arms = [ENTRY, *KERNEL_ARMS] if check else list(KERNEL_ARMS)
    out.mkdir(parents=True, exist_ok=True)
    path = out / ("entry-check.jsonl" if check else "dispatch-grid.jsonl")
    gpu = torch.cuda.get_device_name()
    with path.open("a", encoding="utf-8") as sink:
        for i, shape in enumerate(shapes):
            rows = _measure_shape(shape, arms, rounds, rep_ms)
            for row in rows:
                row["gpu"] = gpu
                sink.write(json.dumps(row) + "\n")
            sink.flush()
            shown = " ".join(
                f"{r['arm']}={r['us_med']:.1f}" if "us_med" in r else f"{r['arm']}=refused"
                for r in rows
            )
            print(f"[{i + 1}/{len(shapes)}] {shape} {shown}", flush=True)
    return 0


def _rows(path: Path) -> list[dict[str, Any]]:
    """``measure``'s lines, from the file it wrote or a gzip-compressed copy (``.gz``, as
    docs/data keeps the larger ones)."""
    if path.suffix == ".gz":
        text = gzip.decompress(path.read_bytes()).decode("utf-8")
    else:
        text = path.read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line]


def _by_shape(rows: list[dict[str, Any]]) -> dict[tuple[Any, ...], dict[str, dict[str, Any]]]:
    """Rows by shape and arm; ValueError for a (shape, arm) measured twice (an output
    folder used for two runs)."""
    shapes: dict[tuple[Any, ...], dict[str, dict[str, Any]]] = {}
    for row in rows:
        arms = shapes.setdefault(tuple(row["shape"]), {})
        if row["arm"] in arms:
            raise ValueError(f"{row['arm']} at {row['shape']} measured twice: one run per file")
        arms[row["arm"]] = row
    return shapes


def build(data: Path, gpu: str, source: str, command: str) -> DispatchTable:
    """The table of ``data`` (``measure``'s lines, all of ``gpu``: ValueError for a row
    of another): per shape the faster kernel, or the Triton kernel where the Gluon kernel
    was refused."""
    rows = _rows(data)
    others = sorted({str(r.get("gpu")) for r in rows} - {gpu})
    if others:
        raise ValueError(f"{data}: rows of {', '.join(others)}, not only {gpu}")
    points = []
    for shape, arms in _by_shape(rows).items():
        batch, heads_q, heads_kv, seq_q, seq_k, head_dim, causal, dtype = shape
        timed = {
            KERNEL_ARMS[a]: r["us_med"]
            for a, r in arms.items()
            if a in KERNEL_ARMS and "us_med" in r
        }
        if "triton" not in timed:
            continue  # nothing to choose between
        gluon_us = timed.get("gluon", float("inf"))
        points.append(
            Point(
                head_dim=head_dim,
                causal=causal,
                dtype=dtype,
                seq_q=seq_q,
                seq_k=seq_k,
                batch_heads=batch * heads_q,
                group=heads_q // heads_kv,
                kernel="gluon" if gluon_us < timed["triton"] else "triton",
                triton_us=round(timed["triton"], 2),
                gluon_us=round(gluon_us, 2) if gluon_us != float("inf") else -1.0,
            )
        )
    return DispatchTable(gpu=gpu, source=source, command=command, points=tuple(points))


def check(data: Path, slack: float) -> tuple[list[str], int]:
    """Per shape of ``data`` (``measure --check``'s lines): the entry point's time over the
    faster of its kernels, the median of per-round ratios; lines, and how many exceed
    ``1 + slack``."""
    head = "| B,Hq,Hkv,Sq,Sk,D,causal,dtype | entry | triton | gluon (us) | entry / fastest |"
    lines = [head, "|---|---:|---:|---:|---:|"]
    over = 0
    for shape, arms in _by_shape(_rows(data)).items():
        entry = arms.get(ENTRY, {})
        kernels = [arms[a]["us_rounds"] for a in KERNEL_ARMS if "us_rounds" in arms.get(a, {})]
        if "us_rounds" not in entry or not kernels:
            lines.append(f"| {','.join(map(str, shape))} | refused | | | |")
            continue
        fastest = [min(per) for per in zip(*kernels, strict=True)]
        ratio = statistics.median(e / f for e, f in zip(entry["us_rounds"], fastest, strict=True))
        over += ratio > 1 + slack
        us = [
            f"{arms[a]['us_med']:.1f}" if "us_med" in arms.get(a, {}) else "-" for a in KERNEL_ARMS
        ]
        lines.append(
            f"| {','.join(map(str, shape))} | {entry['us_med']:.1f} | {us[0]} | {us[1]} | "
            f"{ratio:.3f}{' **' if ratio > 1 + slack else ''} |"
        )
    return lines, over


def _shape(text: str) -> Shape:
    b, hq, hkv, sq, sk, d, causal, dtype = text.split(",")
    return (int(b), int(hq), int(hkv), int(sq), int(sk), int(d), causal == "True", dtype)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("measure", help="time the kernels (or, --check, the entry point too)")
    m.add_argument("--out", type=Path, required=True)
    m.add_argument("--check", action="store_true", help="the entry point beside its kernels")
    m.add_argument("--rounds", type=int, default=None, help="default 2, or 3 with --check")
    m.add_argument("--rep-ms", type=int, default=10, help="do_bench_cudagraph's rep")
    m.add_argument("--every", type=int, default=1, help="every Nth grid shape only")
    m.add_argument("--start", type=int, default=0, help="from the grid's Nth shape (with --every)")
    m.add_argument(
        "--shape", action="append", type=_shape, help="B,Hq,Hkv,Sq,Sk,D,causal,dtype instead"
    )
    b = sub.add_parser("build", help="the table from measured data")
    b.add_argument("data", type=Path)
    b.add_argument("--gpu", required=True, help='torch.cuda.get_device_name(), e.g. "NVIDIA H200"')
    b.add_argument("--source", required=True, help="the data file's path in the repository")
    b.add_argument("--out", type=Path, required=True)
    c = sub.add_parser("check", help="the entry point over the faster of its kernels")
    c.add_argument("data", type=Path)
    c.add_argument("--slack", type=float, default=0.02)
    args = parser.parse_args(argv)
    if args.command == "measure":
        rounds = args.rounds or (3 if args.check else 2)
        shapes = args.shape or GRID[args.start :: args.every]
        return measure(args.out, args.check, rounds, args.rep_ms, shapes)
    if args.command == "build":
        rounds = sorted({len(r["us_rounds"]) for r in _rows(args.data) if "us_rounds" in r})
        shown = "/".join(map(str, rounds)) or "no"
        command = f"benchmarks/dispatch_table.py measure --out DIR ({shown} interleaved rounds)"
        try:
            table = build(args.data, args.gpu, args.source, command)
        except ValueError as exc:
            print(f"dispatch_table: {exc}", file=sys.stderr)
            return 2
        args.out.parent.mkdir(parents=True, exist_ok=True)
        tmp = args.out.with_suffix(".tmp")
        tmp.write_text(json.dumps(dispatch_table.to_json(table), indent=1) + "\n", encoding="utf-8")
        tmp.replace(args.out)
        gluon = sum(p.kernel == "gluon" for p in table.points)
        print(f"{args.out}: {len(table.points)} points, the Gluon kernel at {gluon}")
        return 0
    try:
        lines, over = check(args.data, args.slack)
    except ValueError as exc:
        print(f"dispatch_table: {exc}", file=sys.stderr)
        return 2
    print("\n".join(lines))
    print(
        f"{over} shape(s) where the entry point took more than "
        f"{1 + args.slack:.2f}x the faster kernel"
    )
    return 1 if over else 0


if __name__ == "__main__":
    raise SystemExit(main())
