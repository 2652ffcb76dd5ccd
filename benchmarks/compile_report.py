"""Compiler resource report for the Triton attention kernel on sm_90, with no GPU.

    pip install --no-deps --target /tmp/triton36 triton==3.6.0   # the device's triton
    PYTHONPATH=/tmp/triton36:. python3 benchmarks/compile_report.py [--variants]

Triton compiles for a target without a driver when the active driver only answers
``get_current_target``; launches are turned into ``warmup`` compiles, so the real
launcher (and the runtime's argument specialization: 16-divisible ints, alignment)
runs unchanged on CPU tensors of the suite's shapes. For each (shape, config) it prints
registers, spill bytes (``ptxas -v`` of the kernel's PTX, with triton's bundled ptxas),
shared memory, and counts of wgmma / TMA / cp.async instructions in the PTX and of
``ttg.warp_specialize`` regions in the TTGIR. ``--variants`` adds every config of
``benchmarks/triton_variants.py``.

``--gluon`` reports the Gluon Hopper kernel (``kernels/gluon_flash_fwd.py``) instead:
every variant for fp16/bf16 x head_dim 64/128 x causal, on a ragged GQA shape; with
``--json`` one JSON object per line (``tests/test_gluon_compile.py`` reads them).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.runtime import driver
from triton.runtime.jit import JITFunction

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tune_triton  # benchmarks/ is not a package

from kernels import triton_flash_fwd as tf


class _TargetOnlyDriver:
    def __init__(self, capability: int) -> None:
        self.target = GPUTarget("cuda", capability, 32)

    def get_current_target(self):
        return self.target

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device=None) -> int:
        return 0


_compiled: list = []


def _compile_only(capability: int) -> None:
    driver.set_active(_TargetOnlyDriver(capability))
    run = JITFunction.run

    def warmup_run(self, *args, grid, warmup, **kwargs):
        kernel = run(self, *args, grid=grid, warmup=True, **kwargs)
        _compiled.append(kernel)
        return kernel

    JITFunction.run = warmup_run
    triton.set_allocator(lambda size, alignment, stream: None)


def resources(kernel, arch: str) -> dict:
    ptx = kernel.asm["ptx"]
    ptxas = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin/ptxas")
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "k.ptx")
        Path(src).write_text(ptx)
        log = subprocess.run(
            [ptxas, f"-arch={arch}", "-v", src, "-o", os.path.join(tmp, "k.cubin")],
            capture_output=True,
            text=True,
            check=False,
        ).stderr
    regs = re.search(r"Used (\d+) registers", log)
    spills = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
    setmaxnreg = sorted(
        {int(n) for n in re.findall(r"setmaxnreg\.\w+\.sync\.aligned\.u32\s+(\d+)", ptx)}
    )
    return {
        "regs": int(regs.group(1)) if regs else None,
        "setmaxnreg": setmaxnreg,
        "wgmma_wait": sorted(
            {int(n) for n in re.findall(r"wgmma\.wait_group\.sync\.aligned\s+(\d+)", ptx)}
        ),
        "ptxas_warnings": [line for line in log.splitlines() if "arning" in line],
        "spill_st": int(spills.group(1)) if spills else None,
        "spill_ld": int(spills.group(2)) if spills else None,
        "smem": kernel.metadata.shared,
        "warps": kernel.metadata.num_warps,
        "wgmma": ptx.count("wgmma.mma_async"),
        "tma": ptx.count("cp.async.bulk.tensor"),
        "cp_async": ptx.count("cp.async.cg") + ptx.count("cp.async.ca"),
        "ws_regions": kernel.asm["ttgir"].count("ttg.warp_specialize("),
    }


def gluon_report(as_json: bool) -> int:
    """Compile every Gluon variant and config for sm_90a; 1 if any fails to compile."""
    from kernels import gluon_flash_fwd as gf

    failed = 0
    for variant in gf.VARIANTS:
        for dtype in (torch.float16, torch.bfloat16):
            for head_dim in gf.SUPPORTED_HEAD_DIMS:
                for causal in (False, True):
                    # Ragged lengths, seq_q != seq_k and GQA: the general specialization.
                    q = torch.empty(2, 8, 1000, head_dim, dtype=dtype)
                    k = torch.empty(2, 4, 777, head_dim, dtype=dtype)
                    entry = {"variant": variant, "dtype": str(dtype).removeprefix("torch."),
                             "head_dim": head_dim, "causal": causal}  # fmt: skip
                    _compiled.clear()
                    try:
                        gf.launch(q, k, k, torch.empty_like(q), causal, head_dim**-0.5, variant)
                        entry.update(resources(_compiled[-1], "sm_90a"))
                    except Exception as exc:
                        failed += 1
                        entry["error"] = tune_triton.first_line(exc)
                    print(json.dumps(entry) if as_json else entry, flush=True)
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", default="suites/default.yaml")
    parser.add_argument("--variants", action="store_true")
    parser.add_argument("--gluon", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    _compile_only(90)
    if args.gluon:
        return gluon_report(args.json)
    print(f"triton {triton.__version__}, target sm_90a")
    workloads, _ = tune_triton.load_workloads(args.suite)
    variants = {}
    if args.variants:
        import triton_variants

        variants = triton_variants.VARIANTS
    for b, h, s, d, causal, dtype in workloads:
        q = torch.empty(b, h, s, d, dtype=getattr(torch, dtype))
        label = f"{b}x{h}x{s}x{d}:{'causal' if causal else 'full'}"
        # The main launcher's choice on sm_90 (ws_config without its is_cuda check).
        ws_cfg = tf.WS_PINNED.get(d)
        ws = bool(ws_cfg) and not causal and s >= tf.WS_MIN_SEQ_K
        ws = ws and s % ws_cfg.kwargs["BLOCK_N"] == 0
        config = ws_cfg if ws else tf.PINNED[("sm_90", d, causal)]
        runs = {
            "main" + ("(ws)" if ws else ""): lambda q=q, causal=causal, config=config, ws=ws: (
                tf._launch(q, q, q, torch.empty_like(q), causal, q.shape[-1] ** -0.5, config, ws=ws)
            )
        }
        for name, cfg in variants.items():
            if triton_variants.applies(name, cfg, d):
                runs[name] = lambda q=q, causal=causal, cfg=cfg: triton_variants.tma_fwd.launch(
                    q, q, q, torch.empty_like(q), causal, q.shape[-1] ** -0.5, cfg
                )
        for name, fn in runs.items():
            _compiled.clear()
            try:
                fn()
                print(f"{label:<22} {name:<20} {resources(_compiled[-1], 'sm_90a')}", flush=True)
            except Exception as exc:
                print(f"{label:<22} {name:<20} FAILED {tune_triton.first_line(exc)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
