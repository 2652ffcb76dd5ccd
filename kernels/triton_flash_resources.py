"""Compiler resources of the Triton FlashAttention forward for one workload and GPU arch.

The registry's ``resources`` hook for ``triton_flash``: ``resources(params, arch)``
picks the config and code path that ``flash_attention_fwd`` would pick on a GPU of
``arch`` (``launch_plan``), compiles the kernel for that arch without a GPU
(``kernels/triton_compile.py``) through the real ``_launch`` on CPU tensors of the
workload's shapes, and returns one record per compiled kernel: registers, spills,
shared memory, warps, stages, grid, config and path.

``launch_plan`` mirrors the launcher's choice (``flash_attention_fwd``: the Gluon
kernel on sm_90 where ``gluon_flash_fwd.FASTER`` sends it, then ``ws_config``,
``_pinned_for``, the ``OutOfResources`` fallback) from the same tables (``FASTER``,
``PINNED``, ``WS_PINNED``, ``WS_MIN_SEQ_K``, ``smem_bytes``), with the device queries
replaced by the arch's figures; a change to the launcher's decision must be made here
too.
Not mirrored: ``ATTN_TRITON_AUTOTUNE=1`` (an autotuned choice needs timing on the GPU)
and misaligned inputs (the guard's inputs are fresh contiguous tensors).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
import triton

from kernels import triton_flash_fwd as tf
from kernels.ptxas import ResourceRecord, ResourcesUnavailable, parse_arch
from kernels.triton_compile import compile_only, kernel_record, max_shared_bytes

POINTER = "pointer"  # pointer loads pipelined with cp.async
TMA_WS = "tma_ws"  # TMA tensor descriptors + automatic warp specialization (sm_90)
GLUON = "gluon"  # kernels/gluon_flash_fwd.py (sm_90): "gluon-ws", "gluon-simple", ...


@dataclass(frozen=True)
class LaunchPlan:
    config: triton.Config
    path: str
    source: str  # where the config comes from: "PINNED[sm_90]", "WS_PINNED", "fallback"


@dataclass(frozen=True)
class GluonPlan:
    variant: str  # gluon_flash_fwd.VARIANTS
    overrides: dict[str, int]  # FASTER's config overrides


def gluon_plan(
    arch: str, head_dim: int, causal: bool, seq_q: int, seq_k: int
) -> GluonPlan | None:
    """The Gluon kernel's variant when ``flash_attention_fwd`` sends this workload there."""
    if parse_arch(arch) != 90 or os.environ.get(tf._GLUON_ENV) == "0":
        return None
    gluon = tf._gluon_module()
    choice = None if gluon is None else gluon.faster_variant(head_dim, causal, seq_q, seq_k)
    return None if choice is None else GluonPlan(choice[0], dict(choice[1]))


def _pinned(capability: int, head_dim: int, causal: bool, elem_size: int) -> LaunchPlan:
    # As _pinned_for, with the arch's shared memory for the device's.
    budget = max_shared_bytes(f"sm_{capability}")
    nearest = ("sm_90", "sm_80", "sm_89") if capability >= 90 else ("sm_80", "sm_89", "sm_90")
    for arch in (f"sm_{capability}", *nearest):
        config = tf.PINNED.get((arch, head_dim, causal))
        if config is not None and tf.smem_bytes(config, head_dim, elem_size) <= budget:
            return LaunchPlan(config, POINTER, f"PINNED[{arch}]")
    return LaunchPlan(tf._FALLBACK_CONFIG, POINTER, "fallback")


def launch_plan(
    arch: str, head_dim: int, causal: bool, seq_k: int, elem_size: int = 2
) -> LaunchPlan:
    """The config and path ``flash_attention_fwd`` takes on ``arch`` (before any
    ``OutOfResources`` fallback, which ``resources`` applies after compiling)."""
    capability = parse_arch(arch)
    ws = tf.WS_PINNED.get(head_dim)
    if (
        ws is not None
        and not causal
        and capability == 90
        and os.environ.get(tf._WS_ENV, "1") != "0"
        and seq_k >= tf.WS_MIN_SEQ_K
        and seq_k % ws.kwargs["BLOCK_N"] == 0
    ):
        return LaunchPlan(ws, TMA_WS, "WS_PINNED")
    return _pinned(capability, head_dim, causal, elem_size)


