"""The judge's own attention: the float32/float64 reference and the yardstick's SDPA.

Both belong to the guard, not to the tree it measures: a pull request that edits
``kernels/reference.py`` or ``kernels/sdpa.py`` changes a kernel, never what its
output is compared with.

The yardstick (SDPA in the input's dtype, whose own error sizes the tolerance) runs on
torch's flash backend where it can (fp16/bf16 on a GPU), else efficient, else math:
the flash backend needs no per-shape plan, where cuDNN builds one for every new shape
in every fresh process (0.1-0.6 s a shape on an H200), a cost each timing round's
check of its timed output would pay again.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

YARDSTICK_BACKENDS = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


def yardstick_sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    """torch SDPA in the inputs' dtype (top-left causal, as the kernels' is)."""
    with sdpa_kernel(YARDSTICK_BACKENDS):
        return F.scaled_dot_product_attention(
            q, k, v, is_causal=causal, enable_gqa=q.shape[1] != k.shape[1]
        )


def attention_reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool,
    dtype: torch.dtype,
    rows: torch.Tensor | None = None,
) -> torch.Tensor:
    """softmax(Q K^T / sqrt(d)) V in ``dtype``; rows that see no key give zeros.

    ``rows``: the sequence positions of q's rows when q holds a sample of them (every
    key is used). Grouped-query heads share their key/value head by a reshape, so the
    keys and values are not copied per query head."""
    batch, heads, seq_q, dim = q.shape
    kv_heads, seq_k = k.shape[1], k.shape[2]
    group = heads // kv_heads
    qf = q.to(dtype).reshape(batch, kv_heads, group * seq_q, dim)
    scores = torch.matmul(qf, k.to(dtype).transpose(-2, -1)) / math.sqrt(dim)
    scores = scores.view(batch, kv_heads, group, seq_q, seq_k)
    if causal:
        # Top-left aligned (torch SDPA's is_causal): query i sees keys j <= i.
        i = torch.arange(seq_q, device=q.device) if rows is None else rows.to(q.device)
        seen = torch.arange(seq_k, device=q.device)[None, :] <= i[:, None]
        scores = scores.masked_fill(~seen, float("-inf"))
    probs = torch.nan_to_num(torch.softmax(scores, dim=-1), nan=0.0)
    probs = probs.view(batch, kv_heads, group * seq_q, seq_k)
    out = torch.matmul(probs, v.to(dtype))
    return out.view(batch, heads, seq_q, dim)
