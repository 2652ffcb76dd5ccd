"""Compiler resource report for the Triton attention kernel on sm_90, with no GPU.

    PYTHONPATH=. python3 benchmarks/compile_report.py [--arch sm_90] [--variants]

The compile-only machinery is ``kernel_reports/triton_compile.py`` (a target-only
triton driver; launches become compiles, so the real launcher and the runtime's argument
specialization run unchanged on CPU tensors of the suite's shapes), and the launcher's
choice of config and path for an arch is ``kernels/launch_paths.choice_for``; the guard
collects the same records per case (``guard/measure/resources.py``). For each
(shape, config) this prints registers, spill bytes (``ptxas -v`` of the kernel's PTX,
with triton's bundled ptxas), shared memory, warps, and counts of wgmma / TMA /
cp.async instructions in the PTX and of ``ttg.warp_specialize`` regions in the TTGIR.
``--variants`` adds every config of ``benchmarks/triton_variants.py``.

``--gluon`` reports the Gluon Hopper kernel (``kernels/gluon_flash_fwd.py``) instead:
every variant for fp16/bf16 x head_dim 64/128 x causal on a ragged GQA shape, and the
opt-in configs of ``GLUON_OPT_IN`` (the persistent kernel's runs of key tiles); with
``--json`` one JSON object per line (``tests/test_gluon_compile.py`` reads them).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
import triton

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tune_triton  # benchmarks/ is not a package

from kernel_reports.ptxas import exponentials_under_pv, find_cuobjdump, ptxas_report
from kernel_reports.triton_compile import CompiledLaunch, compile_only, kernel_record, ptxas_for
from kernels import triton_flash
from kernels.arch import parse_arch
from kernels.flash_plan import TMA_WS
from kernels.launch_paths import choice_for


def resources(launch: CompiledLaunch, arch: str) -> dict:
    record = kernel_record(launch, arch, config={}, path="")
    ptx = launch.kernel.asm["ptx"]
    return {
        "regs": record["registers"],
        "spill_st": record["spill_store_bytes"],
        "spill_ld": record["spill_load_bytes"],
        "smem": record["shared_bytes"],
        "warps": record["num_warps"],
        "wgmma": ptx.count("wgmma.mma_async"),
        "tma": ptx.count("cp.async.bulk.tensor"),
        "cp_async": ptx.count("cp.async.cg") + ptx.count("cp.async.ca"),
        "ws_regions": launch.kernel.asm["ttgir"].count("ttg.warp_specialize("),
        "setmaxnreg": sorted(
            {int(n) for n in re.findall(r"setmaxnreg\.\w+\.sync\.aligned\.u32\s+(\d+)", ptx)}
        ),
        "wgmma_wait": sorted(
            {int(n) for n in re.findall(r"wgmma\.wait_group\.sync\.aligned\s+(\d+)", ptx)}
        ),
        "atomics": sorted(
            set(re.findall(r"(?:atom|ld|st|red)\.global\.gpu\.(acq_rel|acquire|release)", ptx))
        ),
        "ptxas_warnings": _ptxas_warnings(ptx, arch),
        "exp_under_pv": _exponentials_under_pv(launch.kernel.asm["cubin"]),
    }


def _exponentials_under_pv(cubin: bytes) -> int | None:
    """``exponentials_under_pv`` of a cubin's SASS; None without a cuobjdump to read it."""
    tool = find_cuobjdump()
    if tool is None:
        return None
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        listing = subprocess.run([tool, "-sass", f.name], capture_output=True, text=True)
    return exponentials_under_pv(listing.stdout) if listing.returncode == 0 else None


def _ptxas_warnings(ptx: str, arch: str) -> list[str]:
    ptxas, gpu_name = ptxas_for(parse_arch(arch))
    report = ptxas_report(ptx, gpu_name, ptxas, extra_flags=("-lineinfo",))  # cached
    return [line for line in report.splitlines() if "arning" in line]


