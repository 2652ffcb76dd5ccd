"""The shared correctness rules (tests/attention_checks.py) can fail: on CPU tensors."""

from __future__ import annotations

import pytest
import torch
from attention_checks import Yardstick, assert_matches


@pytest.fixture
def inputs() -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(7)
    return tuple(torch.randn(1, 2, 64, 64, generator=gen).to(torch.bfloat16) for _ in range(3))


def test_the_reference_rounded_to_the_dtype_passes(inputs):
    q, k, v = inputs
    yardstick = Yardstick.of(q, k, v, causal=True)
    out = yardstick.ref.to(q.dtype)
    yardstick.assert_rel(out)
    yardstick.assert_max(out)
    assert_matches(out, q, k, v, causal=True)


def test_one_wrong_element_fails_the_worst_element_rule(inputs):
    q, k, v = inputs
    yardstick = Yardstick.of(q, k, v, causal=False)
    out = yardstick.ref.to(q.dtype)
    out[0, 1, 10, 3] += 0.5
    with pytest.raises(AssertionError, match="max err"):
        yardstick.assert_max(out)


def test_a_wrong_output_or_a_nan_fails_the_norm_rule(inputs):
    q, k, v = inputs
    yardstick = Yardstick.of(q, k, v, causal=False)
    with pytest.raises(AssertionError, match="rel err"):
        yardstick.assert_rel(torch.flip(yardstick.ref, dims=[2]).to(q.dtype))
    out = yardstick.ref.to(q.dtype)
    out[0, 0, 0, 0] = float("nan")
    with pytest.raises(AssertionError, match="NaN"):
        yardstick.assert_rel(out)
