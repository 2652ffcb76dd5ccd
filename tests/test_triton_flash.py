"""Correctness of the Triton FlashAttention forward (kernels/triton_flash.py, registry name
``triton_flash``) and of the entry point users call (kernels/flash_attention.py).

Without a GPU the kernel runs under the Triton interpreter on the CPU, so the CPU tests
use small odd shapes. With a GPU the same tests run compiled on CUDA, and the tests
marked ``gpu`` add the benchmark-suite shapes.

Tolerance, as in flash-attention's tests: the kernel's error against a float32
reference may be at most twice the error of torch SDPA run in the same dtype on the
same inputs, plus a floor of one machine epsilon of the dtype (fp16 2**-10 ~ 9.8e-4,
bf16 2**-7 ~ 7.8e-3; the suite's rel_norm_floor values 1e-3 and 8e-3 are the same
numbers rounded). The floor pays for the one rounding that torch's CPU SDPA skips: the
kernel rounds the softmax probabilities P to fp16/bf16 before the P @ V matmul
(FlashAttention does so to use tensor cores), which costs up to half an epsilon
relative per element. Measured under the interpreter: fp16 ~2.5e-4 for both; bf16
~5e-3 for the kernel against ~2e-3 for SDPA, so "2x" alone would fail bf16 on the CPU.
On a GPU, SDPA's flash backend rounds P as well and the floor matters less.
"""

from __future__ import annotations

import math

from triton_interpreter import DEVICE, runnable  # before anything imports triton

# isort: split

import pytest
import torch

pytest.importorskip("triton")

from attention_checks import assert_matches
from conftest import KERNEL_SEED

from kernels import flash_attention as entry
from kernels import flash_launch, flash_plan
from kernels import triton_flash as tf

pytestmark = runnable(flash_launch.INTERPRET)
gpu = pytest.mark.gpu
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

DTYPES = [torch.float16, torch.bfloat16]
SEQS = [(1, 1), (17, 17), (33, 45), (65, 31), (113, 113)]


