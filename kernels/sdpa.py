"""Adapters for torch's scaled_dot_product_attention: the default choice and each backend.

Pinning one backend uses ``torch.nn.attention.sdpa_kernel``; when that backend cannot
run the inputs torch raises, and the guard reports the case as failed, not slower.
"""

from __future__ import annotations

import functools
from typing import Protocol

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

_BACKENDS = {
    "flash": SDPBackend.FLASH_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "math": SDPBackend.MATH,
}


class SdpaFn(Protocol):
    """The registry's kernel signature, as every adapter here takes it."""

    def __call__(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        *,
        causal: bool = False,
        scale: float | None = None,
    ) -> torch.Tensor: ...


def _call(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float | None
) -> torch.Tensor:
    gqa = q.shape[1] != k.shape[1]
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale, enable_gqa=gqa)


def sdpa_default(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool = False,
    scale: float | None = None,
) -> torch.Tensor:
    """torch SDPA with torch's own backend choice (cuDNN on Hopper with torch >= 2.5)."""
    return _call(q, k, v, causal, scale)


def _pinned(backend: str) -> SdpaFn:
    def fn(
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        *,
        causal: bool = False,
        scale: float | None = None,
    ) -> torch.Tensor:
        if backend == "efficient" and q.shape[1] != k.shape[1]:
            # The memory-efficient backend takes no enable_gqa ("No available kernel"):
            # its KV heads repeated first, as a user of it would (the copy is timed too).
            group = q.shape[1] // k.shape[1]
            k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
        with sdpa_kernel([_BACKENDS[backend]]):
            return _call(q, k, v, causal, scale)

    fn.__name__ = f"sdpa_{backend}"
    fn.__doc__ = f"torch SDPA restricted to the {backend} backend."
    return fn


sdpa_flash = _pinned("flash")
sdpa_efficient = _pinned("efficient")
sdpa_cudnn = _pinned("cudnn")


@functools.cache
def backend_unavailable_reason(backend: str) -> str | None:
    """Why ``backend`` cannot run here, or None. Tries a tiny fp16 call once."""
    if not torch.cuda.is_available():
        return "torch sees no CUDA GPU"
    q = torch.randn(1, 1, 64, 64, device="cuda", dtype=torch.float16)
    try:
        _pinned(backend)(q, q, q)
        torch.cuda.synchronize()
    except RuntimeError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return f"torch SDPA {backend} backend unavailable: {first}"
    return None
