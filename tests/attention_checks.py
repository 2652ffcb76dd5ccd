"""The correctness rules the attention-kernel tests share.

A kernel's error against a float32 reference may be at most twice the error of torch
SDPA run in the same dtype on the same inputs, plus a floor: by relative norm (floor:
one machine epsilon of the dtype; why: tests/test_triton_flash.py's docstring) and by
the worst element (floor: one epsilon at the output's largest magnitude, what the
rounding of the final store alone can cost).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kernels.reference import attention_reference
from kernels.sdpa import sdpa_default


def rel_err(x: torch.Tensor, ref: torch.Tensor) -> float:
    return ((x.float() - ref).norm() / ref.norm()).item()


def max_err(x: torch.Tensor, ref: torch.Tensor) -> float:
    return (x.float() - ref).abs().max().item()


@dataclass(frozen=True)
class Yardstick:
    """The float32 reference of one set of inputs and the bounds SDPA's own errors set;
    built once, it checks any number of outputs of those inputs."""

    q: torch.Tensor
    ref: torch.Tensor
    rel_bound: float
    max_bound: float

    @classmethod
    def of(
        cls,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        *,
        causal: bool,
        scale: float | None = None,
    ) -> Yardstick:
        ref = attention_reference(q, k, v, causal=causal, scale=scale, dtype=torch.float32)
        sdpa = sdpa_default(q, k, v, causal=causal, scale=scale)
        eps = torch.finfo(q.dtype).eps
        return cls(
            q=q,
            ref=ref,
            rel_bound=2 * rel_err(sdpa, ref) + eps,
            max_bound=2 * max_err(sdpa, ref) + eps * max(ref.abs().max().item(), 1.0),
        )

    def _assert_output(self, out: torch.Tensor) -> None:
        q = self.q
        assert out.shape == q.shape and out.dtype == q.dtype and out.device == q.device
        assert torch.isfinite(out).all(), "kernel output has NaN/inf"

    def assert_rel(self, out: torch.Tensor, note: str = "") -> None:
        self._assert_output(out)
        err = rel_err(out, self.ref)
        assert err <= self.rel_bound, f"rel err {err:.3e} > bound {self.rel_bound:.3e} {note}"

    def assert_max(self, out: torch.Tensor, note: str = "") -> None:
        # A wrong tile or row can stay local: the worst element, not only the norm.
        self._assert_output(out)
        err = max_err(out, self.ref)
        assert err <= self.max_bound, f"max err {err:.3e} > bound {self.max_bound:.3e} {note}"


def assert_matches(
    out: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool,
    scale: float | None = None,
) -> None:
    """The relative-norm rule for one output (a yardstick checks more outputs)."""
    Yardstick.of(q, k, v, causal=causal, scale=scale).assert_rel(out)