def _ids(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _randn(*shape: int, dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    return torch.randn(*shape, generator=gen, dtype=torch.float32).to(DEVICE, dtype)


def _qkv(batch, heads_q, heads_kv, seq_q, seq_k, head_dim, dtype, seed=0):
    gen = torch.Generator().manual_seed(seed + KERNEL_SEED)
    q = _randn(batch, heads_q, seq_q, head_dim, dtype=dtype, gen=gen)
    k = _randn(batch, heads_kv, seq_k, head_dim, dtype=dtype, gen=gen)
    v = _randn(batch, heads_kv, seq_k, head_dim, dtype=dtype, gen=gen)
    return q, k, v


# ----------------------------------------------------------------------------------------
# Numerics on small odd shapes (interpreter on the CPU, compiled on a GPU)
# ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("seq_q", "seq_k"), SEQS)
@pytest.mark.parametrize("head_dim", [32, 64])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("dtype", DTYPES, ids=_ids)
def test_matches_reference(dtype, causal, head_dim, seq_q, seq_k):
    q, k, v = _qkv(2, 2, 2, seq_q, seq_k, head_dim, dtype)
    assert_matches(tf.flash_attention_fwd(q, k, v, causal=causal), q, k, v, causal=causal)


@pytest.mark.parametrize("head_dim", [96, 128, 256])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("dtype", DTYPES, ids=_ids)
def test_wide_and_padded_head_dims(dtype, causal, head_dim):
    # 96 exercises the padded BLOCK_D (128) with masked loads along head_dim.
    q, k, v = _qkv(1, 2, 2, 33, 45, head_dim, dtype)
    assert_matches(tf.flash_attention_fwd(q, k, v, causal=causal), q, k, v, causal=causal)


@pytest.mark.parametrize("heads_kv", [2, 1])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("dtype", DTYPES, ids=_ids)
def test_grouped_query(dtype, causal, heads_kv):
    q, k, v = _qkv(2, 4, heads_kv, 37, 50, 32, dtype)
    assert_matches(tf.flash_attention_fwd(q, k, v, causal=causal), q, k, v, causal=causal)


@pytest.mark.parametrize("scale", [0.05, 0.5, 1.0])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_custom_scale(causal, scale):
    q, k, v = _qkv(1, 2, 2, 40, 29, 64, torch.float16)
    out = tf.flash_attention_fwd(q, k, v, causal=causal, scale=scale)
    assert_matches(out, q, k, v, causal=causal, scale=scale)


def test_causal_is_top_left_aligned():
    # seq_q < seq_k: bottom-right alignment would let query 0 see keys 0..4; top-left
    # lets it see key 0 only, so its output is exactly v[..., 0, :].
    q, k, v = _qkv(1, 2, 2, 5, 9, 32, torch.float16)
    out = tf.flash_attention_fwd(q, k, v, causal=True)
    torch.testing.assert_close(out[:, :, 0], v[:, :, 0], rtol=0, atol=0)
    assert_matches(out, q, k, v, causal=True)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_out_buffer_poisoned_with_nan_is_fully_written(causal):
    q, k, v = _qkv(2, 2, 2, 47, 47, 64, torch.bfloat16)
    out = torch.full_like(q, float("nan"))
    result = tf.flash_attention_fwd(q, k, v, causal=causal, out=out)
    assert result is out
    assert_matches(out, q, k, v, causal=causal)


def test_out_buffer_with_strides():
    # A (batch, seq, heads, dim) buffer seen as (batch, heads, seq, dim): the kernel
    # must follow out's strides, not assume q's.
    q, k, v = _qkv(2, 3, 3, 21, 26, 32, torch.float16)
    storage = torch.full((2, 21, 3, 32), float("nan"), dtype=q.dtype, device=DEVICE)
    out = storage.transpose(1, 2)
    tf.flash_attention_fwd(q, k, v, out=out)
    assert torch.isfinite(storage).all()
    assert_matches(out, q, k, v, causal=False)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_strided_inputs(causal):
    # (batch, seq, heads, dim) storage, as many models keep it, and a last dimension
    # with stride 2 (copied by the launcher).
    gen = torch.Generator().manual_seed(1 + KERNEL_SEED)
    q = _randn(2, 19, 4, 32, dtype=torch.float16, gen=gen).transpose(1, 2)
    k = _randn(2, 23, 2, 32, dtype=torch.float16, gen=gen).transpose(1, 2)
    v = _randn(2, 2, 23, 64, dtype=torch.float16, gen=gen)[..., ::2]
    assert not q.is_contiguous() and v.stride(-1) == 2
    out = tf.flash_attention_fwd(q, k, v, causal=causal)
    assert_matches(out, q, k, v, causal=causal)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_no_keys_gives_zeros(causal):
    # Every row fully masked: zeros, not NaN (the l == 0 and m == -inf guards).
    q, k, v = _qkv(1, 2, 2, 7, 0, 32, torch.float16)
    out = torch.full_like(q, float("nan"))
    tf.flash_attention_fwd(q, k, v, causal=causal, out=out)
    assert torch.equal(out, torch.zeros_like(q))


def test_no_queries_gives_empty():
    q, k, v = _qkv(1, 2, 2, 0, 5, 32, torch.float16)
    assert tf.flash_attention_fwd(q, k, v).shape == (1, 2, 0, 32)


# ----------------------------------------------------------------------------------------
# Validation: every ValueError starts with the argument's name
# ----------------------------------------------------------------------------------------


def _bad_inputs():
    def make(q=(1, 2, 8, 32), k=(1, 2, 8, 32), v=(1, 2, 8, 32), dtype=torch.float16):
        gen = torch.Generator().manual_seed(KERNEL_SEED)
        return {
            "q": _randn(*q, dtype=dtype, gen=gen),
            "k": _randn(*k, dtype=dtype, gen=gen),
            "v": _randn(*v, dtype=dtype, gen=gen),
        }

    base = make()
    meta = torch.empty(1, 2, 8, 32, dtype=torch.float16, device="meta")
    return {
        "q-float32": ({**base, "q": base["q"].float()}, "q", "float16 or bfloat16"),
        "k-dtype-mismatch": ({**base, "k": base["k"].bfloat16()}, "k", "dtype"),
        "v-dtype-mismatch": ({**base, "v": base["v"].bfloat16()}, "v", "dtype"),
        "q-device": ({**base, "q": meta}, "q", "tensor, got device meta"),
        "v-device": ({**base, "v": meta}, "v", "is on meta"),
        "q-rank": ({**base, "q": base["q"][0]}, "q", "4-D"),
        "k-rank": ({**base, "k": base["k"][0]}, "k", "4-D"),
        "q-head-dim": (make(q=(1, 2, 8, 48), k=(1, 2, 8, 48), v=(1, 2, 8, 48)), "q", "head_dim"),
        "k-head-dim": (make(k=(1, 2, 8, 64), v=(1, 2, 8, 64)), "k", "head_dim"),
        "k-batch": (make(k=(2, 2, 8, 32), v=(2, 2, 8, 32)), "k", "batch"),
        "v-shape": (make(v=(1, 2, 9, 32)), "v", "must match"),
        "k-heads": (make(q=(1, 3, 8, 32)), "k", "must divide"),
        "scale-negative": ({**base, "scale": -1.0}, "scale", "positive"),
        "scale-nan": ({**base, "scale": math.nan}, "scale", "positive"),
        "scale-type": ({**base, "scale": "0.1"}, "scale", "float"),
        "causal-type": ({**base, "causal": "yes"}, "causal", "bool"),
        "out-shape": ({**base, "out": base["q"][:, :1].clone()}, "out", "shape"),
        "out-dtype": ({**base, "out": base["q"].bfloat16()}, "out", "dtype"),
        "out-device": ({**base, "out": meta}, "out", "is on meta"),
        "out-stride": (
            {**base, "out": torch.empty(1, 2, 8, 64, dtype=torch.float16, device=DEVICE)[..., ::2]},
            "out",
            "contiguous",
        ),
    }


BAD = _bad_inputs()


@pytest.mark.parametrize("case", list(BAD))
def test_validation_names_the_argument(case):
    kwargs, arg, detail = BAD[case]
    with pytest.raises(ValueError) as info:
        tf.flash_attention_fwd(**kwargs)
    message = str(info.value)
    assert message.startswith(f"{arg} "), message
    assert detail in message, message


# ----------------------------------------------------------------------------------------
# Configs
# ----------------------------------------------------------------------------------------

# Per-block shared memory limits (cudaDevAttrMaxSharedMemoryPerBlockOptin).
_SMEM = {"sm_90": 232448, "sm_80": 166912, "sm_89": 101376}


def test_smem_estimate():
    config = flash_plan.triton_config(128, 64, 8, 3)
    assert tf.smem_bytes(config, 128) == (128 * 128 + 2 * 3 * 64 * 128) * 2
    assert tf.smem_bytes(config, 96) == tf.smem_bytes(config, 128)  # padded to 128


def test_pinned_configs_cover_and_fit():
    for arch, budget in _SMEM.items():
        for head_dim in tf.SUPPORTED_HEAD_DIMS:
            for causal in (False, True):
                config = tf.PINNED[(arch, head_dim, causal)]
                assert tf.smem_bytes(config, head_dim) <= budget, (arch, head_dim, causal)


def test_configs_small_and_causal_safe():
    assert 8 <= len(tf.CONFIGS) <= 16
    for config in tf.CONFIGS:
        assert config.kwargs["BLOCK_M"] % config.kwargs["BLOCK_N"] == 0


@pytest.mark.parametrize("arch", list(_SMEM))
def test_prune_keeps_only_what_fits(monkeypatch, arch):
    monkeypatch.setattr(tf, "smem_budget", lambda device: _SMEM[arch])
    q = torch.empty(1, 1, 1, 256, dtype=torch.float16)
    kept = tf.prune_configs(tf.CONFIGS, {"Q": q})
    assert kept and all(tf.smem_bytes(c, 256) <= _SMEM[arch] for c in kept)
    if arch == "sm_90":
        assert len(kept) < len(tf.CONFIGS)  # head_dim 256 cannot take 128x128 tiles
    monkeypatch.setattr(tf, "smem_budget", lambda device: 1024)
    assert len(tf.prune_configs(tf.CONFIGS, {"Q": q})) == 1  # never empty


@pytest.mark.parametrize(
    ("capability", "budget", "head_dim", "expected"),
    [
        (90, _SMEM["sm_90"], 128, ("sm_90", 128)),
        (89, _SMEM["sm_89"], 256, ("sm_89", 256)),
        # sm_86 (99 KB) is not listed: Ampere's entry when it fits, else Ada's.
        (86, _SMEM["sm_89"], 64, ("sm_80", 64)),
        (86, _SMEM["sm_89"], 256, ("sm_80", 256)),
        # sm_120 (99 KB): Hopper's head_dim-256 tile (64x32, 2 stages) fits.
        (120, _SMEM["sm_89"], 256, ("sm_90", 256)),
        # ... and with less than it needs, the lookup moves on to Ampere's.
        (120, 90_000, 128, ("sm_89", 128)),
        (100, _SMEM["sm_90"], 256, ("sm_90", 256)),
    ],
)
def test_pinned_lookup_for_unlisted_archs(capability, budget, head_dim, expected):
    config, source = flash_plan.pinned(capability, head_dim, False, 2, budget)
    assert source == f"PINNED[{expected[0]}]"
    assert config is tf.PINNED[(*expected, False)]
    assert tf.smem_bytes(config, head_dim) <= budget


# ----------------------------------------------------------------------------------------
# GPU: the benchmark-suite shapes, odd lengths, every pinned config compiled
# ----------------------------------------------------------------------------------------

SUITE = [
    # (batch, heads, seq, head_dim, causal, dtype)
    (1, 8, 128, 64, False, torch.float16),
    (1, 8, 512, 64, False, torch.float16),
    (1, 8, 512, 64, True, torch.float16),
    (1, 16, 1024, 64, False, torch.float16),
    (4, 16, 1024, 64, True, torch.float16),
    (2, 8, 2048, 128, False, torch.float16),
    (2, 8, 2048, 128, True, torch.float16),
    (2, 8, 1000, 64, False, torch.float16),
    (2, 8, 1000, 64, True, torch.bfloat16),
    (1, 8, 2047, 128, False, torch.bfloat16),
    (1, 8, 2047, 128, True, torch.float16),
    (2, 8, 2048, 128, True, torch.bfloat16),
]


@gpu
@needs_cuda
@pytest.mark.parametrize(
    ("batch", "heads", "seq", "head_dim", "causal", "dtype"),
    SUITE,
    ids=[f"{b}x{h}x{s}x{d}-{'causal' if c else 'full'}-{_ids(t)}" for b, h, s, d, c, t in SUITE],
)
def test_gpu_suite_shapes(batch, heads, seq, head_dim, causal, dtype):
    q, k, v = _qkv(batch, heads, heads, seq, seq, head_dim, dtype)
    out = torch.full_like(q, float("nan"))
    tf.flash_attention_fwd(q, k, v, causal=causal, out=out)
    assert_matches(out, q, k, v, causal=causal)


@gpu
@needs_cuda
@pytest.mark.parametrize("head_dim", tf.SUPPORTED_HEAD_DIMS)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("dtype", DTYPES, ids=_ids)
def test_gpu_pinned_config_compiles(dtype, causal, head_dim):
    # Without the OutOfResources fallback: a pinned entry this GPU cannot hold fails.
    q, k, v = _qkv(2, 4, 2, 300, 333, head_dim, dtype)
    config = tf.pinned_config(q.device, head_dim, causal, q.element_size())
    out = tf.flash_attention_fwd_config(q, k, v, config, causal=causal)
    assert_matches(out, q, k, v, causal=causal)


@gpu
@needs_cuda
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_gpu_autotune_env(monkeypatch, causal):
    monkeypatch.setenv("ATTN_TRITON_AUTOTUNE", "1")
    q, k, v = _qkv(1, 8, 8, 1000, 1000, 64, torch.float16)
    out = tf.flash_attention_fwd(q, k, v, causal=causal)
    assert_matches(out, q, k, v, causal=causal)


# ----------------------------------------------------------------------------------------
# The TMA + warp-specialized path (sm_90), forced; under the interpreter with small tiles
# it runs the same device-side descriptors without the warp specialization.
# ----------------------------------------------------------------------------------------


def _ws_setup(head_dim):
    if DEVICE == "cpu":
        return tf.INTERPRET_CONFIG, 48
    if flash_launch.capability(torch.device("cuda")) != 90:
        pytest.skip("the warp-specialized path is for sm_90")
    return tf.WS_PINNED[128], 256


@pytest.mark.parametrize("heads_kv", [4, 2])
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("dtype", DTYPES, ids=_ids)
def test_warp_specialized_path(dtype, head_dim, heads_kv):
    config, seq_k = _ws_setup(head_dim)
    # seq_q not a multiple of BLOCK_M: the TMA store must clip the last row block.
    q, k, v = _qkv(2, 4, heads_kv, seq_k - 5, seq_k, head_dim, dtype)
    out = torch.full_like(q, float("nan"))
    tf.flash_attention_fwd_config(q, k, v, config, out=out, warp_specialize=True)
    assert_matches(out, q, k, v, causal=False)


def test_warp_specialized_path_refuses_what_it_cannot_do():
    config = tf.WS_PINNED[128]
    q, k, v = _qkv(1, 2, 2, 8, 128, 64, torch.float16)
    with pytest.raises(ValueError, match="causal=False"):
        tf.flash_attention_fwd_config(q, k, v, config, causal=True, warp_specialize=True)
    q, k, v = _qkv(1, 2, 2, 8, 100, 64, torch.float16)
    with pytest.raises(ValueError, match="multiple of BLOCK_N"):
        tf.flash_attention_fwd_config(q, k, v, config, warp_specialize=True)


def test_ws_configs_fit():
    # Which calls take the path: tests/test_flash_plan.py.
    assert tf.WS_MIN_SEQ_K % tf.WS_PINNED[128].kwargs["BLOCK_N"] == 0
    for config in tf.WS_PINNED.values():
        assert tf.smem_bytes(config, 128) <= _SMEM["sm_90"]


# ----------------------------------------------------------------------------------------
# The eager fast path: a launch plan per key, reused; every check still raises
# ----------------------------------------------------------------------------------------


def test_plan_key_refuses_what_must_reach_the_checks():
    # Values that hash like valid ones (1 == True, True == 1.0) or are not plain
    # tensors never get a key, so they always meet flash_launch.validate and its ValueError.
    q, k, v = _qkv(1, 2, 2, 8, 8, 32, torch.float16)
    for kwargs in ({"causal": 1}, {"scale": True}, {"scale": 1}, {"out": "buffer"}):
        assert flash_launch.plan_key(q, k, v, kwargs.get("causal", False), kwargs.get("scale"),
                                     kwargs.get("out")) is None  # fmt: skip
    assert flash_launch.plan_key(q.tolist(), k, v, False, None, None) is None
    if DEVICE == "cpu":
        assert flash_launch.plan_key(q, k, v, False, None, None) is None  # interpreter: no plans


@gpu
@needs_cuda
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_gpu_plan_reused_on_new_tensors(causal):
    tf._ENTRY.plans.clear()
    q, k, v = _qkv(2, 4, 2, 300, 333, 64, torch.float16)
    assert_matches(tf.flash_attention_fwd(q, k, v, causal=causal), q, k, v, causal=causal)
    assert len(tf._ENTRY.plans) == 1
    # Same key, new data and a caller's buffer: the plan launches on these pointers.
    q2, k2, v2 = _qkv(2, 4, 2, 300, 333, 64, torch.float16, seed=1)
    assert_matches(tf.flash_attention_fwd(q2, k2, v2, causal=causal), q2, k2, v2, causal=causal)
    out = torch.full_like(q2, float("nan"))
    assert tf.flash_attention_fwd(q2, k2, v2, causal=causal, out=out) is out
    assert_matches(out, q2, k2, v2, causal=causal)
    # A view 2 bytes off 16-byte alignment is another key (triton specializes on it).
    storage = torch.empty(q2.numel() + 1, dtype=q2.dtype, device=DEVICE)
    q3 = storage[1:].view_as(q2).copy_(q2)
    assert_matches(tf.flash_attention_fwd(q3, k2, v2, causal=causal), q3, k2, v2, causal=causal)


@gpu
@needs_cuda
@pytest.mark.parametrize("case", list(BAD))
def test_gpu_validation_after_a_plan_exists(case):
    # A good call of the same shapes first: the cache must not swallow the error.
    kwargs, arg, detail = BAD[case]
    good = _bad_inputs()["scale-negative"][0]
    good = {name: good[name] for name in ("q", "k", "v")}
    tf.flash_attention_fwd(**good)
    tf.flash_attention_fwd(**good, causal=True)
    with pytest.raises(ValueError) as info:
        tf.flash_attention_fwd(**kwargs)
    assert str(info.value).startswith(f"{arg} ") and detail in str(info.value)


# ----------------------------------------------------------------------------------------
# The entry point users call and the Gluon kernel, by registry name
# ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_entry_point_matches_reference(causal):
    # On the CPU (the interpreter) and off sm_90 it runs the Triton kernel; on sm_90
    # these small shapes stay below FASTER's sizes too.
    q, k, v = _qkv(2, 4, 2, 33, 45, 64, torch.float16)
    out = torch.full_like(q, float("nan"))
    assert entry.flash_attention_fwd(q, k, v, causal=causal, out=out) is out
    assert_matches(out, q, k, v, causal=causal)


@pytest.mark.parametrize("case", ["q-head-dim", "scale-negative", "out-shape"])
def test_entry_point_validation_names_the_argument(case):
    kwargs, arg, detail = BAD[case]
    with pytest.raises(ValueError) as info:
        entry.flash_attention_fwd(**kwargs)
    assert str(info.value).startswith(f"{arg} ") and detail in str(info.value)


def _gpu_kernel(name):
    from kernels import registry

    spec = registry.get(name)
    reason = spec.probe(DEVICE)
    if reason is not None:
        pytest.skip(f"{name}: {reason}")
    return spec.loader()


@gpu
@needs_cuda
@pytest.mark.parametrize("name", ["triton_flash", "gluon_flash", "flash_attention"])
@pytest.mark.parametrize(
    ("batch", "heads", "seq", "head_dim", "causal", "dtype"),
    SUITE,
    ids=[f"{b}x{h}x{s}x{d}-{'causal' if c else 'full'}-{_ids(t)}" for b, h, s, d, c, t in SUITE],
)
def test_gpu_suite_shapes_by_name(name, batch, heads, seq, head_dim, causal, dtype):
    fn = _gpu_kernel(name)
    q, k, v = _qkv(batch, heads, heads, seq, seq, head_dim, dtype)
    out = torch.full_like(q, float("nan"))
    assert fn(q, k, v, causal=causal, out=out) is out
    assert_matches(out, q, k, v, causal=causal)
