"""FlashAttention-2 forward in Triton: softmax(Q K^T * scale) V without materialising S.

Algorithm. Each program owns BLOCK_M query rows of one (batch, head) and walks the keys
in BLOCK_N tiles, keeping a running row max ``m``, a running denominator ``l`` and an
unnormalised float32 accumulator (the online softmax). ``exp2`` replaces ``exp`` with
log2(e) folded into the scale, so each score costs one FMA before the exponential. P is
rounded to the input dtype before the second matmul so both matmuls run on tensor
cores, as FlashAttention-2 does. The key range is split in two loops: the tiles that
need no mask at all (every key visible to every row, no tail) run without any
``where``; the few tiles on the causal diagonal or at the ragged end of the keys run a
masked copy of the loop body.

Inputs and limits.
- q: (batch, heads_q, seq_q, head_dim); k, v: (batch, heads_kv, seq_k, head_dim), the
  layout of ``torch.nn.functional.scaled_dot_product_attention``. Any strides; a last
  dimension that is not contiguous is copied.
- fp16 or bf16 (all three the same); head_dim in 32, 64, 96, 128, 256 (96 is padded to
  a 128-wide tile with masked loads).
- Any seq_q, seq_k (seq_q != seq_k allowed, lengths need not divide the tiles).
- Causal masking is TOP-LEFT aligned like SDPA's ``is_causal=True``: query i sees keys
  j <= i whatever seq_q and seq_k are (flash-attn aligns bottom-right instead).
- Grouped-query attention: heads_q divisible by heads_kv; q head h reads kv head
  h // (heads_q // heads_kv).
- Rows that see no key at all (only possible with seq_k == 0) come out as zeros.
- Forward only: no log-sum-exp is saved for a backward pass.

Hopper path. On sm_90, non-causal calls with head_dim 128, seq_k >= 2048 and a multiple
of 128, and 16-byte aligned rows take a second branch of the same kernel: Q/K/V/O
through device-side TMA tensor descriptors and one key loop under triton's automatic
warp specialization (a TMA producer warp group, two consumer warp groups of 64 rows;
``WS_PINNED``). Triton 3.6 accepts only that one plain loop, so causal and ragged
calls stay on the pointer path. ``ATTN_TRITON_WS=0`` turns the branch off.

Launch. The first call of each key (shapes, strides, dtypes, devices, pointer
alignment, causal, scale, out) validates, picks the config and launches through
``JITFunction.run``; it keeps a ``_Plan`` (the compiled kernel's launcher, grid and
scalar arguments) that later calls of that key use directly: 13-14 us of host time per
call instead of 51-55 (SDPA: 17-18), H200. On sm_90 the shapes where the Gluon kernel
of ``kernels/gluon_flash_fwd.py`` was measured faster go there (``ATTN_GLUON=0`` keeps
every call on this file's kernel).

Configs. By default the launcher uses ``PINNED[(arch, head_dim, causal)]``; with
``ATTN_TRITON_AUTOTUNE=1`` it autotunes over ``CONFIGS`` (pruned to what fits the
device's shared memory), keyed on head_dim, causal, dtype and a power-of-two bucket of
the sequence length. Under ``TRITON_INTERPRET=1`` one small config is used.

Credits: Tri Dao, "FlashAttention-2: Faster Attention with Better Parallelism and Work
Partitioning" (2023); the Triton fused-attention tutorial (06-fused-attention.py,
Philippe Tillet and the Triton authors), whose causal STAGE split this file follows.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import torch
import triton
import triton.language as tl
from triton.runtime.errors import OutOfResources

# Read once, like ``triton.jit`` reads it when it decorates the kernels below: the
# kernels are either compiled or interpreted for the life of the process.
_INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"
_AUTOTUNE_ENV = "ATTN_TRITON_AUTOTUNE"
_WS_ENV = "ATTN_TRITON_WS"  # "0" turns the TMA + warp-specialized path off

SUPPORTED_HEAD_DIMS = (32, 64, 96, 128, 256)


def _interpreter_numpy_shim() -> None:
    """Let triton 3.6's interpreter use scalar tensors as Python ints under numpy >= 2.3.

    The interpreter keeps a scalar as a 1-element array and converts it with
    ``int(array)`` (``range(lo, hi, BLOCK_N)`` with tensor bounds), which numpy 2.3+
    rejects ("only 0-dimensional arrays can be converted"); ``.item()`` works on every
    numpy. Applied once, only under TRITON_INTERPRET=1; newer tritons fixed it.
    """
    from triton.runtime import interpreter

    original = getattr(interpreter, "_patch_lang_tensor", None)
    if original is None or getattr(original, "_attn_shim", False):
        return

    def patch(tensor: Any, scope: Any) -> None:  # the interpreter's own objects
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))

    patch._attn_shim = True  # type: ignore[attr-defined]
    interpreter._patch_lang_tensor = patch


if _INTERPRET:
    _interpreter_numpy_shim()

_DTYPES = (torch.float16, torch.bfloat16)


@triton.jit
def _load_tile(  # type: ignore[no-untyped-def]
    ptrs,
    rows,
    n_rows,
    offs_d,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    MASK_ROWS: tl.constexpr,
):
    # Masks only where needed: an all-true mask still costs predicate registers and can
    # stop the loads from vectorising, and most tiles need none.
    if MASK_ROWS:
        if BLOCK_D != HEAD_DIM:
            mask = (rows[:, None] < n_rows) & (offs_d[None, :] < HEAD_DIM)
        else:
            mask = rows[:, None] < n_rows
        tile = tl.load(ptrs, mask=mask, other=0.0)
    elif BLOCK_D != HEAD_DIM:
        tile = tl.load(ptrs, mask=offs_d[None, :] < HEAD_DIM, other=0.0)
    else:
        tile = tl.load(ptrs)
    return tile


@triton.jit
def _attn_fwd_inner(  # type: ignore[no-untyped-def]
    acc, l_i, m_i, q,
    k_base, v_base, stride_kn, stride_vn,
    offs_m, offs_n, offs_d,
    lo, hi, seq_k, qk_scale,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr, MASKED: tl.constexpr, UPCAST_DOT: tl.constexpr,
):  # fmt: skip
    for start_n in range(lo, hi, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        cols = start_n + offs_n
        k = _load_tile(k_base + cols[:, None] * stride_kn + offs_d[None, :], cols, seq_k,
                       offs_d, HEAD_DIM, BLOCK_D, MASKED)  # fmt: skip
        if UPCAST_DOT:
            k = k.to(tl.float32)
        qk = tl.dot(q, tl.trans(k))
        if MASKED:
            keep = cols[None, :] < seq_k
            if CAUSAL:
                keep = keep & (cols[None, :] <= offs_m[:, None])
            qk = tl.where(keep, qk * qk_scale, float("-inf"))
            m_ij = tl.maximum(m_i, tl.max(qk, 1))
            # A row with every key masked so far keeps m = -inf; subtracting 0 instead
            # avoids (-inf) - (-inf) = NaN and gives p = 0, alpha = 0 for that row.
            m_sub = tl.where(m_ij == float("-inf"), 0.0, m_ij)
        else:
            # scale > 0 (the launcher checks), so max(qk) * scale == max(qk * scale) and
            # the scale and the max subtraction fuse into one FMA per score.
            m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
            m_sub = m_ij
            qk = qk * qk_scale
        p = tl.math.exp2(qk - m_sub[:, None])
        alpha = tl.math.exp2(m_i - m_sub)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        v = _load_tile(v_base + cols[:, None] * stride_vn + offs_d[None, :], cols, seq_k,
                       offs_d, HEAD_DIM, BLOCK_D, MASKED)  # fmt: skip
        # Rounding P to the input dtype is what lets the second matmul use tensor cores.
        p = p.to(v_base.dtype.element_ty)
        if UPCAST_DOT:
            p = p.to(tl.float32)
            v = v.to(tl.float32)
        acc = tl.dot(p, v, acc)
        m_i = m_ij
    return acc, l_i, m_i


@triton.jit
def _attn_fwd_inner_ws(  # type: ignore[no-untyped-def]
    acc, l_i, m_i, q, k_desc, v_desc, seq_k, qk_scale,
    BLOCK_N: tl.constexpr, UPCAST_DOT: tl.constexpr,
):  # fmt: skip
    # Every key tile is whole and visible (non-causal, seq_k % BLOCK_N == 0: the
    # launcher checks), so the loop carries no mask: triton 3.6's Hopper warp
    # specialization accepts exactly one such plain loop (see _attn_fwd).
    for start_n in tl.range(0, seq_k, BLOCK_N, warp_specialize=True):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        k = k_desc.load([start_n, 0])
        if UPCAST_DOT:
            k = k.to(tl.float32)
        qk = tl.dot(q, tl.trans(k))
        m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
        p = tl.math.exp2(qk * qk_scale - m_ij[:, None])
        alpha = tl.math.exp2(m_i - m_ij)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        v = v_desc.load([start_n, 0])
        p = p.to(v_desc.dtype)
        if UPCAST_DOT:
            p = p.to(tl.float32)
            v = v.to(tl.float32)
        acc = tl.dot(p, v, acc)
        m_i = m_ij
    return acc, l_i, m_i


@triton.jit
def _attn_fwd_ptr(  # type: ignore[no-untyped-def]
    q_base, k_base, v_base, o_base, qk_scale, stride_qm, stride_kn, stride_vn, stride_om,
    seq_q, seq_k, start_m,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, CAUSAL: tl.constexpr,
    UPCAST_DOT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    # The portable path (any GPU, the interpreter, any alignment): pointer loads that
    # triton pipelines with cp.async (num_stages deep).
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)

    q = _load_tile(q_base + offs_m[:, None] * stride_qm + offs_d[None, :], offs_m, seq_q,
                   offs_d, HEAD_DIM, BLOCK_D, True)  # fmt: skip
    if UPCAST_DOT:
        q = q.to(tl.float32)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)

    # Keys [0, full_end) are whole tiles visible to every row of this block: the
    # causal diagonal starts at row start_m * BLOCK_M (top-left alignment), and the
    # ragged tail of the keys is left to the masked loop.
    if CAUSAL:
        kv_end = tl.minimum((start_m + 1) * BLOCK_M, seq_k)
        full_end = tl.minimum(start_m * BLOCK_M, seq_k) // BLOCK_N * BLOCK_N
    else:
        kv_end = seq_k
        full_end = seq_k // BLOCK_N * BLOCK_N
    acc, l_i, m_i = _attn_fwd_inner(
        acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_vn,
        offs_m, offs_n, offs_d, 0, full_end, seq_k, qk_scale,
        HEAD_DIM, BLOCK_D, BLOCK_N, CAUSAL, False, UPCAST_DOT,
    )  # fmt: skip
    acc, l_i, m_i = _attn_fwd_inner(
        acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_vn,
        offs_m, offs_n, offs_d, full_end, kv_end, seq_k, qk_scale,
        HEAD_DIM, BLOCK_D, BLOCK_N, CAUSAL, True, UPCAST_DOT,
    )  # fmt: skip

    # l == 0 only for a row that saw no key (seq_k == 0): its acc is 0, output 0.
    l_i = tl.where(l_i == 0.0, 1.0, l_i)
    acc = acc / l_i[:, None]
    o_ptrs = o_base + offs_m[:, None] * stride_om + offs_d[None, :]
    o_mask = offs_m[:, None] < seq_q
    if BLOCK_D != HEAD_DIM:
        o_mask = o_mask & (offs_d[None, :] < HEAD_DIM)
    tl.store(o_ptrs, acc.to(o_base.dtype.element_ty), mask=o_mask)


@triton.jit
def _attn_fwd(  # type: ignore[no-untyped-def]
    Q, K, V, Out, qk_scale,
    stride_qz, stride_qh, stride_qm,
    stride_kz, stride_kh, stride_kn,
    stride_vz, stride_vh, stride_vn,
    stride_oz, stride_oh, stride_om,
    seq_q, seq_k, kv_group,
    SEQ_BUCKET,  # only part of the autotune key
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, CAUSAL: tl.constexpr,
    UPCAST_DOT: tl.constexpr,  # interpreter only, see the launcher
    WARP_SPEC: tl.constexpr,  # Hopper TMA + warp-specialized path, see the launcher
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    if CAUSAL:
        # Causal row blocks near the end of the sequence do the most work; launching
        # them first leaves the cheap ones to fill the tail of the grid.
        start_m = tl.num_programs(0) - 1 - tl.program_id(0)
    else:
        start_m = tl.program_id(0)
    off_h = tl.program_id(1)
    # int64: batch * stride overflows int32 past 2**31 elements.
    off_z = tl.program_id(2).to(tl.int64)
    off_hk = (off_h // kv_group).to(tl.int64)
    off_h = off_h.to(tl.int64)
    q_base = Q + off_z * stride_qz + off_h * stride_qh
    k_base = K + off_z * stride_kz + off_hk * stride_kh
    v_base = V + off_z * stride_vz + off_hk * stride_vh
    o_base = Out + off_z * stride_oz + off_h * stride_oh

    if WARP_SPEC:
        # Hopper: 2-D TMA descriptors over this (batch, head), made on the device (the
        # launcher sets triton's scratch allocator); rows past seq_q and columns past
        # head_dim are zero-filled on load and clipped on store, so nothing is masked.
        # tl.range(warp_specialize=True) then splits the program into a TMA producer
        # warp group and two consumer warp groups of 64 rows each (num_warps=4 -> 12).
        # Measured on H200 (2026-11-26, benchmarks/triton_variants.py): 2.09 ms vs
        # 2.43 ms for the pointer path at 4x32x4096x128 (527 vs 453 TFLOPS), 0.0732 vs
        # 0.0769 ms at 2x8x2048x128; slower at S=1024, hd 64 (0.0202 vs 0.0186 ms).
        q_desc = tl.make_tensor_descriptor(
            q_base, [seq_q, HEAD_DIM], [stride_qm, 1], [BLOCK_M, BLOCK_D]
        )
        k_desc = tl.make_tensor_descriptor(
            k_base, [seq_k, HEAD_DIM], [stride_kn, 1], [BLOCK_N, BLOCK_D]
        )
        v_desc = tl.make_tensor_descriptor(
            v_base, [seq_k, HEAD_DIM], [stride_vn, 1], [BLOCK_N, BLOCK_D]
        )
        o_desc = tl.make_tensor_descriptor(
            o_base, [seq_q, HEAD_DIM], [stride_om, 1], [BLOCK_M, BLOCK_D]
        )
        q = q_desc.load([start_m * BLOCK_M, 0])
        if UPCAST_DOT:
            q = q.to(tl.float32)
        m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
        l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
        acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
        acc, l_i, m_i = _attn_fwd_inner_ws(acc, l_i, m_i, q, k_desc, v_desc, seq_k, qk_scale,
                                           BLOCK_N, UPCAST_DOT)  # fmt: skip
        o_desc.store([start_m * BLOCK_M, 0], (acc / l_i[:, None]).to(Out.dtype.element_ty))
    else:
        _attn_fwd_ptr(
            q_base, k_base, v_base, o_base, qk_scale, stride_qm, stride_kn, stride_vn,
            stride_om, seq_q, seq_k, start_m,
            HEAD_DIM, BLOCK_D, CAUSAL, UPCAST_DOT, BLOCK_M, BLOCK_N,
        )  # fmt: skip


# ----------------------------------------------------------------------------------------
# Configs
# ----------------------------------------------------------------------------------------


def _config(block_m: int, block_n: int, num_warps: int, num_stages: int) -> triton.Config:
    return triton.Config(
        {"BLOCK_M": block_m, "BLOCK_N": block_n}, num_warps=num_warps, num_stages=num_stages
    )


# Hopper search space (H100/H200: 132 SMs, 227 KB shared memory per block). Small on
# purpose: each config costs a compile and about 0.1 s of timing per autotune key.
# BLOCK_N never exceeds BLOCK_M, which keeps the causal split to at most
# BLOCK_M / BLOCK_N masked tiles per row block.
CONFIGS: list[triton.Config] = [
    _config(block_m, block_n, num_warps, num_stages)
    for block_m, block_n, num_warps in (
        (64, 64, 4),
        (128, 32, 4),
        (128, 64, 4),
        (128, 64, 8),
        (128, 128, 8),
    )
    for num_stages in (2, 3, 4)
    # 128x128 tiles at 4 stages exceed 227 KB for head_dim 128 anyway.
    if not (block_n == 128 and num_stages == 4)
] + [
    # The only tile here that holds head_dim 256 within Ada's 99 KB per block.
    _config(64, 32, 4, 2),
]

# Under the interpreter every op is a NumPy call per program: small tiles keep the
# CPU tests fast, and num_warps/num_stages mean nothing there.
INTERPRET_CONFIG = _config(16, 16, 1, 1)

# The last resort when a pinned config does not compile for lack of resources.
_FALLBACK_CONFIG = _config(64, 32, 4, 1)


def smem_bytes(config: triton.Config, head_dim: int, elem_size: int = 2) -> int:
    """Shared memory estimate: a Q tile plus num_stages buffered K and V tiles.

    The compiler's own figure differs a little (layout conversions, barriers); a
    config that slips through and does not fit fails to compile, and both the
    autotuner and the pinned path handle that.
    """
    block_d: int = triton.next_power_of_2(head_dim)
    block_m: int = config.kwargs["BLOCK_M"]
    block_n: int = config.kwargs["BLOCK_N"]
    num_stages: int = config.num_stages
    return (block_m * block_d + 2 * num_stages * block_n * block_d) * elem_size


@functools.cache
def _max_shared_mem(device_index: int) -> int:
    try:
        props = triton.runtime.driver.active.utils.get_device_properties(device_index)
        return int(props["max_shared_mem"])
    except Exception:  # another backend or driver API: ask torch instead
        props = torch.cuda.get_device_properties(device_index)
        return int(getattr(props, "shared_memory_per_block_optin", 48 * 1024))


def _device_index(device: torch.device) -> int:
    return device.index if device.index is not None else torch.cuda.current_device()


def _smem_budget(device: torch.device) -> int:
    return _max_shared_mem(_device_index(device))


def prune_configs(
    configs: list[triton.Config], named_args: Mapping[str, Any], **kwargs: Any
) -> list[triton.Config]:
    """Autotune ``early_config_prune``: drop configs whose tiles exceed shared memory.

    Reads only the tensor ``Q`` from ``named_args`` (older Triton passes no kwargs).
    Never returns an empty list: the smallest config survives as a last resort.
    """
    q = named_args["Q"]
    head_dim = q.shape[-1]
    budget = _smem_budget(q.device)
    kept = [c for c in configs if smem_bytes(c, head_dim, q.element_size()) <= budget]
    if kept:
        return kept
    return [min(configs, key=lambda c: smem_bytes(c, head_dim, q.element_size()))]


def _pinned_table() -> dict[tuple[str, int, bool], triton.Config]:
    # sm_90 is measured (below); sm_80 and sm_89 are untimed starting points that fit
    # each part's per-block shared memory with margin (no such GPU at hand).
    by_arch = {
        # H100/H200, 227 KB per block. Measured on H100 80GB HBM3 (2026-11-26,
        # benchmarks/tune_triton.py, do_bench median): 64x64, 4 warps, 3 stages was the
        # best of 15 configs on 7 of 8 shapes (4x32x4096x128: 2.27 ms vs 2.56 ms for
        # 128x64/8 warps); causal hd64 prefers 4 stages (0.0110 vs 0.0114 ms at S=512).
        "sm_90": {
            32: _config(64, 64, 4, 3),
            64: _config(64, 64, 4, 3),
            96: _config(64, 64, 4, 3),
            128: _config(64, 64, 4, 3),
            256: _config(64, 32, 4, 2),
        },
        # A100, 163 KB per block.
        "sm_80": {
            32: _config(128, 64, 4, 3),
            64: _config(128, 64, 4, 3),
            96: _config(128, 64, 8, 2),
            128: _config(128, 64, 8, 2),
            256: _config(64, 32, 4, 2),
        },
        # L4 / RTX 4090, 99 KB per block.
        "sm_89": {
            32: _config(128, 64, 4, 2),
            64: _config(128, 64, 4, 2),
            96: _config(64, 64, 4, 2),
            128: _config(64, 64, 4, 2),
            256: _config(64, 32, 4, 2),
        },
    }
    table = {
        (arch, head_dim, causal): config
        for arch, table in by_arch.items()
        for head_dim, config in table.items()
        for causal in (False, True)
    }
    table[("sm_90", 64, True)] = _config(64, 64, 4, 4)
    return table


PINNED: dict[tuple[str, int, bool], triton.Config] = _pinned_table()

# The TMA + warp-specialized path (sm_90 only; non-causal, seq_k a multiple of BLOCK_N):
# head_dim -> config, num_warps=4 per consumer group (12 warps in all). 128x128 with 2
# stages was the best of five on H200 (2026-11-26): 2.09 ms at 4x32x4096x128 vs 2.36 ms
# for 128x64; num_stages=3 gave wrong results with triton 3.6 (rel err inf).
WS_PINNED: dict[int, triton.Config] = {128: _config(128, 128, 4, 2)}
# Below this many keys the pointer path wins: at S=1024 (hd 64) warp specialization took
# 0.0202 ms vs 0.0186 ms, at S=2048 (hd 128) 0.0732 vs 0.0769 ms (H200, 2026-11-26).
WS_MIN_SEQ_K = 2048


def pinned_config(
    device: torch.device, head_dim: int, causal: bool, elem_size: int = 2
) -> triton.Config:
    """The config used without autotuning on ``device``.

    An architecture missing from ``PINNED`` (sm_86, sm_100, sm_120, ...) borrows the
    first entry of the nearest listed one that fits its shared memory: Hopper's for
    newer parts, Ampere's and then Ada's for older ones.
    """
    if _INTERPRET:
        return INTERPRET_CONFIG
    return _pinned_for(_device_index(device), head_dim, causal, elem_size)


# Cached: the launcher asks on every call, and small shapes are launch-bound. After
# editing PINNED in a running process, call _pinned_for.cache_clear().
@functools.cache
def _pinned_for(index: int, head_dim: int, causal: bool, elem_size: int) -> triton.Config:
    budget = _smem_budget(torch.device("cuda", index))
    major, minor = torch.cuda.get_device_capability(index)
    nearest = ("sm_90", "sm_80", "sm_89") if major >= 9 else ("sm_80", "sm_89", "sm_90")
    for arch in (f"sm_{major}{minor}", *nearest):
        config = PINNED.get((arch, head_dim, causal))
        if config is not None and smem_bytes(config, head_dim, elem_size) <= budget:
            return config
    return _FALLBACK_CONFIG


_attn_fwd_autotuned = triton.autotune(
    configs=CONFIGS,
    key=["HEAD_DIM", "CAUSAL", "SEQ_BUCKET"],  # the dtype joins the key by itself
    prune_configs_by={"early_config_prune": prune_configs},
)(_attn_fwd)


# ----------------------------------------------------------------------------------------
# Launcher
# ----------------------------------------------------------------------------------------


def _check_device(name: str, t: torch.Tensor, ref: torch.Tensor | None) -> None:
    # is_cuda first: the launcher runs this on every call, and small shapes are
    # launch-bound (t.device.type costs about 0.5 us, is_cuda 0.1 us).
    if ref is not None and t.device != ref.device:
        raise ValueError(f"{name} is on {t.device} but q is on {ref.device}")
    if t.is_cuda or (_INTERPRET and t.device.type == "cpu"):
        return
    if _INTERPRET:
        raise ValueError(f"{name} must be a CUDA or CPU tensor, got device {t.device}")
    raise ValueError(
        f"{name} must be a CUDA tensor, got device {t.device}"
        " (CPU tensors run only under TRITON_INTERPRET=1)"
    )


def _validate(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool,
    scale: float | None,
    out: torch.Tensor | None,
) -> float:
    # Typed as the public signature; the checks are for callers that do not keep to it.
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(
                f"{name} must be 4-D (batch, heads, seq, head_dim), got shape {tuple(t.shape)}"
            )
        if t.dtype not in _DTYPES:
            raise ValueError(f"{name} must be float16 or bfloat16, got {t.dtype}")
        _check_device(name, t, None if name == "q" else q)
    for name, t in (("k", k), ("v", v)):
        if t.dtype != q.dtype:
            raise ValueError(f"{name} has dtype {t.dtype} but q has {q.dtype}; they must match")
    batch, heads_q, _, head_dim = q.shape
    if head_dim not in SUPPORTED_HEAD_DIMS:
        raise ValueError(f"q has head_dim {head_dim}; supported: {SUPPORTED_HEAD_DIMS}")
    if k.shape != v.shape:
        raise ValueError(
            f"v has shape {tuple(v.shape)} but k has {tuple(k.shape)}; they must match"
        )
    if k.shape[0] != batch or k.shape[3] != head_dim:
        raise ValueError(
            f"k has shape {tuple(k.shape)}; batch and head_dim must match q {tuple(q.shape)}"
        )
    heads_kv = k.shape[1]
    if heads_kv == 0 or heads_q % heads_kv != 0:
        raise ValueError(
            f"k has {heads_kv} heads, which must divide q's {heads_q} heads (grouped-query)"
        )
    if not isinstance(causal, bool):
        raise ValueError(f"causal must be a bool, got {type(causal).__name__}")
    if scale is None:
        scale = 1.0 / math.sqrt(head_dim)
    elif isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise ValueError(f"scale must be a float or None, got {type(scale).__name__}")
    elif not (math.isfinite(scale) and scale > 0):
        # The unmasked loop's fused max-then-scale relies on scale > 0.
        raise ValueError(f"scale must be positive and finite, got {scale}")
    if out is not None:
        if not isinstance(out, torch.Tensor):
            raise ValueError(f"out must be a torch.Tensor, got {type(out).__name__}")
        if out.shape != q.shape:
            raise ValueError(f"out has shape {tuple(out.shape)}, expected q's {tuple(q.shape)}")
        if out.dtype != q.dtype:
            raise ValueError(f"out has dtype {out.dtype}, expected q's {q.dtype}")
        if out.device != q.device:
            raise ValueError(f"out is on {out.device} but q is on {q.device}")
        if out.stride(-1) != 1 and out.numel() > 0:
            raise ValueError("out must have a contiguous last dimension (stride 1)")
    return float(scale)


def _tma_aligned(t: torch.Tensor) -> bool:
    # TMA: unit stride along head_dim; every (batch, head) base and row start 16-byte
    # aligned, since the kernel offsets the base by batch and head strides.
    size = t.element_size()
    return (
        t.stride(-1) == 1
        and t.data_ptr() % 16 == 0
        and all((stride * size) % 16 == 0 for stride in t.stride()[:-1])
    )


@functools.cache
def _is_sm90(index: int) -> bool:
    return torch.cuda.get_device_capability(index) == (9, 0)


def ws_config(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, causal: bool
) -> triton.Config | None:
    """The warp-specialized config when this call may take that path, else None."""
    if _INTERPRET or causal or not q.is_cuda or os.environ.get(_WS_ENV, "1") == "0":
        return None
    config = WS_PINNED.get(q.shape[-1])
    seq_k = k.shape[2]
    if config is None or seq_k < WS_MIN_SEQ_K or seq_k % config.kwargs["BLOCK_N"]:
        return None
    if not _is_sm90(_device_index(q.device)):
        return None
    if not all(_tma_aligned(t) for t in (q, k, v, out)):
        return None
    return config


def _torch_scratch(size: int, alignment: int, stream: int | None) -> torch.Tensor:
    return torch.empty(size, dtype=torch.int8, device="cpu" if _INTERPRET else "cuda")


def _ensure_allocator() -> None:
    # Device-side tensor descriptors (128 B each, 4 per program) live in a scratch
    # buffer that triton asks its allocator for at launch. Set one only where the
    # caller has not: triton's default raises.
    allocation = getattr(triton.runtime, "_allocation", None)
    if allocation is None or isinstance(allocation._allocator.get(), allocation.NullAllocator):
        triton.set_allocator(_torch_scratch)


def _launch(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    causal: bool,
    scale: float,
    config: triton.Config | None,
    ws: bool = False,
) -> _Plan | None:
    """Run the kernel with ``config``, or autotune over ``CONFIGS`` when it is None.

    ``ws`` takes the TMA + warp-specialized path; the caller checks ``ws_config``.
    Returns a ``_Plan`` that repeats this launch on other tensors of the same key, or
    None (autotuning, the interpreter, a launch hook set: nothing to repeat).
    """
    batch, heads_q, seq_q, head_dim = q.shape
    seq_k = k.shape[2]
    kv_group = heads_q // k.shape[1]
    # Power-of-two buckets of the longer side: enough to separate launch-bound from
    # bandwidth-bound shapes without re-tuning for every sequence length.
    seq_bucket = min(max(triton.next_power_of_2(max(seq_q, seq_k)), 64), 16384)
    args = (
        q, k, v, out, scale * 1.4426950408889634,  # log2(e): the kernel uses exp2
        q.stride(0), q.stride(1), q.stride(2),
        k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2),
        out.stride(0), out.stride(1), out.stride(2),
        seq_q, seq_k, kv_group, seq_bucket,
        head_dim, triton.next_power_of_2(head_dim), causal,
        # The interpreter's tl.dot multiplies bfloat16's uint16 storage as integers
        # (triton 3.9); exact float32 products of the same bf16 values sidestep it.
        _INTERPRET and q.dtype == torch.bfloat16,
        ws,
    )  # fmt: skip

    # Grid (row blocks, heads, batch): row blocks vary fastest, so the programs resident
    # together share one head's K/V in L2; heads and batch get their own axes because
    # CUDA caps grid y and z at 65535 each.
    def grid(meta: Mapping[str, Any]) -> tuple[int, int, int]:
        return (triton.cdiv(seq_q, meta["BLOCK_M"]), heads_q, batch)

    if config is None:
        _attn_fwd_autotuned[grid](*args)
        return None
    if ws:
        _ensure_allocator()
    block_m: int = config.kwargs["BLOCK_M"]
    block_n: int = config.kwargs["BLOCK_N"]
    kernel = _attn_fwd[grid](
        *args,
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        num_warps=config.num_warps,
        num_stages=config.num_stages,
    )
    if _INTERPRET or kernel is None:
        return None
    return _Plan.make(kernel, grid({"BLOCK_M": block_m}), (*args[4:], block_m, block_n), q)


# ----------------------------------------------------------------------------------------
# Cheap eager launches
# ----------------------------------------------------------------------------------------
#
# An eager call used to cost 42-80 us of host time at S <= 1024 against 16-20 us for
# torch SDPA (H200): the checks, the config lookup and triton 3.6's JITFunction.run
# (binding and specializing 27 arguments, hashing the key, building launch metadata,
# calling an empty hook chain, asking the driver for the device of every pointer). The
# first call of a key runs all of that; it then keeps a _Plan: the compiled kernel's
# launcher, the grid and every scalar argument. A later call with the same key only
# builds the key, allocates ``out`` and calls the launcher with four raw pointers.


def _env_reader() -> Callable[[str], str | None]:
    # os.environ.get encodes the key on every call (~0.5 us each, three per call); the
    # mapping underneath answers in ~0.05 us and still sees os.environ[...] = ... and
    # monkeypatch.setenv at once. Falls back to os.environ off CPython.
    data, encode = getattr(os.environ, "_data", None), getattr(os.environ, "encodekey", None)
    if not isinstance(data, dict) or encode is None:
        return lambda name: os.environ.get(name)
    keys: dict[str, object] = {}

    def read(name: str) -> str | None:
        key = keys.get(name)
        if key is None:
            key = keys[name] = encode(name)
        value = data.get(key)
        return value if value is None or isinstance(value, str) else os.fsdecode(value)

    return read


_getenv = _env_reader()
_GLUON_ENV = "ATTN_GLUON"  # "0": no Gluon Hopper kernel, even where it is known faster

# The CUDA calls that triton's own launcher makes, without torch.cuda's Python layers:
# the current device's index, and the raw current stream of a device index.
_cuda_device: Callable[[], int] | None = getattr(torch._C, "_cuda_getDevice", None)
_cuda_stream: Callable[[int], int] | None = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def _no_launch_hooks() -> bool:
    # A profiler (proton) adds launch hooks; then the JIT path runs so they see the call.
    runtime = triton.knobs.runtime
    for hook in (runtime.launch_enter_hook, runtime.launch_exit_hook):
        if hook is not None and getattr(hook, "calls", True):
            return False
    return True


class LaunchPlan(Protocol):
    """A kept launch (``_Plan``, or Gluon's): the kernel again on new tensors of its key."""

    def __call__(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor | None, /
    ) -> torch.Tensor: ...


# A kernel's scalar arguments after the tensors (bools are ints).
Scalars = tuple[int | float, ...]


def plans_possible() -> bool:
    """Whether a launch may be kept as a plan here: torch's raw device and stream
    getters exist, no launch hooks (a profiler) and a real driver: a GPU, and not the
    compile-only driver of ``kernels/triton_compile.py`` (which a GPU runner's resource
    records run under, with torch.cuda available all the same)."""
    active = getattr(triton.runtime.driver, "_active", None)
    return (
        _cuda_device is not None
        and _cuda_stream is not None
        and _no_launch_hooks()
        and getattr(active, "launches", True)
        and torch.cuda.is_available()
    )


def c_entry_head(kernel: Any, launcher: Any) -> tuple[object, ...]:
    """The C launcher's arguments between the stream and the kernel's own: function,
    cooperative grid, PDL, the two scratch buffers (none), metadata, launch metadata
    and the enter and exit hooks (none: ``_no_launch_hooks``)."""
    return (
        kernel.function, launcher.launch_cooperative_grid, launcher.launch_pdl,
        None, None, kernel.packed_metadata, None, None, None,
    )  # fmt: skip


class PlanBase:
    """What every kept launch holds besides its launcher (``_Plan``, Gluon's)."""

    __slots__ = ("device", "device_index", "dtype", "grid", "head", "shape", "stream", "tail")
    head: tuple[object, ...]  # the launcher's arguments between the stream and the tensors
    grid: tuple[int, ...]
    tail: Scalars
    shape: torch.Size  # of q and out
    dtype: torch.dtype
    device: torch.device
    device_index: int
    stream: Callable[[int], int]  # _cuda_stream

    def bind(self, grid: Sequence[int], tail: Scalars, q: torch.Tensor) -> None:
        """Grid, scalars and the output's shape; the device current now (plans_possible)."""
        assert _cuda_device is not None and _cuda_stream is not None
        self.grid, self.tail = tuple(grid), tuple(tail)
        self.shape, self.dtype, self.device = q.shape, q.dtype, q.device
        self.device_index, self.stream = _cuda_device(), _cuda_stream


class _Plan(PlanBase):
    """One launch of a compiled kernel, repeatable on new tensors of the same key."""

    __slots__ = ("call",)
    call: Callable[..., object]  # the compiled kernel's launcher

    @classmethod
    def make(
        cls, kernel: Any, grid: tuple[int, ...], tail: Scalars, q: torch.Tensor
    ) -> _Plan | None:  # kernel: triton's CompiledKernel
        if not plans_possible():
            return None
        plan = cls()
        launcher = kernel.run  # loads the module on the first use
        scratch = getattr(launcher, "global_scratch_size", 1) or getattr(
            launcher, "profile_scratch_size", 1
        )
        if not scratch and hasattr(launcher, "launch"):
            # The C entry point itself: no scratch to allocate, no hooks to call.
            plan.call, plan.head = launcher.launch, c_entry_head(kernel, launcher)
        else:
            # The device-side TMA descriptors of the warp-specialized path need scratch,
            # which triton's launcher allocates per call.
            plan.call = launcher
            plan.head = (kernel.function, kernel.packed_metadata, None, None, None)
        plan.bind(grid, tail, q)
        return plan

    def __call__(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor | None
    ) -> torch.Tensor:
        if out is None:
            out = torch.empty(self.shape, dtype=self.dtype, device=self.device)
        # Raw pointers: the launcher takes ints as they are, where a tensor costs a
        # data_ptr() call and a cuPointerGetAttribute each.
        self.call(
            *self.grid, self.stream(self.device_index), *self.head,
            q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), *self.tail,
        )  # fmt: skip
        return out


