"""Correctness of the split-KV decode kernel (kernels/triton_decode.py) and of the paths
that take it: the Triton kernel (``triton_flash``) and the entry point users call, with
per-row cache lengths and a bottom-right causal mask.

Without a GPU the kernels run under the Triton interpreter on small shapes; with a GPU
the same tests run compiled, and the ``gpu`` tests add the decode shapes of serving.
Every output is checked against a float32 reference of the same mask: by relative norm
and by the worst element, at most twice the error of torch SDPA in the same dtype with
the same mask, plus one epsilon (tests/attention_checks.py says why). Rows that see no
key must come out exactly 0.
"""

from __future__ import annotations

import math

from triton_interpreter import DEVICE, runnable  # before anything imports triton

# isort: split

import pytest
import torch

pytest.importorskip("triton")

from attention_checks import max_err, rel_err
from conftest import KERNEL_SEED

from kernels import flash_attention as entry
from kernels import flash_launch, flash_plan
from kernels import triton_decode as td
from kernels import triton_flash as tf

pytestmark = runnable(flash_launch.INTERPRET)
gpu = pytest.mark.gpu
DTYPES = [torch.float16, torch.bfloat16]


def _qkv(batch, heads_q, heads_kv, seq_q, seq_k, head_dim, dtype, seed=0):
    gen = torch.Generator().manual_seed(seed + KERNEL_SEED)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen).to(DEVICE, dtype)

    return (
        randn(batch, heads_q, seq_q, head_dim),
        randn(batch, heads_kv, seq_k, head_dim),
        randn(batch, heads_kv, seq_k, head_dim),
    )


def _keep(q, k, causal, align, lens):
    """(batch, 1, seq_q, seq_k) bool: which keys each query sees."""
    batch, _, seq_q, _ = q.shape
    seq_k = k.shape[2]
    length = (
        torch.full((batch,), seq_k, device=q.device)
        if lens is None
        else lens.long().clamp(0, seq_k)
    )
    cols = torch.arange(seq_k, device=q.device)
    keep = cols[None, None, :] < length[:, None, None]
    if causal:
        rows = torch.arange(seq_q, device=q.device)
        shift = length - seq_q if align == "bottom-right" else torch.zeros_like(length)
        keep = keep & (cols[None, None, :] <= rows[None, :, None] + shift[:, None, None])
    return keep.expand(batch, seq_q, seq_k)[:, None]


