"""Variant: the FlashAttention-2 forward of kernels/flash_attention.py with switches.

USE_TMA=1: Q/K/V/O through 4-D host tensor descriptors (Hopper TMA); the hardware
zero-fills rows past seq and clips the O store, so no load needs a row mask.
USE_TMA=2: device-side 2-D descriptors per (batch, head) (tl.make_tensor_descriptor).
WS: all key tiles in one unmasked tl.range(..., warp_specialize=True) loop (needs
USE_TMA=2 on Hopper with triton 3.6); non-causal, seq_k % BLOCK_N == 0 only.
A hand-pipelined loop (Q @ K^T one tile ahead) was tried and dropped: triton 3.6 waits
on every wgmma right after issuing it there (pendings=0 in the TTGIR).
Measured side by side in docs/notes/triton-kernel.md; the kernel folds in WS only.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

try:
    from triton.tools.tensor_descriptor import TensorDescriptor
except ImportError:  # pragma: no cover
    TensorDescriptor = None


@triton.jit
def _ld(src, base, z, h, row, rows, n_rows, offs_d, stride_row,
        HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_R: tl.constexpr,
        MASK_ROWS: tl.constexpr, USE_TMA: tl.constexpr):  # fmt: skip
    if USE_TMA == 2:
        tile = src.load([row, 0])
    elif USE_TMA == 1:
        tile = src.load([z, h, row, 0]).reshape([BLOCK_R, BLOCK_D])
    else:
        ptrs = base + rows[:, None] * stride_row + offs_d[None, :]
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
def _softmax_step(qk, acc, l_i, m_i, qk_scale):
    m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
    p = tl.math.exp2(qk * qk_scale - m_ij[:, None])
    alpha = tl.math.exp2(m_i - m_ij)
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None]
    return p, acc, l_i, m_ij


@triton.jit
def _inner(acc, l_i, m_i, q, K, V, k_base, v_base, z, hk, stride_kn, stride_vn,
           offs_m, offs_n, offs_d, lo, hi, seq_k, qk_scale,
           HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr,
           CAUSAL: tl.constexpr, MASKED: tl.constexpr, USE_TMA: tl.constexpr,
           WS: tl.constexpr):  # fmt: skip
    for start_n in tl.range(lo, hi, BLOCK_N, warp_specialize=WS):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        cols = start_n + offs_n
        k = _ld(K, k_base, z, hk, start_n, cols, seq_k, offs_d, stride_kn,
                HEAD_DIM, BLOCK_D, BLOCK_N, MASKED, USE_TMA)  # fmt: skip
        qk = tl.dot(q, tl.trans(k))
        if MASKED:
            keep = cols[None, :] < seq_k
            if CAUSAL:
                keep = keep & (cols[None, :] <= offs_m[:, None])
            qk = tl.where(keep, qk * qk_scale, float("-inf"))
            m_ij = tl.maximum(m_i, tl.max(qk, 1))
            m_sub = tl.where(m_ij == float("-inf"), 0.0, m_ij)
            p = tl.math.exp2(qk - m_sub[:, None])
            alpha = tl.math.exp2(m_i - m_sub)
            l_i = l_i * alpha + tl.sum(p, 1)
            acc = acc * alpha[:, None]
        else:
            p, acc, l_i, m_ij = _softmax_step(qk, acc, l_i, m_i, qk_scale)
        v = _ld(V, v_base, z, hk, start_n, cols, seq_k, offs_d, stride_vn,
                HEAD_DIM, BLOCK_D, BLOCK_N, MASKED, USE_TMA)  # fmt: skip
        acc = tl.dot(p.to(q.dtype), v, acc)
        m_i = m_ij
    return acc, l_i, m_i


@triton.jit
def _attn_fwd(
    Q, K, V, Out, qk_scale,
    stride_qz, stride_qh, stride_qm,
    stride_kz, stride_kh, stride_kn,
    stride_vz, stride_vh, stride_vn,
    stride_oz, stride_oh, stride_om,
    seq_q, seq_k, kv_group,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, CAUSAL: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    USE_TMA: tl.constexpr, WS: tl.constexpr,
):  # fmt: skip
    if CAUSAL:
        start_m = tl.num_programs(0) - 1 - tl.program_id(0)
    else:
        start_m = tl.program_id(0)
    off_h = tl.program_id(1)
    off_z = tl.program_id(2)
    off_hk = off_h // kv_group
    if USE_TMA == 2:
        # Device-side 2-D descriptors over this (batch, head): rows past seq are
        # zero-filled on load and clipped on store, as with the 4-D host ones.
        z64 = off_z.to(tl.int64)
        Q = tl.make_tensor_descriptor(
            Q + z64 * stride_qz + off_h.to(tl.int64) * stride_qh,
            [seq_q, HEAD_DIM],
            [stride_qm, 1],
            [BLOCK_M, BLOCK_D],
        )
        K = tl.make_tensor_descriptor(
            K + z64 * stride_kz + off_hk.to(tl.int64) * stride_kh,
            [seq_k, HEAD_DIM],
            [stride_kn, 1],
            [BLOCK_N, BLOCK_D],
        )
        V = tl.make_tensor_descriptor(
            V + z64 * stride_vz + off_hk.to(tl.int64) * stride_vh,
            [seq_k, HEAD_DIM],
            [stride_vn, 1],
            [BLOCK_N, BLOCK_D],
        )
        Out = tl.make_tensor_descriptor(
            Out + z64 * stride_oz + off_h.to(tl.int64) * stride_oh,
            [seq_q, HEAD_DIM],
            [stride_om, 1],
            [BLOCK_M, BLOCK_D],
        )
        q_base = Q
        k_base = K
        v_base = V
    elif USE_TMA == 1:
        q_base = Q
        k_base = K
        v_base = V
    else:
        z64 = off_z.to(tl.int64)
        q_base = Q + z64 * stride_qz + off_h.to(tl.int64) * stride_qh
        k_base = K + z64 * stride_kz + off_hk.to(tl.int64) * stride_kh
        v_base = V + z64 * stride_vz + off_hk.to(tl.int64) * stride_vh

    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    q = _ld(Q, q_base, off_z, off_h, start_m * BLOCK_M, offs_m, seq_q, offs_d, stride_qm,
            HEAD_DIM, BLOCK_D, BLOCK_M, True, USE_TMA)  # fmt: skip
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)

    if CAUSAL:
        kv_end = tl.minimum((start_m + 1) * BLOCK_M, seq_k)
        full_end = tl.minimum(start_m * BLOCK_M, seq_k) // BLOCK_N * BLOCK_N
    else:
        kv_end = seq_k
        full_end = seq_k // BLOCK_N * BLOCK_N
    if WS:
        # Hopper automatic warp specialization (triton 3.6) takes one plain loop and
        # nothing else: a second loop, or a masked tile before or after it, crashes the
        # pass or turns it off; a causal mask inside it came out wrong (H200, 2026-11-26,
        # rel err 0.2), and so did num_stages=3. The launcher sends here only
        # non-causal work whose keys fill whole tiles.
        acc, l_i, m_i = _inner(
            acc, l_i, m_i, q, K, V, k_base, v_base, off_z, off_hk, stride_kn, stride_vn,
            offs_m, offs_n, offs_d, 0, seq_k, seq_k, qk_scale,
            HEAD_DIM, BLOCK_D, BLOCK_N, CAUSAL, False, USE_TMA, True,
        )  # fmt: skip
    else:
        acc, l_i, m_i = _inner(
            acc, l_i, m_i, q, K, V, k_base, v_base, off_z, off_hk, stride_kn, stride_vn,
            offs_m, offs_n, offs_d, 0, full_end, seq_k, qk_scale,
            HEAD_DIM, BLOCK_D, BLOCK_N, CAUSAL, False, USE_TMA, False,
        )  # fmt: skip
    if not WS:
        acc, l_i, m_i = _inner(
            acc, l_i, m_i, q, K, V, k_base, v_base, off_z, off_hk, stride_kn, stride_vn,
            offs_m, offs_n, offs_d, full_end, kv_end, seq_k, qk_scale,
            HEAD_DIM, BLOCK_D, BLOCK_N, CAUSAL, True, USE_TMA, False,
        )  # fmt: skip

    l_i = tl.where(l_i == 0.0, 1.0, l_i)
    acc = acc / l_i[:, None]
    if USE_TMA == 2:
        Out.store([start_m * BLOCK_M, 0], acc.to(Out.dtype))
    elif USE_TMA == 1:
        o = acc.to(Out.dtype).reshape([1, 1, BLOCK_M, BLOCK_D])
        Out.store([off_z, off_h, start_m * BLOCK_M, 0], o)
    else:
        o_base = Out + off_z.to(tl.int64) * stride_oz + off_h.to(tl.int64) * stride_oh
        o_ptrs = o_base + offs_m[:, None] * stride_om + offs_d[None, :]
        o_mask = offs_m[:, None] < seq_q
        if BLOCK_D != HEAD_DIM:
            o_mask = o_mask & (offs_d[None, :] < HEAD_DIM)
        tl.store(o_ptrs, acc.to(Out.dtype.element_ty), mask=o_mask)


def tma_ok(*tensors: torch.Tensor) -> bool:
    """TMA needs 16-byte aligned bases and strides (but the last, which must be 1)."""
    if TensorDescriptor is None:
        return False
    for t in tensors:
        if t.stride(-1) != 1 or t.data_ptr() % 16:
            return False
        if any((s * t.element_size()) % 16 for s in t.stride()[:-1]):
            return False
    return True


_ALLOCATOR_SET = False


def _ensure_allocator() -> None:
    # Device-side descriptors live in a per-launch global scratch buffer (128 B each).
    global _ALLOCATOR_SET
    if not _ALLOCATOR_SET:
        triton.set_allocator(
            lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda")
        )
        _ALLOCATOR_SET = True


def _desc(t: torch.Tensor, rows: int, block_d: int) -> TensorDescriptor:
    return TensorDescriptor(t, list(t.shape), list(t.stride()), [1, 1, rows, block_d])


def launch(q, k, v, out, causal: bool, scale: float, cfg: dict) -> None:
    """cfg: BLOCK_M, BLOCK_N, num_warps, num_stages, and optional tma/pipe/ws/maxnreg."""
    batch, heads_q, seq_q, head_dim = q.shape
    seq_k = k.shape[2]
    block_d = triton.next_power_of_2(head_dim)
    bm, bn = cfg["BLOCK_M"], cfg["BLOCK_N"]
    use_tma = int(cfg.get("tma", 0)) if tma_ok(q, k, v, out) else 0
    if use_tma == 2:
        _ensure_allocator()
    if use_tma == 1:
        qa, ka, va, oa = (
            _desc(q, bm, block_d), _desc(k, bn, block_d), _desc(v, bn, block_d),
            _desc(out, bm, block_d),
        )  # fmt: skip
    else:
        qa, ka, va, oa = q, k, v, out
    ws = int(cfg.get("ws", 0)) if use_tma == 2 else 0
    if causal or seq_k % bn:
        ws = 0  # see the kernel: one unmasked loop only
    extra = {}
    if cfg.get("maxnreg"):
        extra["maxnreg"] = cfg["maxnreg"]
    grid = (triton.cdiv(seq_q, bm), heads_q, batch)
    return _attn_fwd[grid](
        qa, ka, va, oa, scale * 1.4426950408889634,
        q.stride(0), q.stride(1), q.stride(2),
        k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2),
        out.stride(0), out.stride(1), out.stride(2),
        seq_q, seq_k, heads_q // k.shape[1],
        HEAD_DIM=head_dim, BLOCK_D=block_d, CAUSAL=causal, BLOCK_M=bm, BLOCK_N=bn,
        USE_TMA=use_tma, WS=ws,
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"], **extra,
    )  # fmt: skip
