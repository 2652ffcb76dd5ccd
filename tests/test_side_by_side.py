"""benchmarks/side_by_side.py's checks before timing: outputs in either layout compared
with a reference of every query row or of a sample of them, wrong arms refused, and the
tuning-build arm's refusal off the GPU (no GPU needed)."""

from __future__ import annotations

import sys

import pytest
import torch
from conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import side_by_side  # benchmarks/ is not a package

from kernels.reference import attention_reference

SHAPE = (2, 4, 2, 96, 96, 64, True, "float32")  # B, Hq, Hkv, Sq, Sk, D, causal, dtype


def _inputs() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    q = torch.randn(2, 4, 96, 64)
    k, v = torch.randn(2, 2, 96, 64), torch.randn(2, 2, 96, 64)
    return q, k, v


def _arms(monkeypatch: pytest.MonkeyPatch, q, k, v) -> None:
    exact = attention_reference(q, k, v, causal=True)
    calls = {
        "bhsd": lambda: exact.clone(),  # ours: (B, H, S, D)
        "bshd": lambda: exact.transpose(1, 2).contiguous(),  # FA3's layout
        "off": lambda: exact + 0.5,
        # One NaN in a row no sampled reference covers (batch row 1): refused all the same.
        "nan": lambda: exact.index_put(
            (torch.tensor([1]), torch.tensor([2]), torch.tensor([40]), torch.tensor([7])),
            torch.tensor(float("nan")),
        ),
    }
    monkeypatch.setattr(side_by_side, "arm", lambda name, *_: calls[name])


@pytest.mark.parametrize("sampled", [False, True])
def test_both_layouts_pass_and_wrong_outputs_are_refused(
    monkeypatch: pytest.MonkeyPatch, sampled: bool
) -> None:
    q, k, v = _inputs()
    _arms(monkeypatch, q, k, v)
    if sampled:  # the first batch row at a few query positions, the last included
        sample = torch.linspace(0, 95, 7).long()
        ref = attention_reference(q[:1, :, sample], k[:1], v[:1], causal=True, rows=sample)
    else:
        sample, ref = None, attention_reference(q, k, v, causal=True)
    names = ["bhsd", "bshd", "off", "nan"]
    fns, rows = side_by_side.checked_arms(SHAPE, names, q, k, v, ref, sample)
    assert sorted(fns) == ["bhsd", "bshd"]
    assert rows["bhsd"]["rel_err"] < 1e-6 and rows["bshd"]["rel_err"] < 1e-6
    assert rows["off"]["refused"].startswith("wrong")
    assert rows["nan"]["refused"] == "wrong: NaN or inf in the output"


def test_a_sampled_reference_is_the_full_one_at_those_rows() -> None:
    q, k, v = _inputs()
    sample = torch.tensor([0, 5, 50, 95])
    full = attention_reference(q, k, v, causal=True)
    ref = attention_reference(q[:1, :, sample], k[:1], v[:1], causal=True, rows=sample)
    torch.testing.assert_close(ref, full[:1, :, sample])


def test_a_tuning_build_arm_runs_where_the_kernel_can() -> None:
    from kernels import cuda_flash

    q, k, v = _inputs()
    made = side_by_side.arm("cuda_flash:-DFLASH_SM90_D64_CAUSAL_LONG_Q=0", q, k, v, True)
    reason = cuda_flash.unavailable_reason()
    if reason:  # refused with the kernel's own reason
        assert made == reason
        return
    assert callable(made)
    with pytest.raises(ValueError, match=r"cuda|CUDA|device"):  # CPU tensors: checked first
        made()


def test_the_d64_causal_set_spans_the_192_row_switch() -> None:
    from kernels import cuda_flash, cuda_flash_plan

    header = cuda_flash.HOPPER_KERNEL_HEADER.read_text()
    long_q = cuda_flash_plan.header_macros(header)["FLASH_SM90_D64_CAUSAL_LONG_Q"]
    lengths = [shape[3] for shape in side_by_side.SETS["d64-causal"]]
    assert min(lengths) < long_q <= max(lengths)


def test_the_d64_full_set_runs_every_last_block_width_of_the_192_key_tiles() -> None:
    from kernels import cuda_flash, cuda_flash_plan

    header = cuda_flash.HOPPER_KERNEL_HEADER.read_text()
    widths = set()
    for _, _, _, seq_q, seq_k, head_dim, causal, _ in side_by_side.SETS["d64-full"]:
        _, block_n, _ = cuda_flash_plan.hopper_tile(header, head_dim, causal, seq_q, seq_k)
        assert (head_dim, causal, block_n) == (64, False, 192), (seq_q, seq_k)
        widths.add(cuda_flash_plan.hopper_last_keys(header, causal, seq_k, block_n))
    assert widths == {64, 128, 192}