# Everything a launch depends on besides the data pointers (``_plan_key``).
PlanKey = tuple[object, ...]
_PLANS: dict[PlanKey, LaunchPlan] = {}
_MAX_PLANS = 4096  # a process that cycles through more shapes than this starts over


def _plan_key(
    q: object, k: object, v: object, causal: object, scale: object, out: object
) -> PlanKey | None:
    """Everything a launch depends on besides the data pointers, or None (no fast path).

    Exact types only: ``causal=1`` or ``scale=True`` must still reach the checks (and
    their ValueError), though they hash like True and 1.0. The alignment of each pointer
    is part of the key because triton specializes the kernel on it.
    """
    if _INTERPRET or type(q) is not torch.Tensor or type(k) is not torch.Tensor:
        return None
    if type(v) is not torch.Tensor or not q.is_cuda or _cuda_device is None:
        return None
    if (causal is not True and causal is not False) or not (scale is None or type(scale) is float):
        return None
    if out is None:
        out_key = None
    elif type(out) is torch.Tensor:
        out_key = (out.shape, out.stride(), out.dtype, out.get_device(), out.data_ptr() % 16)
    else:
        return None
    return (
        q.shape, k.shape, v.shape, q.stride(), k.stride(), v.stride(),
        q.dtype, k.dtype, v.dtype, q.get_device(), k.get_device(), v.get_device(),
        q.data_ptr() % 16, k.data_ptr() % 16, v.data_ptr() % 16,
        causal, scale, out_key, _cuda_device(),
        _getenv(_AUTOTUNE_ENV), _getenv(_WS_ENV), _getenv(_GLUON_ENV),
    )  # fmt: skip


