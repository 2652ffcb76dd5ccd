"""FlashAttention-2 forward in Triton: softmax(Q K^T * scale) V without materialising S.

Registry name ``triton_flash``: ``flash_attention_fwd`` here runs this file's Triton
kernel on every GPU and every shape, never the Gluon kernel (for the entry point that
picks between the two, see ``kernels/flash_attention.py``).

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
calls stay on the pointer path. Only with ``ATTN_TRITON_WS=1``: with other processes
on the GPU the branch left NaN in most calls (``flash_plan.WS_ENV``).

Decode. Non-causal calls of at most ``flash_plan.DECODE_MAX_SEQ_Q`` queries against at
least ``flash_plan.DECODE_MIN_SEQ_K`` keys take the split-KV kernel instead
(``kernels/triton_decode.py``): the query heads of a KV head packed into one row block,
the keys split across programs, the splits merged by their log-sum-exps.

Launch. ``kernels.flash_plan.choose`` (asked for ``kernel="triton"``) picks the path
and config; ``kernels.flash_launch.Entry`` keeps each key's launch (``_Plan``: the
compiled kernel's launcher, grid and scalar arguments) for later calls of that key.

Configs (``kernels/flash_plan.py``). By default the launcher uses
``PINNED[(arch, head_dim, causal)]``; with ``ATTN_TRITON_AUTOTUNE=1`` it autotunes over
``CONFIGS`` (pruned to what fits the device's shared memory), keyed on head_dim, causal,
dtype and a power-of-two bucket of the sequence length. Under ``TRITON_INTERPRET=1``
one small config is used.

Credits: Tri Dao, "FlashAttention-2: Faster Attention with Better Parallelism and Work
Partitioning" (2023); the Triton fused-attention tutorial (06-fused-attention.py,
Philippe Tillet and the Triton authors), whose causal STAGE split this file follows.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
import triton
import triton.language as tl
from triton.runtime.errors import OutOfResources

from kernels import flash_launch, flash_plan, triton_decode
from kernels.flash_launch import INTERPRET as _INTERPRET
from kernels.flash_launch import SUPPORTED_HEAD_DIMS, PlanBase, Scalars, prepare, smem_budget
from kernels.flash_plan import (
    AUTOTUNE,
    CONFIGS,
    FALLBACK_CONFIG,
    INTERPRET_CONFIG,
    PINNED,
    POINTER,
    SPLIT_KV,
    TMA_WS,
    WS_MIN_SEQ_K,
    WS_PINNED,
    Choice,
    smem_bytes,
)

__all__ = [
    "CONFIGS",
    "INTERPRET_CONFIG",
    "PINNED",
    "SUPPORTED_HEAD_DIMS",
    "WS_MIN_SEQ_K",
    "WS_PINNED",
    "flash_attention_fwd",
    "flash_attention_fwd_config",
    "pinned_config",
    "prune_configs",
    "smem_bytes",
]


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
# Configs on a device
# ----------------------------------------------------------------------------------------


def prune_configs(
    configs: list[triton.Config], named_args: Mapping[str, Any], **kwargs: Any
) -> list[triton.Config]:
    """Autotune ``early_config_prune``: drop configs whose tiles exceed shared memory.

    Reads only the tensor ``Q`` from ``named_args`` (older Triton passes no kwargs).
    Never returns an empty list: the smallest config survives as a last resort.
    """
    q = named_args["Q"]
    head_dim = q.shape[-1]
    budget = smem_budget(q.device)
    kept = [c for c in configs if smem_bytes(c, head_dim, q.element_size()) <= budget]
    if kept:
        return kept
    return [min(configs, key=lambda c: smem_bytes(c, head_dim, q.element_size()))]


def pinned_config(
    device: torch.device, head_dim: int, causal: bool, elem_size: int = 2
) -> triton.Config:
    """The pointer path's config without autotuning on ``device`` (``flash_plan.pinned``)."""
    if _INTERPRET:
        return INTERPRET_CONFIG
    capability = flash_launch.capability(device)
    assert capability is not None, "pinned_config needs a CUDA device"
    return flash_plan.pinned(capability, head_dim, causal, elem_size, smem_budget(device))[0]


