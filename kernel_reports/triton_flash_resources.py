"""Compiler resources of the FlashAttention forwards for one workload and GPU arch.

The registry's ``resources`` hooks: ``resources`` for ``triton_flash`` (the Triton
kernel), ``gluon_resources`` for ``gluon_flash`` (the Gluon kernel, sm_90 only) and
``entry_resources`` for ``flash_attention`` (the dispatching entry point). Each asks
``kernels.launch_paths.choice_for`` for the path a call on the workload takes on a GPU
of ``arch`` (``flash_plan.choose`` with the arch's shared memory for the device's),
compiles it for that arch without a GPU (``kernel_reports/triton_compile.py``) through
the kernel's own launcher on CPU tensors of the workload's shapes, and returns one
record per compiled kernel: registers, spills, shared memory, warps, stages, grid,
config and path.

Not mirrored: ``ATTN_TRITON_AUTOTUNE=1`` (an autotuned choice needs timing on the GPU:
the records show the pinned config) and misaligned inputs (the guard's inputs are fresh
contiguous tensors).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from kernel_reports.ptxas import ResourcesUnavailable
from kernel_reports.triton_compile import compile_only, kernel_record
from kernels import flash_launch, flash_plan
from kernels.arch import max_shared_bytes
from kernels.flash_plan import FALLBACK_CONFIG, POINTER, Choice, Kernel
from kernels.launch_paths import choice_for
from kernels.registry import ResourceRecord

_NAMES: dict[Kernel, str] = {
    "triton": "triton_flash",
    "gluon": "gluon_flash",
    "auto": "flash_attention",
}


def _config_dict(choice: Choice) -> dict[str, int | str]:
    if choice.kernel == "gluon":
        cfg = dict(choice.gluon_config)
        return {
            "variant": str(choice.variant),
            "BLOCK_N": cfg["BLOCK_N"],
            "STAGES": cfg["STAGES"],
            "num_warps": cfg["num_warps"],
            "source": f"flash_plan.{choice.source}",
        }
    assert choice.config is not None, choice
    return {
        "BLOCK_M": int(choice.config.kwargs["BLOCK_M"]),
        "BLOCK_N": int(choice.config.kwargs["BLOCK_N"]),
        "num_warps": int(choice.config.num_warps),  # as configured; per group under WS
        "num_stages": int(choice.config.num_stages),
        "source": choice.source,
    }


def _records(params: Mapping[str, Any], arch: str, kernel: Kernel) -> list[ResourceRecord]:
    name = _NAMES[kernel]
    if flash_launch.INTERPRET:
        raise ResourcesUnavailable("TRITON_INTERPRET=1: the kernel is interpreted, not compiled")
    batch, heads, seq_q, head_dim = (int(n) for n in params["shape"])
    seq_k = int(params.get("seq_k", seq_q))
    kv_heads = int(params.get("kv_heads", heads))
    dtype = getattr(torch, str(params.get("dtype", "float16")), None)
    if dtype not in flash_launch.DTYPES:
        raise ResourcesUnavailable(f"{name} takes float16 or bfloat16, not {dtype}")
    if head_dim not in flash_launch.SUPPORTED_HEAD_DIMS:
        raise ResourcesUnavailable(f"{name} does not support head_dim {head_dim}")
    causal = bool(params.get("causal", False))
    if batch * heads * seq_q == 0:
        return []  # the launchers return before any launch
    # Untouched CPU memory: allocated lazily by the OS, so large shapes cost nothing.
    q = torch.empty(batch, heads, seq_q, head_dim, dtype=dtype)
    k = torch.empty(batch, kv_heads, seq_k, head_dim, dtype=dtype)
    v = torch.empty_like(k)
    out = torch.empty_like(q)
    scale = head_dim**-0.5
    try:
        choice = choice_for(
            arch, kernel, head_dim=head_dim, causal=causal, seq_q=seq_q, seq_k=seq_k,
            batch_heads=batch * heads, elem_size=q.element_size(),
            tma_aligned=all(flash_launch.tma_aligned(t) for t in (q, k, v, out)),
        )  # fmt: skip
    except flash_plan.Unsupported as exc:
        raise ResourcesUnavailable(f"{name}: {exc}") from None
    if choice.kernel == "gluon":
        from kernels import gluon_flash_fwd

        with compile_only(arch) as launches:
            gluon_flash_fwd.launch_choice(q, k, v, out, causal, scale, choice)
            return _record_all(launches, arch, choice)
    from kernels import triton_flash

    with compile_only(arch) as launches:
        triton_flash.launch_choice(q, k, v, out, causal, scale, choice)
        if choice.path == POINTER and launches[-1].kernel.metadata.shared > max_shared_bytes(arch):
            # The launcher catches OutOfResources at launch and retries with the fallback.
            choice = Choice(POINTER, "fallback", FALLBACK_CONFIG)
            launches.clear()
            triton_flash.launch_choice(q, k, v, out, causal, scale, choice)
        return _record_all(launches, arch, choice)


def _record_all(launches: list[Any], arch: str, choice: Choice) -> list[ResourceRecord]:
    config = _config_dict(choice)
    return [kernel_record(launch, arch, config=config, path=choice.label) for launch in launches]


def resources(params: Mapping[str, Any], arch: str) -> list[ResourceRecord]:
    """Resource records of the Triton kernel(s) one ``triton_flash`` call on
    ``params``'s workload compiles.

    ``params``: a suite case's ``params()`` (``shape`` [batch, heads, seq_q, head_dim],
    ``seq_k``, ``kv_heads``, ``dtype``, ``causal``). Nothing runs on a GPU.
    """
    return _records(params, arch, "triton")


def gluon_resources(params: Mapping[str, Any], arch: str) -> list[ResourceRecord]:
    """As ``resources``, for ``gluon_flash`` (ResourcesUnavailable off sm_90)."""
    return _records(params, arch, "gluon")


def entry_resources(params: Mapping[str, Any], arch: str) -> list[ResourceRecord]:
    """As ``resources``, for ``flash_attention`` (whichever kernel it picks on ``arch``)."""
    return _records(params, arch, "auto")
