"""The causal per-tile Gluon grids' launch order (the one-warpgroup kernel's and the
two-warpgroup "ws" kernel's): (batch, head) pairs in whole groups, heaviest row blocks
first; the group size on the host, and the output of grids of several groups against a
float32 reference on an sm_90 GPU. And the persistent kernel's causal deal in units of a
heavy and a light row block (``PAIRED_ROUNDS``) against the same reference."""

from __future__ import annotations

import pytest
import torch
from attention_checks import Yardstick
from conftest import KERNEL_SEED, needs_sm90

pytest.importorskip("triton.experimental.gluon.language.nvidia.hopper")

from kernels import gluon_flash_fwd as gf


def _group(batch: int, heads_q: int, seq: int, wanted: int = 0) -> int:
    # The one-warpgroup grid: 64-row blocks, four CTAs an SM. Without a GPU the host
    # assumes an H100's 132 SMs.
    q = torch.empty(batch, heads_q, seq, 64, dtype=torch.float16)
    return gf._causal_group(q, -(-seq // 64), wanted, 4)


def _ws_group(batch: int, heads_q: int, seq: int, wanted: int = 0) -> int:
    # The two-warpgroup per-tile grid: 128-row blocks, one CTA an SM.
    q = torch.empty(batch, heads_q, seq, 128, dtype=torch.float16)
    return gf._causal_group(q, -(-seq // 128), wanted, 1)


@pytest.mark.parametrize(
    ("shape", "expected"),
    [
        ((1, 8, 512), 0),  # 64 CTAs: at most one an SM
        ((2, 8, 512), 0),  # 128 CTAs on 132 SMs
        ((4, 8, 512), 32),  # 256: one group
        ((4, 16, 512), 64),  # 512 CTAs: one group
        ((4, 32, 512), 128),  # 1024 CTAs: one group
        ((16, 16, 512), 0),  # 2048 CTAs of 8-row-block pairs: the plain order
        ((32, 16, 256), 0),
        ((8, 32, 1024), 64),  # 4096 CTAs of 16-row-block pairs: 1024 a group
        ((4, 32, 2048), 32),
        ((1, 16, 16384), 4),
        ((3, 12, 2048), 18),  # 1152 CTAs: 32 pairs wanted, 18 divides the 36
    ],
)
def test_the_hosts_group_by_grid_size_and_pair_length(shape, expected):
    assert _group(*shape) == expected


@pytest.mark.parametrize(
    ("shape", "expected"),
    [
        ((1, 2, 8192), 0),  # 128 CTAs on 132 SMs
        ((1, 4, 8192), 4),  # 256 CTAs, two waves at most: one group of the four pairs
        ((2, 4, 4096), 8),  # 256 CTAs: one group of the eight pairs
        ((64, 16, 1024), 0),  # 8192 CTAs of 8-row-block pairs: the plain order
        ((1, 16, 16384), 4),
        ((2, 16, 8192), 4),
        ((1, 8, 32768), 4),
        ((1, 6, 16384), 3),  # 4 does not divide 6 pairs
        ((1, 7, 16384), 1),  # 7 pairs: groups of one
    ],
)
def test_the_two_warpgroup_grid_takes_four_pairs_a_group_of_long_pairs(shape, expected):
    assert _ws_group(*shape) == expected


@pytest.mark.parametrize(
    ("shape", "rows", "causal", "ctas_per_sm", "expected"),
    [
        ((4, 16, 1024), 64, True, 4, ((64, 16, 1), 64)),  # one group of the 64 pairs
        ((1, 16, 16384), 128, True, 1, ((4, 128, 4), 4)),  # 4 groups of 4 pairs
        ((4, 8, 300), 64, True, 4, ((32, 5, 1), 32)),  # ragged row blocks, one group
        ((2, 8, 2048), 128, False, 1, ((16, 8, 2), 0)),  # non-causal: (row blocks, heads, batch)
        ((1, 8, 512), 64, True, 4, ((8, 8, 1), 0)),  # one wave: the plain order
    ],
)
def test_the_grid_covers_every_row_block_of_every_pair(shape, rows, causal, ctas_per_sm,
                                                       expected):  # fmt: skip
    batch, heads, seq = shape
    q = torch.empty(batch, heads, seq, 64, dtype=torch.float16)
    grid, group = gf._tile_grid(q, rows, causal, 0, ctas_per_sm)
    assert (grid, group) == expected
    assert grid[0] * grid[1] * grid[2] == batch * heads * -(-seq // rows)


def test_a_grid_past_65535_groups_keeps_the_plain_order():
    # 65537 pairs (a prime): only groups of one divide them, too many for the grid's z.
    assert _group(65537, 1, 1, 32) == 0
    assert _group(65536, 1, 1, 1) == 0  # 65536 groups of one: one too many
    assert _group(65536, 1, 1, 2) == 2
    assert _group(65535, 1, 1, 1) == 1


@pytest.mark.parametrize(("wanted", "expected"), [(32, 24), (5, 4), (1, 1), (1000, 48)])
def test_an_asked_group_is_rounded_down_to_a_divisor_of_the_pairs(wanted, expected):
    assert _group(4, 12, 64, wanted) == expected  # 48 pairs


SHAPES = [  # (variant, batch, heads_q, heads_kv, seq, head_dim, dtype, GROUP_PAIRS)
    ("simple-overlap", 2, 8, 2, 300, 64, torch.float16, 4),  # GQA, ragged, 4 groups
    ("simple-overlap", 4, 6, 3, 513, 64, torch.bfloat16, 5),  # 24 pairs in groups of 4
    ("simple-overlap", 8, 32, 8, 1024, 64, torch.bfloat16, 0),  # the host's choice: 64
    ("simple-overlap", 4, 16, 16, 512, 64, torch.float16, 0),  # one group of every pair
    ("simple-overlap", 3, 4, 4, 257, 128, torch.float16, 3),  # head_dim 128
    ("ws", 4, 8, 2, 1000, 128, torch.bfloat16, 0),  # GQA, ragged, the host's choice: 32
    ("ws", 3, 4, 4, 1300, 128, torch.float16, 3),  # 12 pairs in groups of 3
    ("ws", 2, 6, 6, 700, 64, torch.float16, 4),  # head_dim 64: 12 pairs in groups of 4
]


@pytest.mark.gpu
@needs_sm90
@pytest.mark.parametrize(
    ("variant", "batch", "heads_q", "heads_kv", "seq", "head_dim", "dtype", "group"),
    SHAPES,
    ids=[f"{v}-{b}x{h}x{hk}x{s}x{d}-{str(t)[6:]}-g{g}" for v, b, h, hk, s, d, t, g in SHAPES],
)
def test_gpu_grouped_causal_grid_matches_the_reference(variant, batch, heads_q, heads_kv,
                                                       seq, head_dim, dtype, group):  # fmt: skip
    gen = torch.Generator().manual_seed(seq * 3 + group + KERNEL_SEED)
    q = torch.randn(batch, heads_q, seq, head_dim, generator=gen).to("cuda", dtype)
    k = torch.randn(batch, heads_kv, seq, head_dim, generator=gen).to("cuda", dtype)
    v = torch.randn(batch, heads_kv, seq, head_dim, generator=gen).to("cuda", dtype)
    rows, per_sm = (64, 4) if variant == "simple-overlap" else (128, 1)
    assert gf._causal_group(q, -(-seq // rows), group, per_sm) > 0, "not a grouped grid"
    out = torch.full_like(q, float("nan"))
    gf.flash_attention_fwd(q, k, v, causal=True, out=out, variant=variant,
                           GROUP_PAIRS=group)  # fmt: skip
    yardstick = Yardstick.of(q, k, v, causal=True)
    yardstick.assert_rel(out)
    yardstick.assert_max(out)  # a row block run for the wrong head stays local


PAIRED = [  # (variant, batch, heads_q, heads_kv, seq, head_dim, dtype): the persistent
    # kernels' causal deal in units of a heavy and a light row block (PAIRED_ROUNDS), on
    # 132 SMs
    ("ws-persistent", 2, 8, 8, 2048, 128, torch.float16),  # 256 row blocks, 128 units
    ("ws-persistent", 2, 16, 16, 2048, 128, torch.bfloat16),  # 256 units: two rounds
    ("ws-persistent", 3, 12, 4, 1000, 128, torch.bfloat16),  # GQA, ragged last row block
    ("ws-persistent", 2, 16, 16, 1300, 128, torch.float16),  # 11 row blocks a pair:
    # units of one after those of two
    ("ws-persistent", 4, 8, 2, 777, 64, torch.float16),  # 7 row blocks a pair, head_dim
    # 64: some CTAs with units of one only
    ("ws-persistent", 150, 2, 2, 100, 64, torch.bfloat16),  # units of one only
    ("ws-persistent-pingpong", 2, 16, 16, 1300, 128, torch.bfloat16),  # its turns
    # running on across the units
]


@pytest.mark.gpu
@needs_sm90
@pytest.mark.parametrize(
    ("variant", "batch", "heads_q", "heads_kv", "seq", "head_dim", "dtype"),
    PAIRED,
    ids=[f"{v}-{b}x{h}x{hk}x{s}x{d}-{str(t)[6:]}" for v, b, h, hk, s, d, t in PAIRED],
)
def test_gpu_paired_persistent_deal_matches_the_reference(variant, batch, heads_q, heads_kv,
                                                          seq, head_dim, dtype):  # fmt: skip
    gen = torch.Generator().manual_seed(seq * 5 + batch + KERNEL_SEED)
    q = torch.randn(batch, heads_q, seq, head_dim, generator=gen).to("cuda", dtype)
    k = torch.randn(batch, heads_kv, seq, head_dim, generator=gen).to("cuda", dtype)
    v = torch.randn(batch, heads_kv, seq, head_dim, generator=gen).to("cuda", dtype)
    row_blocks = batch * heads_q * -(-seq // 128)
    assert row_blocks > gf._sm_count(q), "one round: the paired deal is not used"
    yardstick = Yardstick.of(q, k, v, causal=True)
    for _ in range(2):  # a row block no CTA takes stays NaN
        out = torch.full_like(q, float("nan"))
        gf.flash_attention_fwd(q, k, v, causal=True, out=out, variant=variant,
                               PAIRED_ROUNDS=99)  # fmt: skip
        yardstick.assert_rel(out)
        yardstick.assert_max(out)


@pytest.mark.parametrize(
    ("causal", "tiles", "rounds", "expected"),
    [
        (False, 500, 8, False),  # non-causal row blocks are all alike
        (True, 132, 8, False),  # one round: each CTA its own row block
        (True, 133, 8, True),
        (True, 1056, 8, True),  # eight rounds
        (True, 1057, 8, False),  # more: heaviest first ends on light row blocks
        (True, 500, 0, False),  # never
    ],
)
def test_the_persistent_kernel_pairs_row_blocks_from_one_round_to_its_limit(
    causal, tiles, rounds, expected
):
    assert gf.paired_deal(causal, tiles, 132, rounds) is expected


def test_the_persistent_variants_pair_by_default_and_only_they_know_the_knob():
    from kernels import flash_plan

    for variant in ("ws-persistent", "ws-persistent-pingpong"):
        rounds = flash_plan.gluon_config(128, True, variant)["PAIRED_ROUNDS"]
        assert gf.paired_deal(True, 2 * 132, 132, rounds)  # two rounds: paired
    with pytest.raises(ValueError, match="PAIRED_ROUNDS"):
        flash_plan.gluon_config(128, True, "ws", PAIRED_ROUNDS=8)
