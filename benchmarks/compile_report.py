"""Compiler resource report for the Triton attention kernel on sm_90, with no GPU.

    PYTHONPATH=. python3 benchmarks/compile_report.py [--arch sm_90] [--variants]

The compile-only machinery is ``kernels/triton_compile.py`` (a target-only triton
driver; launches become compiles, so the real launcher and the runtime's argument
specialization run unchanged on CPU tensors of the suite's shapes), and the launcher's
choice of config and path for an arch is ``kernels/triton_flash_resources.launch_plan``;
the guard collects the same records per case (``guard/resources.py``). For each
(shape, config) this prints registers, spill bytes (``ptxas -v`` of the kernel's PTX,
with triton's bundled ptxas), shared memory, warps, and counts of wgmma / TMA /
cp.async instructions in the PTX and of ``ttg.warp_specialize`` regions in the TTGIR.
``--variants`` adds every config of ``benchmarks/triton_variants.py``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import triton

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tune_triton  # benchmarks/ is not a package

from kernels import triton_flash_fwd as tf
from kernels.triton_compile import CompiledLaunch, compile_only, kernel_record
from kernels.triton_flash_resources import TMA_WS, launch_plan


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
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", default="suites/default.yaml")
    parser.add_argument("--arch", default="sm_90")
    parser.add_argument("--variants", action="store_true")
    args = parser.parse_args(argv)
    print(f"triton {triton.__version__}, target {args.arch}")
    workloads, _ = tune_triton.load_workloads(args.suite)
    variants = {}
    if args.variants:
        import triton_variants

        variants = triton_variants.VARIANTS
    for b, h, s, d, causal, dtype in workloads:
        q = torch.empty(b, h, s, d, dtype=getattr(torch, dtype))
        label = f"{b}x{h}x{s}x{d}:{'causal' if causal else 'full'}"
        plan = launch_plan(args.arch, d, causal, s, q.element_size())
        ws = plan.path == TMA_WS
        runs = {
            "main" + ("(ws)" if ws else ""): lambda q=q, causal=causal, plan=plan, ws=ws: (
                tf._launch(
                    q, q, q, torch.empty_like(q), causal, q.shape[-1] ** -0.5, plan.config, ws=ws
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