def _prepare(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool,
    scale: float | None,
    out: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, float]:
    scale = _validate(q, k, v, causal, scale, out)
    # The kernel assumes a unit stride along head_dim (vector loads); other strides
    # are passed through.
    if q.stride(-1) != 1:
        q = q.contiguous()
    if k.stride(-1) != 1:
        k = k.contiguous()
    if v.stride(-1) != 1:
        v = v.contiguous()
    if out is None:
        out = torch.empty_like(q, memory_format=torch.contiguous_format)
    return q, k, v, out, scale


def flash_attention_fwd(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool = False,
    scale: float | None = None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Attention forward, ``softmax(q @ k^T * scale) @ v``, like torch SDPA.

    Args:
        q: (batch, heads_q, seq_q, head_dim), float16 or bfloat16, on CUDA (or on the
            CPU under ``TRITON_INTERPRET=1``).
        k, v: (batch, heads_kv, seq_k, head_dim), q's dtype and device; heads_kv must
            divide heads_q (grouped-query attention).
        causal: mask keys after the query, TOP-LEFT aligned like SDPA's
            ``is_causal=True``: query i sees keys j <= i even when seq_q != seq_k.
        scale: multiplies q @ k^T; default 1 / sqrt(head_dim); must be positive.
        out: optional buffer shaped and typed like q, written and returned.

    Returns:
        (batch, heads_q, seq_q, head_dim) in q's dtype.

    Raises:
        ValueError: naming the argument that is wrong (dtype, device, shape, head_dim,
            head counts, scale, out).

    The first call of each (shapes, strides, dtypes, devices, alignments, causal, scale,
    out) key validates and compiles; later calls of that key reuse its launch plan
    (see ``_Plan``). On sm_90 the Gluon kernel of ``kernels/gluon_flash_fwd.py``
    takes the calls that it is measured faster on (unless ``ATTN_GLUON=0``).
    """
    key = _plan_key(q, k, v, causal, scale, out)
    if key is not None:
        plan = _PLANS.get(key)
        if plan is not None:
            return plan(q, k, v, out)
    # Any stride of the caller's tensors along head_dim other than 1 means a copy per
    # call; such keys take this path every time.
    unit = key is not None and q.stride(-1) == 1 and k.stride(-1) == 1 and v.stride(-1) == 1
    q, k, v, out, scale = _prepare(q, k, v, causal, scale, out)
    if out.numel() == 0:
        return out
    if _INTERPRET:
        _launch(q, k, v, out, causal, scale, INTERPRET_CONFIG)
        return out
    plan = None
    if _getenv(_AUTOTUNE_ENV) == "1":
        _launch(q, k, v, out, causal, scale, None)
    elif (
        _getenv(_GLUON_ENV) != "0"
        and (gluon := _gluon_module()) is not None
        and (choice := gluon.dispatch_variant(q, k, v, out, causal)) is not None
    ):
        plan = gluon.launch(q, k, v, out, causal, scale, choice[0], **choice[1])
    elif (config := ws_config(q, k, v, out, causal)) is not None:
        plan = _launch(q, k, v, out, causal, scale, config, ws=True)
    else:
        config = pinned_config(q.device, q.shape[-1], causal, q.element_size())
        try:
            plan = _launch(q, k, v, out, causal, scale, config)
        except OutOfResources:
            # The smem estimate was optimistic for this part: take the small config
            # rather than fail; tune_triton.py reports which pinned entry needs fixing.
            plan = _launch(q, k, v, out, causal, scale, _FALLBACK_CONFIG)
    if plan is not None and unit and key is not None:
        if len(_PLANS) >= _MAX_PLANS:
            _PLANS.clear()
        _PLANS[key] = plan
    return out


class _Gluon(Protocol):
    """What the launcher uses of ``kernels.gluon_flash_fwd``."""

    def faster_variant(
        self, head_dim: int, causal: bool, seq_q: int, seq_k: int
    ) -> tuple[str, dict[str, int]] | None: ...

    def dispatch_variant(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, causal: bool
    ) -> tuple[str, dict[str, int]] | None: ...

    def launch(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        out: torch.Tensor,
        causal: bool,
        scale: float,
        variant: str = ...,
        **overrides: int,
    ) -> LaunchPlan | None: ...


@functools.cache
def _gluon_module() -> _Gluon | None:
    """kernels.gluon_flash_fwd, or None where Gluon cannot be imported."""
    try:
        from kernels import gluon_flash_fwd
    except ImportError:
        return None
    return gluon_flash_fwd


def flash_attention_fwd_config(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    config: triton.Config,
    *,
    causal: bool = False,
    scale: float | None = None,
    out: torch.Tensor | None = None,
    warp_specialize: bool = False,
) -> torch.Tensor:
    """``flash_attention_fwd`` with an explicit config (for tuning); no fallback.

    ``warp_specialize=True`` forces the TMA + warp-specialized path: non-causal only,
    seq_k a multiple of BLOCK_N, 16-byte aligned rows (ValueError otherwise).
    """
    q, k, v, out, scale = _prepare(q, k, v, causal, scale, out)
    if warp_specialize:
        if causal or k.shape[2] == 0 or k.shape[2] % config.kwargs["BLOCK_N"]:
            raise ValueError(
                "warp_specialize needs causal=False and seq_k a positive multiple of BLOCK_N"
            )
        if not all(_tma_aligned(t) for t in (q, k, v, out)):
            raise ValueError("warp_specialize needs 16-byte aligned rows (TMA)")
    if out.numel() > 0:
        _launch(q, k, v, out, causal, scale, config, ws=warp_specialize)
    return out
