"""The FlashAttention forward users call: ``flash_attention_fwd`` picks the kernel.

Registry name ``flash_attention``. Each call goes through ``kernels.flash_plan.choose``
(``kernel="auto"``):

- a decode step (at most 16 queries against many keys, not causal), or any call with
  ``cache_seqlens`` or a bottom-right causal mask: the split-KV kernel
  (``kernels/triton_decode.py``);
- on sm_90, where the GPU model's dispatch table (``kernels/dispatch/``, measured on a
  grid: ``kernels/dispatch_table.py``) names it for the nearest measured shape, or, on a
  GPU model without a table, where ``flash_plan.FASTER`` and ``FASTER_FROM`` list it as
  measured faster (head_dim 128 from 960 x 960 query-key pairs): the Gluon kernel
  (``kernels/gluon_flash_fwd.py``, registry name ``gluon_flash``; ``ATTN_GLUON=0``, or a
  triton without Gluon, turns that off);
- every other call: the Triton kernel (``kernels/triton_flash.py``, registry name
  ``triton_flash``: the portable pointer path, or its TMA warp-specialized path on sm_90).

``kernels.triton_flash_fwd``, this module's former name, stays an alias of it.

Inputs, limits and causal alignment: those of ``kernels.triton_flash.flash_attention_fwd``
(the Gluon kernel takes a subset of them and is chosen only within it).
"""

from __future__ import annotations

import dataclasses
import functools
from types import ModuleType

import torch

from kernels import flash_launch, triton_decode, triton_flash
from kernels.flash_launch import LaunchPlan
from kernels.flash_plan import Choice, Env

__all__ = ["flash_attention_fwd"]


@functools.cache
def _gluon_module() -> ModuleType | None:
    """kernels.gluon_flash_fwd, or None where Gluon cannot be imported."""
    try:
        from kernels import gluon_flash_fwd
    except ImportError:
        return None
    return gluon_flash_fwd


def _env(env: Env) -> Env:
    return env if _gluon_module() is not None else dataclasses.replace(env, gluon=False)


def _launch(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    causal: bool,
    scale: float,
    choice: Choice,
) -> LaunchPlan | None:
    if choice.kernel == "gluon":
        gluon = _gluon_module()
        assert gluon is not None  # _env turns the Gluon kernel off otherwise
        plan: LaunchPlan | None = gluon.launch_choice(q, k, v, out, causal, scale, choice)
        return plan
    return triton_flash.launch_choice(q, k, v, out, causal, scale, choice)


_ENTRY = flash_launch.Entry("auto", _launch, _env)


def flash_attention_fwd(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool = False,
    scale: float | None = None,
    out: torch.Tensor | None = None,
    cache_seqlens: torch.Tensor | None = None,
    causal_align: triton_decode.CausalAlign = "top-left",
) -> torch.Tensor:
    """Attention forward, ``softmax(q @ k^T * scale) @ v``, like torch SDPA, with the
    kernel ``flash_plan.choose`` picks (the module docstring says which).

    Args:
        q: (batch, heads_q, seq_q, head_dim), float16 or bfloat16, on CUDA (or on the
            CPU under ``TRITON_INTERPRET=1``).
        k, v: (batch, heads_kv, seq_k, head_dim), q's dtype and device; heads_kv must
            divide heads_q (grouped-query attention).
        causal: mask keys after the query, TOP-LEFT aligned like SDPA's
            ``is_causal=True`` by default: query i sees keys j <= i even when
            seq_q != seq_k.
        scale: multiplies q @ k^T; default 1 / sqrt(head_dim); must be positive.
        out: optional buffer shaped and typed like q, written and returned.
        cache_seqlens: int32 (batch,) on q's device: row b attends only its first
            cache_seqlens[b] keys (a KV cache filled to different lengths; a row of
            length 0 gives 0).
        causal_align: "bottom-right" aligns the causal mask to the end of each row's
            keys, as decoding needs: query i sees keys j <= i + length - seq_q.
        With either of the last two the split-KV kernel runs (``kernels/triton_decode.py``,
        at any seq_q; fast for a decode step's few queries).

    Returns:
        (batch, heads_q, seq_q, head_dim) in q's dtype.

    Raises:
        ValueError: naming the argument that is wrong (dtype, device, shape, head_dim,
            head counts, scale, out).

    The first call of each (shapes, strides, dtypes, devices, alignments, causal, scale,
    out, switches) key validates, chooses and compiles; later calls of that key reuse
    its launch plan (``kernels.flash_launch.Entry``).
    """
    if cache_seqlens is not None or causal_align != "top-left":
        return triton_decode.flash_decode_fwd(
            q, k, v, causal=causal, causal_align=causal_align, cache_seqlens=cache_seqlens,
            scale=scale, out=out,
        )  # fmt: skip
    return _ENTRY(q, k, v, causal, scale, out)