def _attend(q, k, v, keep, dtype):
    group = q.shape[1] // k.shape[1]
    k = k.to(dtype).repeat_interleave(group, 1)
    v = v.to(dtype).repeat_interleave(group, 1)
    scores = (q.to(dtype) @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    probs = torch.softmax(scores.masked_fill(~keep, float("-inf")), -1)
    return (probs.nan_to_num(0.0) @ v).float()


def assert_decode_matches(out, q, k, v, *, causal=False, align="top-left", lens=None):
    """out against the float32 reference of the same mask; rows with no key exactly 0."""
    assert out.shape == q.shape and out.dtype == q.dtype
    assert torch.isfinite(out).all(), "output has NaN/inf"
    keep = _keep(q, k, causal, align, lens)
    seen = keep.any(-1).expand(-1, q.shape[1], -1)  # (batch, heads_q, seq_q)
    assert (out[~seen] == 0).all(), "a row that sees no key is not 0"
    if not seen.any():
        return
    ref = _attend(q, k, v, keep, torch.float32)[seen]
    same_dtype = _attend(q, k, v, keep, q.dtype)[seen]  # what the dtype alone costs
    eps = torch.finfo(q.dtype).eps
    got = out[seen]
    rel_bound = 2 * rel_err(same_dtype, ref) + eps
    max_bound = 2 * max_err(same_dtype, ref) + eps * max(ref.abs().max().item(), 1.0)
    assert rel_err(got, ref) <= rel_bound, (rel_err(got, ref), rel_bound)
    assert max_err(got, ref) <= max_bound, (max_err(got, ref), max_bound)


# ----------------------------------------------------------------------------------------
# Splits, packing, lengths, masks (small shapes: the interpreter on the CPU)
# ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
@pytest.mark.parametrize("splits", [1, 2, 7, 100], ids=lambda s: f"splits{s}")
@pytest.mark.parametrize("heads", [(4, 4), (8, 2), (6, 1)], ids=lambda h: f"hq{h[0]}-hkv{h[1]}")
def test_splits_and_gqa_packing(dtype, splits, heads):
    # 100 splits: more than the key tiles (clamped to them, none left empty).
    q, k, v = _qkv(2, heads[0], heads[1], 3, 75, 64, dtype, seed=splits)
    out = td.flash_decode_fwd(q, k, v, num_splits=splits)
    assert_decode_matches(out, q, k, v)


@pytest.mark.parametrize("head_dim", [32, 64, 96, 128])
def test_head_dims(head_dim):
    # 96 is padded to a 128-wide tile with masked columns.
    q, k, v = _qkv(1, 4, 2, 2, 40, head_dim, torch.float16, seed=head_dim)
    assert_decode_matches(td.flash_decode_fwd(q, k, v, num_splits=3), q, k, v)


def test_packed_rows_beyond_one_block():
    # 8 query heads x 5 positions of one KV head: 40 packed rows, more than one row block.
    q, k, v = _qkv(2, 8, 1, 5, 50, 64, torch.float16, seed=5)
    assert_decode_matches(td.flash_decode_fwd(q, k, v, num_splits=2), q, k, v)


@pytest.mark.parametrize("splits", [1, 4])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
def test_cache_seqlens_each_row_its_own_length(dtype, splits):
    # Every row a different length: a full cache, one past it (clamped), 0, a ragged one.
    q, k, v = _qkv(4, 8, 2, 1, 70, 64, dtype, seed=11)
    lens = torch.tensor([70, 99, 0, 33], dtype=torch.int32, device=DEVICE)
    out = td.flash_decode_fwd(q, k, v, cache_seqlens=lens, num_splits=splits)
    assert_decode_matches(out, q, k, v, lens=lens)
    assert (out[2] == 0).all()


@pytest.mark.parametrize("align", td.ALIGNS)
@pytest.mark.parametrize("splits", [1, 3])
def test_causal_alignment(align, splits):
    # seq_q 4 against lengths 60, 2 (fewer keys than queries: the first rows see none
    # bottom-right), 0: both alignments, with and without splits.
    q, k, v = _qkv(3, 4, 2, 4, 60, 64, torch.float16, seed=13)
    lens = torch.tensor([60, 2, 0], dtype=torch.int32, device=DEVICE)
    out = td.flash_decode_fwd(
        q, k, v, causal=True, causal_align=align, cache_seqlens=lens, num_splits=splits
    )
    assert_decode_matches(out, q, k, v, causal=True, align=align, lens=lens)


def test_bottom_right_without_lengths_sees_the_whole_cache_at_the_last_query():
    q, k, v = _qkv(1, 2, 2, 3, 40, 64, torch.float16, seed=17)
    out = entry.flash_attention_fwd(q, k, v, causal=True, causal_align="bottom-right")
    assert_decode_matches(out, q, k, v, causal=True, align="bottom-right")
    full = entry.flash_attention_fwd(q[:, :, -1:], k, v)
    torch.testing.assert_close(out[:, :, -1:], full, rtol=0, atol=2e-3)


def test_nan_poisoned_out_is_written_everywhere():
    q, k, v = _qkv(3, 4, 1, 2, 45, 64, torch.float16, seed=19)
    lens = torch.tensor([0, 45, 20], dtype=torch.int32, device=DEVICE)
    for splits in (1, 3):
        out = torch.full_like(q, float("nan"))
        got = td.flash_decode_fwd(q, k, v, cache_seqlens=lens, out=out, num_splits=splits)
        assert got is out
        assert_decode_matches(out, q, k, v, lens=lens)


def test_entry_point_passes_cache_seqlens():
    q, k, v = _qkv(2, 4, 4, 1, 30, 64, torch.bfloat16, seed=23)
    lens = torch.tensor([12, 30], dtype=torch.int32, device=DEVICE)
    out = entry.flash_attention_fwd(q, k, v, cache_seqlens=lens)
    assert_decode_matches(out, q, k, v, lens=lens)


def test_no_keys_gives_zeros():
    q, k, v = _qkv(1, 2, 2, 1, 0, 64, torch.float16)
    out = td.flash_decode_fwd(q, k, v, out=torch.full_like(q, float("nan")))
    assert (out == 0).all()


# ----------------------------------------------------------------------------------------
# Which calls take the split-KV kernel
# ----------------------------------------------------------------------------------------


def _choose(**overrides):
    args = dict(
        head_dim=128, causal=False, seq_q=1, seq_k=32768, batch_heads=128, elem_size=2,
        capability=90, smem_budget=232448, tma_aligned=True, env=flash_plan.Env(),
    )  # fmt: skip
    args.update(overrides)
    return flash_plan.choose(**args)


def test_decode_shapes_take_the_split_kernel_and_others_do_not():
    assert _choose().path == flash_plan.SPLIT_KV
    assert _choose(kernel="triton").path == flash_plan.SPLIT_KV
    assert _choose(seq_q=flash_plan.DECODE_MAX_SEQ_Q).path == flash_plan.SPLIT_KV
    assert _choose(seq_q=flash_plan.DECODE_MAX_SEQ_Q + 1).path != flash_plan.SPLIT_KV
    assert _choose(seq_k=flash_plan.DECODE_MIN_SEQ_K).path == flash_plan.SPLIT_KV
    assert _choose(seq_k=flash_plan.DECODE_MIN_SEQ_K - 1).path != flash_plan.SPLIT_KV
    # 16 queries: four times the keys.
    assert _choose(seq_q=16, seq_k=4 * flash_plan.DECODE_MIN_SEQ_K).path == flash_plan.SPLIT_KV
    assert _choose(seq_q=16, seq_k=4 * flash_plan.DECODE_MIN_SEQ_K - 1).path != flash_plan.SPLIT_KV
    assert _choose(causal=True).path != flash_plan.SPLIT_KV  # top-left: the first keys only
    assert _choose(kernel="gluon").path == flash_plan.GLUON  # the Gluon kernel by name
    interpreted = _choose(capability=None, env=flash_plan.Env(interpret=True))
    assert interpreted.path == flash_plan.SPLIT_KV


def test_triton_flash_runs_decode_through_the_split_kernel():
    q, k, v = _qkv(2, 8, 2, 2, flash_plan.DECODE_MIN_SEQ_K + 3, 64, torch.float16, seed=29)
    assert_decode_matches(tf.flash_attention_fwd(q, k, v), q, k, v)
    assert_decode_matches(entry.flash_attention_fwd(q, k, v), q, k, v)


@pytest.mark.parametrize(
    ("ctas", "key_tiles", "sms"),
    [(32, 512, 132), (4, 2048, 132), (128, 64, 132), (1, 3, 132), (500, 512, 132), (7, 1, 78)],
)
def test_decode_splits_fill_the_sms(ctas, key_tiles, sms):
    splits = flash_plan.decode_splits(ctas, key_tiles, sms)
    assert 1 <= splits <= max(1, key_tiles)
    if ctas >= 0.8 * sms:
        assert splits == 1
    elif key_tiles >= sms:
        # Enough key tiles to split: the programs fill at least 80% of a wave.
        assert ctas * splits >= 0.8 * sms


# ----------------------------------------------------------------------------------------
# Bad input
# ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"cache_seqlens": [3, 4]}, "cache_seqlens must be a torch.Tensor"),
        ({"cache_seqlens": torch.tensor([3, 4])}, "cache_seqlens must be int32"),
        ({"cache_seqlens": torch.tensor([3], dtype=torch.int32)}, r"expected \(batch,\)"),
        ({"causal_align": "top_left"}, "causal_align must be one of"),
        ({"num_splits": 0}, "num_splits must be a positive int"),
        ({"num_splits": True}, "num_splits must be a positive int"),
    ],
)
def test_bad_input_names_the_argument(kwargs, message):
    q, k, v = _qkv(2, 2, 2, 1, 8, 64, torch.float16)
    if isinstance(kwargs.get("cache_seqlens"), torch.Tensor):
        kwargs = {"cache_seqlens": kwargs["cache_seqlens"].to(DEVICE)}
    with pytest.raises(ValueError, match=message):
        td.flash_decode_fwd(q, k, v, **kwargs)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cache_seqlens_on_another_device():
    q, k, v = _qkv(2, 2, 2, 1, 8, 64, torch.float16)
    with pytest.raises(ValueError, match="cache_seqlens is on cpu"):
        td.flash_decode_fwd(q, k, v, cache_seqlens=torch.tensor([1, 2], dtype=torch.int32))


# ----------------------------------------------------------------------------------------
# Serving shapes (GPU)
# ----------------------------------------------------------------------------------------


@gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize(
    "shape",
    [(4, 32, 8, 1, 32768, 128), (64, 32, 8, 1, 4096, 128), (1, 64, 8, 4, 131072, 128),
     (32, 16, 16, 1, 16384, 64), (8, 32, 8, 16, 8192, 128)],
    ids=lambda s: "x".join(map(str, s)),
)  # fmt: skip
def test_serving_shapes(shape):
    batch, heads_q, heads_kv, seq_q, seq_k, head_dim = shape
    q, k, v = _qkv(batch, heads_q, heads_kv, seq_q, seq_k, head_dim, torch.bfloat16)
    assert_decode_matches(entry.flash_attention_fwd(q, k, v), q, k, v)
    assert_decode_matches(tf.flash_attention_fwd(q, k, v), q, k, v)
    lens = torch.randint(0, seq_k + 1, (batch,), dtype=torch.int32, device=DEVICE)
    lens[0] = 0
    out = entry.flash_attention_fwd(
        q, k, v, causal=True, causal_align="bottom-right", cache_seqlens=lens
    )
    assert_decode_matches(out, q, k, v, causal=True, align="bottom-right", lens=lens)