_attn_fwd_autotuned = triton.autotune(
    configs=CONFIGS,
    key=["HEAD_DIM", "CAUSAL", "SEQ_BUCKET"],  # the dtype joins the key by itself
    prune_configs_by={"early_config_prune": prune_configs},
)(_attn_fwd)


# ----------------------------------------------------------------------------------------
# Launcher
# ----------------------------------------------------------------------------------------


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

    ``ws`` takes the TMA + warp-specialized path; the caller checks that it may
    (``flash_plan.choose``, ``flash_attention_fwd_config``).
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


class _Plan(PlanBase):
    """One launch of a compiled kernel, repeatable on new tensors of the same key."""

    __slots__ = ("call",)
    call: Callable[..., object]  # the compiled kernel's launcher

    @classmethod
    def make(
        cls, kernel: Any, grid: tuple[int, ...], tail: Scalars, q: torch.Tensor
    ) -> _Plan | None:  # kernel: triton's CompiledKernel
        if not flash_launch.plans_possible():
            return None
        plan = cls()
        launcher = kernel.run  # loads the module on the first use
        scratch = getattr(launcher, "global_scratch_size", 1) or getattr(
            launcher, "profile_scratch_size", 1
        )
        if not scratch and hasattr(launcher, "launch"):
            # The C entry point itself: no scratch to allocate, no hooks to call.
            plan.call, plan.head = launcher.launch, flash_launch.c_entry_head(kernel, launcher)
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


def launch_choice(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    causal: bool,
    scale: float,
    choice: Choice,
) -> flash_launch.LaunchPlan | None:
    """Run a Triton ``choice`` of ``flash_plan.choose`` on prepared tensors."""
    if choice.path == SPLIT_KV:
        assert not causal, choice  # flash_plan.choose takes the split-KV kernel only so
        return triton_decode.launch(q, k, v, out, scale, choice.config)
    if choice.path == AUTOTUNE:
        return _launch(q, k, v, out, causal, scale, None)
    assert choice.config is not None, choice
    if choice.path != POINTER:  # TMA_WS, or the interpreter's one config
        return _launch(q, k, v, out, causal, scale, choice.config, ws=choice.path == TMA_WS)
    try:
        return _launch(q, k, v, out, causal, scale, choice.config)
    except OutOfResources:
        # The smem estimate was optimistic for this part: take the small config
        # rather than fail; tune_triton.py reports which pinned entry needs fixing.
        return _launch(q, k, v, out, causal, scale, FALLBACK_CONFIG)


_ENTRY = flash_launch.Entry("triton", launch_choice)


def flash_attention_fwd(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool = False,
    scale: float | None = None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Attention forward with the Triton kernel (registry name ``triton_flash``; never
    the Gluon kernel), on CUDA or on the CPU under ``TRITON_INTERPRET=1``.

    Same arguments, shapes, checks (``ValueError`` naming the argument), causal
    alignment (TOP-LEFT, as SDPA) and kept launch plans as the entry point users call,
    ``kernels.flash_attention.flash_attention_fwd``, whose docstring gives them.
    """
    return _ENTRY(q, k, v, causal, scale, out)


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
    q, k, v, out, scale = prepare(q, k, v, causal, scale, out)
    if warp_specialize:
        if causal or k.shape[2] == 0 or k.shape[2] % config.kwargs["BLOCK_N"]:
            raise ValueError(
                "warp_specialize needs causal=False and seq_k a positive multiple of BLOCK_N"
            )
        if not all(flash_launch.tma_aligned(t) for t in (q, k, v, out)):
            raise ValueError("warp_specialize needs 16-byte aligned rows (TMA)")
    if out.numel() > 0:
        _launch(q, k, v, out, causal, scale, config, ws=warp_specialize)
    return out