def _config_dict(plan: LaunchPlan) -> dict[str, int | str]:
    return {
        "BLOCK_M": int(plan.config.kwargs["BLOCK_M"]),
        "BLOCK_N": int(plan.config.kwargs["BLOCK_N"]),
        "num_warps": int(plan.config.num_warps),  # as configured; per group under WS
        "num_stages": int(plan.config.num_stages),
        "source": plan.source,
    }


def resources(params: Mapping[str, Any], arch: str) -> list[ResourceRecord]:
    """Resource records of the kernel(s) one call on ``params``'s workload compiles.

    ``params``: a suite case's ``params()`` (``shape`` [batch, heads, seq_q, head_dim],
    ``seq_k``, ``kv_heads``, ``dtype``, ``causal``). Nothing runs on a GPU.
    """
    if tf._INTERPRET:
        raise ResourcesUnavailable("TRITON_INTERPRET=1: the kernel is interpreted, not compiled")
    batch, heads, seq_q, head_dim = (int(n) for n in params["shape"])
    seq_k = int(params.get("seq_k", seq_q))
    kv_heads = int(params.get("kv_heads", heads))
    dtype = getattr(torch, str(params.get("dtype", "float16")), None)
    if dtype not in tf._DTYPES:
        raise ResourcesUnavailable(f"triton_flash takes float16 or bfloat16, not {dtype}")
    if head_dim not in tf.SUPPORTED_HEAD_DIMS:
        raise ResourcesUnavailable(f"triton_flash does not support head_dim {head_dim}")
    causal = bool(params.get("causal", False))
    if batch * heads * seq_q == 0:
        return []  # the launcher returns before any launch
    # Untouched CPU memory: allocated lazily by the OS, so large shapes cost nothing.
    q = torch.empty(batch, heads, seq_q, head_dim, dtype=dtype)
    k = torch.empty(batch, kv_heads, seq_k, head_dim, dtype=dtype)
    v = torch.empty_like(k)
    out = torch.empty_like(q)
    scale = head_dim**-0.5
    gluon = gluon_plan(arch, head_dim, causal, seq_q, seq_k)
    if gluon is not None:
        return _gluon_resources(gluon, arch, (q, k, v, out), causal, scale)
    plan = launch_plan(arch, head_dim, causal, seq_k, q.element_size())
    with compile_only(arch) as launches:
        tf._launch(q, k, v, out, causal, scale, plan.config, ws=plan.path == TMA_WS)
        if plan.path == POINTER and launches[-1].kernel.metadata.shared > max_shared_bytes(arch):
            # The launcher catches OutOfResources at launch and retries with the fallback.
            plan = LaunchPlan(tf._FALLBACK_CONFIG, POINTER, "fallback")
            launches.clear()
            tf._launch(q, k, v, out, causal, scale, plan.config)
        return [
            kernel_record(launch, arch, config=_config_dict(plan), path=plan.path)
            for launch in launches
        ]


def _gluon_resources(
    plan: GluonPlan,
    arch: str,
    tensors: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor],
    causal: bool,
    scale: float,
) -> list[ResourceRecord]:
    from kernels import gluon_flash_fwd as gf

    q, k, v, out = tensors
    cfg = gf.config(q.shape[-1], causal, plan.variant, **plan.overrides)
    config: dict[str, int | str] = {
        "variant": plan.variant,
        "BLOCK_N": cfg["BLOCK_N"],
        "STAGES": cfg["STAGES"],
        "num_warps": cfg["num_warps"],
        "source": "gluon_flash_fwd.FASTER",
    }
    with compile_only(arch) as launches:
        gf.launch(q, k, v, out, causal, scale, plan.variant, **plan.overrides)
        return [
            kernel_record(launch, arch, config=config, path=f"{GLUON}-{plan.variant}")
            for launch in launches
        ]
