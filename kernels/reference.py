"""Plain-torch attention: the readable definition every other kernel must match.

``attention`` runs in the input dtype (matmul, softmax in float32, matmul), the way a
user without a fused kernel would write it. ``attention_reference`` upcasts to
float32 or float64 and is the yardstick for correctness checks.
"""

from __future__ import annotations

import math

import torch


def _causal_mask(
    seq_q: int, seq_k: int, device: torch.device, rows: torch.Tensor | None = None
) -> torch.Tensor:
    # Top-left aligned, as torch SDPA's is_causal is (flash-attn aligns bottom-right):
    # query i sees keys j <= i, whatever seq_q and seq_k are. ``rows``: the positions of
    # the queries given (a sample of a long sequence's rows), else 0..seq_q-1.
    i = (torch.arange(seq_q, device=device) if rows is None else rows.to(device))[:, None]
    j = torch.arange(seq_k, device=device)[None, :]
    return j <= i


def _expand_kv(q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
    """Repeat key/value heads for grouped-query attention."""
    hq, hkv = q.shape[1], kv.shape[1]
    if hq == hkv:
        return kv
    return kv.repeat_interleave(hq // hkv, dim=1)


def attention_scores(
    q: torch.Tensor,
    k: torch.Tensor,
    *,
    causal: bool = False,
    scale: float | None = None,
    dtype: torch.dtype = torch.float32,
    rows: torch.Tensor | None = None,
) -> torch.Tensor:
    """Q K^T * scale computed in ``dtype``, keys a query may not see at -inf; ``rows``:
    the sequence positions of q's rows when q holds a sample of them."""
    qf, kf = q.to(dtype), k.to(dtype)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = torch.matmul(qf, _expand_kv(qf, kf).transpose(-2, -1)) * scale
    if causal:
        mask = _causal_mask(q.shape[-2], k.shape[-2], q.device, rows)
        scores = scores.masked_fill(~mask, float("-inf"))
    return scores


def attention_reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool = False,
    scale: float | None = None,
    dtype: torch.dtype = torch.float32,
    rows: torch.Tensor | None = None,
) -> torch.Tensor:
    """softmax(Q K^T * scale) V computed in ``dtype``; fully masked rows give zeros.
    ``rows``: q holds only these query positions of the sequence (every key is used)."""
    scores = attention_scores(q, k, causal=causal, scale=scale, dtype=dtype, rows=rows)
    probs = torch.softmax(scores, dim=-1)
    probs = torch.nan_to_num(probs, nan=0.0)  # rows with every key masked
    return torch.matmul(probs, _expand_kv(q, v.to(dtype)))


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool = False,
    scale: float | None = None,
) -> torch.Tensor:
    """Attention in the input's dtype: the unfused baseline a user would write."""
    kf, vf = _expand_kv(q, k), _expand_kv(q, v)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = torch.matmul(q, kf.transpose(-2, -1)).float() * scale
    if causal:
        mask = _causal_mask(q.shape[-2], k.shape[-2], q.device)
        scores = scores.masked_fill(~mask, float("-inf"))
    probs = torch.nan_to_num(torch.softmax(scores, dim=-1), nan=0.0).to(q.dtype)
    return torch.matmul(probs, vf)
