"""Nsight Compute: which pipe limits the attention kernels, ours beside SDPA's.

    PYTHONPATH=. python3 benchmarks/ncu_pipes.py --out DIR [--shape 4,16,2048,64,full,bfloat16]
        [--arms flash_attention sdpa fa3 cuda_flash gluon_flash]

Profiles one call (after warm-up) of each arm per shape (``side_by_side.py``'s arms: a
registry name, ``fa3``, a ``cuda_flash:FLAGS`` build; by default the entry point and
SDPA's default backend, cuDNN on Hopper), and reports per kernel the tensor pipe, the
XU pipe (MUFU: exp2, and type conversions), the FMA and ALU pipes, issue slots and the
top stalls. The guard's own profile (``guard.measure.profile``) answers "what changed";
this answers "what is the kernel waiting for". Metrics the chip lacks (``ncu
--query-metrics``) are left out and named. Writes DIR/ncu-pipes.md and the raw CSV.
"""

from __future__ import annotations

import argparse
import csv
import io
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from ncu_gluon import parse_shape  # noqa: E402  (benchmarks/ is not a package)
from side_by_side import arm  # noqa: E402

RANGE = "pipes"
PIPES = {
    "gpu__time_duration.sum": "duration (ns)",
    "sm__cycles_elapsed.avg.per_second": "SM clock (Hz)",
    "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active": "tensor pipe %",
    "sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active": "XU pipe (MUFU) %",
    "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active": "FMA pipe %",
    "sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active": "ALU pipe %",
    "sm__inst_issued.avg.pct_of_peak_sustained_active": "issue slots %",
    "lts__t_sector_hit_rate.pct": "L2 hit %",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "DRAM %",
}
STALLS = ("wait", "barrier", "gmma", "math_pipe_throttle", "long_scoreboard", "not_selected",
          "dispatch_stall", "short_scoreboard")  # fmt: skip
Shape = tuple[int, int, int, int, bool, str]  # B, H, S, D, causal, dtype
SHAPES: list[Shape] = [(4, 16, 2048, 64, False, "bfloat16"), (4, 32, 4096, 128, False, "float16")]
ARMS = ("flash_attention", "sdpa")  # profiled in this order per shape: one launch each


def target(shapes: list[Shape], arms: list[str]) -> None:
    """Runs in ncu: per shape and arm, warm-up calls, then one call in the range. An arm
    that cannot run the shape is left out and named (no launch, no row)."""
    import torch

    for b, h, s, d, causal, dtype in shapes:
        q, k, v = (
            torch.randn(b, h, s, d, device="cuda", dtype=getattr(torch, dtype)) for _ in range(3)
        )
        for name in arms:
            try:
                fn = arm(name, q, k, v, causal)
            except Exception as exc:  # a build or load that fails: name it, go on
                fn = f"{type(exc).__name__}: {exc}"
            if isinstance(fn, str):
                print(f"skipped {name} {(b, h, s, d, causal, dtype)}: {fn}", flush=True)
                continue
            for _ in range(5):
                fn()
            torch.cuda.synchronize()
            torch.cuda.nvtx.range_push(RANGE)
            fn()
            torch.cuda.synchronize()
            torch.cuda.nvtx.range_pop()
            print(f"profiled {name} {(b, h, s, d, causal, dtype)}", flush=True)


def profile_command(
    ncu: str, ncu_args: list[str], shapes: list[Shape], arms: list[str]
) -> list[str]:
    """ncu with ``ncu_args`` over this file's target: the calls in the NVTX range only, at
    the clocks the GPU sets."""
    shape_args = [f"--shape={b},{h},{s},{d},{'causal' if c else 'full'},{dt}"
                  for b, h, s, d, c, dt in shapes]  # fmt: skip
    return [ncu, "--nvtx", "--nvtx-include", f"{RANGE}/", "--clock-control", "none",
            *ncu_args, sys.executable, str(Path(__file__).resolve()), "--target",
            *shape_args, "--arms", *arms]  # fmt: skip


def profiled_calls(stdout: str) -> list[str]:
    """The target's profiled calls in launch order, each "NAME (shape)"."""
    return [line.removeprefix("profiled ") for line in stdout.splitlines()
            if line.startswith("profiled ")]  # fmt: skip


def known_metrics(ncu: str, wanted: list[str]) -> tuple[list[str], list[str]]:
    """The wanted metrics this GPU's ncu knows, and those it does not."""
    listing = subprocess.run(
        [ncu, "--query-metrics"], capture_output=True, text=True, timeout=120
    ).stdout
    bases = {line.split()[0] for line in listing.splitlines() if line.strip()}
    have = [m for m in wanted if m.split(".")[0] in bases]
    return have, [m for m in wanted if m not in have]


def rows_of(raw: str) -> list[dict[str, str]]:
    """ncu --csv --page raw: a header, a units row, then one row per kernel launch."""
    lines = [line for line in raw.splitlines() if line.startswith('"')]
    table = list(csv.DictReader(io.StringIO("\n".join(lines))))
    return table[1:]  # the units row


def markdown(rows: list[dict[str, str]], names: list[str], metrics: list[str]) -> str:
    cols = [m for m in PIPES if m in metrics]
    stall_cols = [m for m in metrics if m.startswith("smsp__warp_issue_stalled_")]
    head = ["call", "kernel", *(PIPES[m] for m in cols), "top stalls (% of warps)"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    # A call may launch more than one kernel (FA3 fills its output first): where the
    # launches and the profiled calls differ in number, a call's name would land on
    # another call's kernel, so every row is a launch and the calls are listed below.
    labels = names if len(names) == len(rows) else [f"launch {i}" for i in range(len(rows))]
    for name, row in zip(labels, rows, strict=True):
        stalls = sorted(
            ((m.split("stalled_")[1].split("_per_warp")[0], float(row[m].replace(",", "")))
             for m in stall_cols if row.get(m)), key=lambda x: -x[1])[:3]  # fmt: skip
        cells = [row.get(m, "—") for m in cols]
        out.append("| " + " | ".join([name, row.get("Kernel Name", "?")[:60], *cells,
                   ", ".join(f"{r} {v:.1f}" for r, v in stalls)]) + " |")  # fmt: skip
    if labels is not names:
        out.append(f"\n{len(rows)} launches of {len(names)} calls, in order: " + "; ".join(names))
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--shape", type=parse_shape, action="append", default=None)
    parser.add_argument("--arms", nargs="+", default=list(ARMS), help="side_by_side.py's arms")
    parser.add_argument("--target", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    shapes = args.shape or SHAPES
    if args.target:
        target(shapes, args.arms)
        return 0
    ncu = shutil.which("ncu")
    if ncu is None or args.out is None:
        print("ncu not on PATH (or no --out): nothing profiled", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    wanted = [*PIPES, *(f"smsp__warp_issue_stalled_{r}_per_warp_active.pct" for r in STALLS)]
    metrics, missing = known_metrics(ncu, wanted)
    cmd = profile_command(ncu, ["--metrics", ",".join(metrics), "--csv", "--page", "raw"],
                          shapes, args.arms)  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=500)
    (args.out / "ncu-pipes.csv").write_text(proc.stdout)
    (args.out / "ncu-pipes.err").write_text(proc.stderr)
    names = profiled_calls(proc.stdout)
    rows = rows_of(proc.stdout)
    text = markdown(rows, names, metrics) if rows else proc.stdout[-3000:] + proc.stderr[-3000:]
    if missing:
        text += "\n\nNot known to this ncu: " + ", ".join(missing)
    (args.out / "ncu-pipes.md").write_text(text + "\n")
    print(text)
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())
