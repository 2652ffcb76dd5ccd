"""The correctness rule the attention-kernel tests share.

The kernel's error against a float32 reference may be at most twice the error of torch
SDPA run in the same dtype on the same inputs, plus a floor of one machine epsilon of
the dtype (why the floor: tests/test_triton_flash.py's docstring).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kernels.reference import attention_reference


def rel_err(x: torch.Tensor, ref: torch.Tensor) -> float:
    return ((x.float() - ref).norm() / ref.norm()).item()


def assert_matches(
    out: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Kernel error <= 2 x (same-dtype SDPA error) + eps(dtype), both against float32;
    returns (the float32 reference, SDPA's output) for further checks."""
    assert out.shape == q.shape and out.dtype == q.dtype and out.device == q.device
    assert torch.isfinite(out).all(), "kernel output has NaN/inf"
    ref = attention_reference(q, k, v, causal=causal, scale=scale, dtype=torch.float32)
    yardstick = F.scaled_dot_product_attention(
        q, k, v, is_causal=causal, scale=scale, enable_gqa=q.shape[1] != k.shape[1]
    )
    err, base = rel_err(out, ref), rel_err(yardstick, ref)
    bound = 2 * base + torch.finfo(q.dtype).eps
    assert err <= bound, f"rel err {err:.3e} > bound {bound:.3e} (sdpa {base:.3e})"
    return ref, yardstick
