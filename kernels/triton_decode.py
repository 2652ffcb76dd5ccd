"""Split-KV attention for decode: a few queries against a long cache ("flash-decoding").

One program of the split kernel takes one KV head of one batch row, a block of its
packed query rows and one range of keys. The query rows of every query head that shares
the KV head are packed into the row block (PackGQA: row ``r`` is query head
``r // seq_q`` of the group at position ``r % seq_q``), so each key tile is read once per
KV head, not once per query head. With ``n`` splits the kernel writes each split's
normalized partial output (float32) and its log-sum-exp (log2 units); a second kernel
merges the splits of every row exactly (weights ``exp2(lse_s - max lse)``, float32
sums). With one split the first kernel writes the output itself.

The number of splits comes from the SM count and the work (``flash_plan.decode_splits``).

Inputs beyond the entry point's (``flash_decode_fwd``):

- ``cache_seqlens``: int32, one length per batch row; row ``b`` attends keys
  ``[0, cache_seqlens[b])`` of its cache (lengths above seq_k read as seq_k, below 0 as 0).
  A row of length 0 sees no key: its output is 0.
- ``causal_align``: ``"top-left"`` (SDPA's ``is_causal``: query i sees keys j <= i) or
  ``"bottom-right"`` (decoding: the last query sees the whole cache, query i sees keys
  j <= i + length - seq_q). A query that sees no key gets 0.

Registry: the Triton kernel (``triton_flash``) and the entry point (``flash_attention``)
take this path for non-causal calls of at most ``flash_plan.DECODE_MAX_SEQ_Q`` queries
against at least ``flash_plan.DECODE_MIN_SEQ_K`` keys (``flash_plan.choose``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import torch
import triton
import triton.language as tl

from kernels import flash_launch, flash_plan
from kernels.flash_launch import INTERPRET as _INTERPRET
from kernels.flash_launch import PlanBase, plan_key, prepare

__all__ = ["flash_decode_fwd", "launch"]

CausalAlign = Literal["top-left", "bottom-right"]
ALIGNS = ("top-left", "bottom-right")
LOG2E = 1.4426950408889634  # the kernels use exp2


@triton.jit
def _tile_mask(rows_ok, offs_d, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr):  # type: ignore[no-untyped-def]
    # Only the rows where head_dim fills BLOCK_D: an all-true column mask still costs
    # predicate registers.
    if BLOCK_D != HEAD_DIM:
        return rows_ok[:, None] & (offs_d[None, :] < HEAD_DIM)
    return rows_ok[:, None] & (offs_d[None, :] < BLOCK_D)


@triton.jit
def _decode_split(  # type: ignore[no-untyped-def]
    Q, K, V, Out, Part, Lse, Lens, qk_scale,
    stride_qz, stride_qh, stride_qm,
    stride_kz, stride_kh, stride_kn,
    stride_vz, stride_vh, stride_vn,
    stride_oz, stride_oh, stride_om,
    heads_q, heads_kv, seq_q, seq_k, keys_per_split, rows_total,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
    HAS_LENS: tl.constexpr, CAUSAL: tl.constexpr, BOTTOM_RIGHT: tl.constexpr,
    SPLIT: tl.constexpr, UPCAST_DOT: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    split = tl.program_id(0)
    pair = tl.program_id(1)  # batch row * heads_kv + KV head
    start_m = tl.program_id(2)
    # int64: batch * stride overflows int32 past 2**31 elements.
    off_z = (pair // heads_kv).to(tl.int64)
    off_hk = (pair % heads_kv).to(tl.int64)
    group = heads_q // heads_kv
    rows = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rows_ok = rows < group * seq_q
    head = off_hk * group + rows // seq_q  # the query head of each packed row
    pos = rows % seq_q  # its query position
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)

    q_ptrs = Q + off_z * stride_qz + head[:, None] * stride_qh + pos[:, None] * stride_qm
    q = tl.load(q_ptrs + offs_d[None, :], mask=_tile_mask(rows_ok, offs_d, HEAD_DIM, BLOCK_D),
                other=0.0)  # fmt: skip
    if UPCAST_DOT:
        q = q.to(tl.float32)

    length = seq_k
    if HAS_LENS:
        length = tl.minimum(tl.maximum(tl.load(Lens + off_z), 0), seq_k)
    lo = split * keys_per_split
    hi = tl.minimum(lo + keys_per_split, length)
    if CAUSAL:
        shift = 0
        if BOTTOM_RIGHT:
            shift = length - seq_q
        limit = pos + shift  # a row sees keys j <= limit
        hi = tl.minimum(hi, seq_q + shift)

    k_base = K + off_z * stride_kz + off_hk * stride_kh
    v_base = V + off_z * stride_vz + off_hk * stride_vh
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    for start_n in range(lo, hi, BLOCK_N):
        cols = start_n + offs_n
        cols_ok = cols < hi
        kv_mask = _tile_mask(cols_ok, offs_d, HEAD_DIM, BLOCK_D)
        k = tl.load(k_base + cols[:, None] * stride_kn + offs_d[None, :], mask=kv_mask, other=0.0)
        if UPCAST_DOT:
            k = k.to(tl.float32)
        qk = tl.dot(q, tl.trans(k))
        keep = cols_ok[None, :]
        if CAUSAL:
            keep = keep & (cols[None, :] <= limit[:, None])
        qk = tl.where(keep, qk * qk_scale, float("-inf"))
        m_ij = tl.maximum(m_i, tl.max(qk, 1))
        # A row that has seen no key keeps m = -inf; subtracting 0 instead avoids
        # (-inf) - (-inf) = NaN and gives p = 0, alpha = 0 for it.
        m_sub = tl.where(m_ij == float("-inf"), 0.0, m_ij)
        p = tl.math.exp2(qk - m_sub[:, None])
        alpha = tl.math.exp2(m_i - m_sub)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        v = tl.load(v_base + cols[:, None] * stride_vn + offs_d[None, :], mask=kv_mask, other=0.0)
        p = p.to(V.dtype.element_ty)
        if UPCAST_DOT:
            p = p.to(tl.float32)
            v = v.to(tl.float32)
        acc = tl.dot(p, v, acc)
        m_i = m_ij

    # l == 0 only for a row that saw no key in this range: output 0, weight 0.
    l_safe = tl.where(l_i == 0.0, 1.0, l_i)
    o = acc / l_safe[:, None]
    o_mask = _tile_mask(rows_ok, offs_d, HEAD_DIM, BLOCK_D)
    if SPLIT:
        # (splits, batch, heads_q, seq_q) rows, float32, head_dim apart.
        index = split.to(tl.int64) * rows_total + (off_z * heads_q + head) * seq_q + pos
        lse = tl.where(l_i == 0.0, float("-inf"), m_i + tl.math.log2(l_safe))
        tl.store(Lse + index, lse, mask=rows_ok)
        tl.store(Part + index[:, None] * HEAD_DIM + offs_d[None, :], o, mask=o_mask)
    else:
        o_ptrs = Out + off_z * stride_oz + head[:, None] * stride_oh + pos[:, None] * stride_om
        tl.store(o_ptrs + offs_d[None, :], o.to(Out.dtype.element_ty), mask=o_mask)


@triton.jit
def _decode_combine(  # type: ignore[no-untyped-def]
    Part, Lse, Out, stride_oz, stride_oh, stride_om,
    heads_q, seq_q, rows_total, n_splits,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_S: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)  # (batch row * heads_q + head) * seq_q + position
    splits = tl.arange(0, BLOCK_S)
    splits_ok = splits < n_splits
    offs_d = tl.arange(0, BLOCK_D)
    index = splits.to(tl.int64) * rows_total + row
    lse = tl.load(Lse + index, mask=splits_ok, other=float("-inf"))
    m = tl.max(lse, 0)
    weight = tl.math.exp2(lse - tl.where(m == float("-inf"), 0.0, m))  # 0 for empty splits
    total = tl.sum(weight, 0)
    mask = _tile_mask(splits_ok, offs_d, HEAD_DIM, BLOCK_D)
    parts = tl.load(Part + index[:, None] * HEAD_DIM + offs_d[None, :], mask=mask, other=0.0)
    o = tl.sum(parts * weight[:, None], 0) / tl.where(total == 0.0, 1.0, total)
    z = row // (heads_q * seq_q)
    head = (row // seq_q) % heads_q
    pos = row % seq_q
    o_ptrs = Out + z * stride_oz + head * stride_oh + pos * stride_om + offs_d
    if BLOCK_D != HEAD_DIM:
        tl.store(o_ptrs, o.to(Out.dtype.element_ty), mask=offs_d < HEAD_DIM)
    else:
        tl.store(o_ptrs, o.to(Out.dtype.element_ty))


# ----------------------------------------------------------------------------------------
# Launcher
# ----------------------------------------------------------------------------------------

COMBINE_WARPS = 4


def _workspace(splits: int, rows_total: int, head_dim: int, device: torch.device) -> torch.Tensor:
    # One buffer: the partial outputs, then the log-sum-exps at a 16-byte boundary.
    return torch.empty(_workspace_size(splits, rows_total, head_dim), dtype=torch.float32,
                       device=device)  # fmt: skip


def _workspace_size(splits: int, rows_total: int, head_dim: int) -> int:
    return _lse_offset(splits, rows_total, head_dim) + splits * rows_total


def _lse_offset(splits: int, rows_total: int, head_dim: int) -> int:
    return -(-splits * rows_total * head_dim // 4) * 4


def launch(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    scale: float,
    config: Any,  # triton.Config: BLOCK_M (the most packed rows), BLOCK_N, warps, stages
    *,
    lens: torch.Tensor | None = None,
    causal: bool = False,
    bottom_right: bool = False,
    splits: int | None = None,
) -> _Plan | None:
    """Run the split kernel (and the combine kernel, with more than one split) on
    prepared tensors. Returns a ``_Plan`` that repeats the launch on new tensors of the
    same key, or None (the interpreter, a launch hook set)."""
    batch, heads_q, seq_q, head_dim = q.shape
    heads_kv, seq_k = k.shape[1], k.shape[2]
    rows = heads_q // heads_kv * seq_q
    block_m = min(int(config.kwargs["BLOCK_M"]), max(16, triton.next_power_of_2(rows)))
    block_n = int(config.kwargs["BLOCK_N"])
    key_tiles = triton.cdiv(seq_k, block_n)
    row_blocks = triton.cdiv(rows, block_m)
    if splits is None:
        splits = flash_plan.decode_splits(
            batch * heads_kv * row_blocks, key_tiles, flash_launch.sm_count(q.device)
        )
    splits = max(1, min(splits, key_tiles))
    keys_per_split = triton.cdiv(key_tiles, splits) * block_n
    splits = triton.cdiv(seq_k, keys_per_split) if seq_k else 1  # none left empty
    rows_total = batch * heads_q * seq_q
    if splits > 1:
        work = _workspace(splits, rows_total, head_dim, q.device)
        part, lse = work, work[_lse_offset(splits, rows_total, head_dim) :]
    else:
        part = lse = out  # not written
    block_d = triton.next_power_of_2(head_dim)
    args = (
        q, k, v, out, part, lse, q if lens is None else lens, scale * LOG2E,
        q.stride(0), q.stride(1), q.stride(2),
        k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2),
        out.stride(0), out.stride(1), out.stride(2),
        heads_q, heads_kv, seq_q, seq_k, keys_per_split, rows_total,
        head_dim, block_d, lens is not None, causal, bottom_right, splits > 1,
        # The interpreter's tl.dot multiplies bfloat16's uint16 storage as integers
        # (triton 3.9); exact float32 products of the same bf16 values sidestep it.
        _INTERPRET and q.dtype == torch.bfloat16,
    )  # fmt: skip
    grid = (splits, batch * heads_kv, row_blocks)
    split_kernel = _decode_split[grid](
        *args, BLOCK_M=block_m, BLOCK_N=block_n,
        num_warps=config.num_warps, num_stages=config.num_stages,
    )  # fmt: skip
    combine_kernel = None
    combine_args: tuple[Any, ...] = ()
    if splits > 1:
        combine_args = (
            part, lse, out, out.stride(0), out.stride(1), out.stride(2),
            heads_q, seq_q, rows_total, splits, head_dim, block_d,
            max(2, triton.next_power_of_2(splits)),
        )  # fmt: skip
        combine_kernel = _decode_combine[(rows_total,)](*combine_args, num_warps=COMBINE_WARPS)
    if _INTERPRET or split_kernel is None or (splits > 1 and combine_kernel is None):
        return None
    return _Plan.make(
        (split_kernel, grid, (*args[7:], block_m, block_n)),
        None if combine_kernel is None else (combine_kernel, (rows_total, 1, 1), combine_args[3:]),
        (splits, rows_total, head_dim),
        q,
    )


_Launch = tuple[Any, tuple[int, ...], tuple[Any, ...]]  # compiled kernel, grid, scalars
_Kept = tuple[Callable[..., object], tuple[object, ...]]  # launcher, its head


def _kept(kernel: Any) -> _Kept | None:
    launcher = kernel.run  # loads the module on the first use
    scratch = getattr(launcher, "global_scratch_size", 1) or getattr(
        launcher, "profile_scratch_size", 1
    )
    if scratch or not hasattr(launcher, "launch"):
        return None
    return launcher.launch, flash_launch.c_entry_head(kernel, launcher)


class _Plan(PlanBase):
    """The split launch (and the combine launch) of one key, repeatable on new tensors."""

    __slots__ = ("combine", "split", "work")
    split: _Kept
    combine: tuple[_Kept, tuple[int, ...], tuple[Any, ...]] | None  # with its grid, scalars
    work: tuple[int, int, int]  # splits, rows_total, head_dim

    @classmethod
    def make(
        cls, split: _Launch, combine: _Launch | None, work: tuple[int, int, int], q: torch.Tensor
    ) -> _Plan | None:
        if not flash_launch.plans_possible():
            return None
        kept_split = _kept(split[0])
        kept_combine = None if combine is None else _kept(combine[0])
        if kept_split is None or (combine is not None and kept_combine is None):
            return None
        plan = cls()
        plan.split, plan.work = kept_split, work
        plan.combine = None
        if combine is not None and kept_combine is not None:
            plan.combine = (kept_combine, combine[1], tuple(combine[2]))
        # tail: the split kernel's scalars after its seven pointers.
        plan.bind(split[1], tuple(split[2]), q)
        return plan

    def __call__(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        out: torch.Tensor | None,
        lens: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if out is None:
            out = torch.empty(self.shape, dtype=self.dtype, device=self.device)
        stream = self.stream(self.device_index)
        o = out.data_ptr()
        if self.combine is None:
            part = lse = o
        else:
            splits, rows_total, head_dim = self.work
            work = _workspace(splits, rows_total, head_dim, self.device)
            part = work.data_ptr()
            lse = part + 4 * _lse_offset(splits, rows_total, head_dim)
        call, head = self.split
        q_ptr = q.data_ptr()
        call(
            *self.grid, stream, *head, q_ptr, k.data_ptr(), v.data_ptr(), o, part, lse,
            q_ptr if lens is None else lens.data_ptr(), *self.tail,
        )  # fmt: skip
        if self.combine is not None:
            (call, head), grid, tail = self.combine
            call(*grid, stream, *head, part, lse, o, *tail)
        return out


# ----------------------------------------------------------------------------------------
# The serving call: per-row cache lengths, bottom-right causal
# ----------------------------------------------------------------------------------------


def _check_lens(lens: object, q: torch.Tensor) -> torch.Tensor:
    if not isinstance(lens, torch.Tensor):
        raise ValueError(f"cache_seqlens must be a torch.Tensor, got {type(lens).__name__}")
    if lens.dtype != torch.int32:
        raise ValueError(f"cache_seqlens must be int32, got {lens.dtype}")
    if lens.shape != (q.shape[0],):
        raise ValueError(
            f"cache_seqlens has shape {tuple(lens.shape)}; expected (batch,) = ({q.shape[0]},)"
        )
    if lens.device != q.device:
        raise ValueError(f"cache_seqlens is on {lens.device} but q is on {q.device}")
    return lens if lens.stride(0) == 1 else lens.contiguous()


_PLANS: dict[tuple[object, ...], _Plan] = {}


def flash_decode_fwd(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool = False,
    causal_align: CausalAlign = "top-left",
    cache_seqlens: torch.Tensor | None = None,
    scale: float | None = None,
    out: torch.Tensor | None = None,
    num_splits: int | None = None,
) -> torch.Tensor:
    """Attention forward with the split-KV kernel, at any seq_q (fast for the few queries
    of a decode step: ``flash_plan.DECODE_MAX_SEQ_Q``).

    Arguments as the entry point's (``kernels.flash_attention.flash_attention_fwd``), plus:

    Args:
        causal_align: "top-left" (as SDPA) or "bottom-right" (as decoding needs): see
            the module docstring.
        cache_seqlens: int32 (batch,) on q's device: row b attends its first
            cache_seqlens[b] keys (values are clamped to [0, seq_k]).
        num_splits: splits of the keys (default: from the SM count and the work).

    Raises:
        ValueError: naming the argument that is wrong.
    """
    if causal_align not in ALIGNS:
        raise ValueError(f"causal_align must be one of {ALIGNS}, got {causal_align!r}")
    if num_splits is not None and (
        isinstance(num_splits, bool) or not isinstance(num_splits, int) or num_splits < 1
    ):
        raise ValueError(f"num_splits must be a positive int or None, got {num_splits!r}")
    key = plan_key(q, k, v, causal, scale, out)
    if cache_seqlens is not None and key is not None:
        if type(cache_seqlens) is not torch.Tensor:
            key = None
        else:
            key = (*key, cache_seqlens.shape, cache_seqlens.stride(), cache_seqlens.dtype,
                   cache_seqlens.get_device(), cache_seqlens.data_ptr() % 16)  # fmt: skip
    if key is not None:
        key = (*key, cache_seqlens is None, causal_align, num_splits)
        plan = _PLANS.get(key)
        if plan is not None:
            return plan(q, k, v, out, cache_seqlens)
    unit = key is not None and q.stride(-1) == 1 and k.stride(-1) == 1 and v.stride(-1) == 1
    q, k, v, out, scale = prepare(q, k, v, causal, scale, out)
    lens = None if cache_seqlens is None else _check_lens(cache_seqlens, q)
    if out.numel() == 0:
        return out
    if k.shape[2] == 0:
        return out.zero_()
    config = flash_plan.decode_choice(q.shape[-1], interpret=_INTERPRET).config
    plan = launch(
        q, k, v, out, scale, config, lens=lens, causal=causal,
        bottom_right=causal_align == "bottom-right", splits=num_splits,
    )  # fmt: skip
    if plan is not None and unit and key is not None and lens is cache_seqlens:
        if len(_PLANS) >= 4096:
            _PLANS.clear()
        _PLANS[key] = plan
    return out