# Ragged lengths, seq_q != seq_k and GQA: the general specialization, as (batch, heads_q,
# heads_kv, seq_q, seq_k).
GENERAL_SHAPE = (2, 8, 4, 1000, 777)
# Opt-in Gluon configs no default reaches everywhere, compiled too, for both dtypes:
# (variant, head_dim, causal, overrides, shape). SPLIT_KEYS needs row blocks that do not
# divide among an H100's 132 CTAs: 1024 of them.
GLUON_OPT_IN = [
    (variant, head_dim, False, {"SPLIT_KEYS": 1}, (4, 16, 16, 2048, 2048))
    for variant in ("ws-persistent", "ws-persistent-pingpong")
    for head_dim in (64, 128)
] + [
    (variant, head_dim, True, {"PAIRED_ROUNDS": 99}, (4, 16, 16, 2048, 2048))
    for variant in ("ws-persistent", "ws-persistent-pingpong")
    for head_dim in (64, 128)
]


def _gluon_entry(variant: str, dtype: torch.dtype, head_dim: int, causal: bool,
                 overrides: dict, shape: tuple[int, ...], arch: str) -> dict:  # fmt: skip
    from kernels import gluon_flash_fwd as gf

    batch, heads_q, heads_kv, seq_q, seq_k = shape
    q = torch.empty(batch, heads_q, seq_q, head_dim, dtype=dtype)
    k = torch.empty(batch, heads_kv, seq_k, head_dim, dtype=dtype)
    entry = {"variant": variant, "dtype": str(dtype).removeprefix("torch."),
             "head_dim": head_dim, "causal": causal, "overrides": overrides}  # fmt: skip
    try:
        with compile_only(arch) as launches:
            gf.launch(q, k, k, torch.empty_like(q), causal, head_dim**-0.5, variant, **overrides)
            entry.update(resources(launches[-1], arch))
    except Exception as exc:
        entry["error"] = tune_triton.first_line(exc)
    return entry


def gluon_report(as_json: bool, arch: str = "sm_90") -> int:
    """Compile every Gluon variant's default configs and the opt-in ones for ``arch``; 1
    if any fails to compile."""
    from kernels import gluon_flash_fwd as gf

    configs = [
        (variant, head_dim, causal, {}, GENERAL_SHAPE)
        for variant in gf.VARIANTS
        for head_dim in gf.SUPPORTED_HEAD_DIMS
        for causal in (False, True)
    ] + GLUON_OPT_IN
    failed = 0
    for variant, head_dim, causal, overrides, shape in configs:
        for dtype in (torch.float16, torch.bfloat16):
            entry = _gluon_entry(variant, dtype, head_dim, causal, overrides, shape, arch)
            failed += "error" in entry
            print(json.dumps(entry) if as_json else entry, flush=True)
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", default="suites/default.yaml")
    parser.add_argument("--arch", default="sm_90")
    parser.add_argument("--variants", action="store_true")
    parser.add_argument("--gluon", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.gluon:
        return gluon_report(args.json, args.arch)
    print(f"triton {triton.__version__}, target {args.arch}")
    workloads, _ = tune_triton.load_workloads(args.suite)
    variants = {}
    if args.variants:
        import triton_variants

        variants = triton_variants.VARIANTS
    for b, h, s, d, causal, dtype in workloads:
        q = torch.empty(b, h, s, d, dtype=getattr(torch, dtype))
        label = f"{b}x{h}x{s}x{d}:{'causal' if causal else 'full'}"
        plan = choice_for(
            args.arch,
            "triton",
            head_dim=d,
            causal=causal,
            seq_q=s,
            seq_k=s,
            batch_heads=b * h,
            elem_size=q.element_size(),
        )
        ws = plan.path == TMA_WS
        runs = {
            "main" + ("(ws)" if ws else ""): lambda q=q, causal=causal, plan=plan: (
                triton_flash.launch_choice(
                    q, q, q, torch.empty_like(q), causal, q.shape[-1] ** -0.5, plan
                )
            )
        }
        for name, cfg in variants.items():
            if triton_variants.applies(name, cfg, d):
                runs[name] = lambda q=q, causal=causal, cfg=cfg: triton_variants.tma_fwd.launch(
                    q, q, q, torch.empty_like(q), causal, q.shape[-1] ** -0.5, cfg
                )
        for name, fn in runs.items():
            try:
                with compile_only(args.arch) as launches:
                    fn()
                    row = resources(launches[-1], args.arch)
                print(f"{label:<22} {name:<20} {row}", flush=True)
            except Exception as exc:
                print(f"{label:<22} {name:<20} FAILED {tune_triton.first_line(exc)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
