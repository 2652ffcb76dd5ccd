"""Chunked attention with an online softmax, in plain torch.

The keys and values are read in blocks of ``BLOCK`` rows; each query row keeps a
running maximum ``m``, a running sum ``l`` of exponentials and an accumulator, rescaled
whenever a later block raises the maximum (FlashAttention's recurrence, without a
custom kernel). Works on the CPU and on a GPU; float32 accumulation for every dtype.
"""

from __future__ import annotations

import math

import torch

BLOCK = 64  # key rows per step


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool = False,
    scale: float | None = None,
) -> torch.Tensor:
    """softmax(q k^T * scale) v over (batch, heads, seq, head_dim) tensors.

    ``k`` and ``v`` may have fewer heads than ``q`` (grouped-query attention: the
    query heads divide evenly among them). ``causal``: query row i sees key rows
    0..i (top-left aligned, as torch's scaled_dot_product_attention). ``scale``
    defaults to 1/sqrt(head_dim).
    """
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError("q, k and v must be (batch, heads, seq, head_dim)")
    heads, kv_heads = q.shape[1], k.shape[1]
    if heads % kv_heads:
        raise ValueError(f"k has {kv_heads} heads, which do not divide q's {heads}")
    if kv_heads != heads:
        k = k.repeat_interleave(heads // kv_heads, dim=1)
        v = v.repeat_interleave(heads // kv_heads, dim=1)
    seq_q, seq_k = q.shape[2], k.shape[2]
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale

    qf = q.float() * scale
    m = torch.full((*q.shape[:3], 1), -math.inf, device=q.device)
    l = torch.zeros_like(m)
    acc = torch.zeros(*q.shape[:3], v.shape[-1], device=q.device)
    rows = torch.arange(seq_q, device=q.device)[:, None]
    for start in range(0, seq_k, BLOCK):
        if causal and start > seq_q - 1:
            break  # every later key lies right of every query row
        kb = k[:, :, start : start + BLOCK].float()
        vb = v[:, :, start : start + BLOCK].float()
        s = qf @ kb.transpose(-1, -2)
        if causal:
            cols = torch.arange(start, start + kb.shape[2], device=q.device)[None, :]
            s = s.masked_fill(cols > rows, -math.inf)
        m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
        safe = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
        p = torch.exp(s - safe)
        alpha = torch.exp(m - safe)
        l = l * alpha + p.sum(dim=-1, keepdim=True)
        acc = acc * alpha + p @ vb
        m = m_new
    return (acc / l).to(q.dtype)
