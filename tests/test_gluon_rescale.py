"""The Gluon kernels' lazy O rescale (``LAZY_RESCALE``): a row's max moves only when it
rises by more than ``RESCALE_SLACK`` (log2 units), and a thread skips O's multiply by a
branch when its rows kept theirs. The branch's inline PTX and the accumulator layout it
assumes on the host; on an sm_90 GPU, seven variants with it on and off against a float32
reference, on inputs where a thread's two rows often disagree: one's max rises past the
slack at a key tile, the other's does not."""

from __future__ import annotations

import math
import re

import pytest
import torch
from attention_checks import Yardstick
from conftest import KERNEL_SEED, needs_sm90

pytest.importorskip("triton.experimental.gluon.language.nvidia.hopper")

from kernels import flash_plan
from kernels import gluon_flash_fwd as gf
from kernels.reference import attention_scores


def test_the_branch_multiplies_each_tied_value_by_its_own_alpha():
    n = 4
    asm = gf._rescale_asm(n)
    # $0..3 out (tied to $4..7 in), $8..11 alpha: value i times alpha i.
    assert re.findall(r"mul\.f32 \$(\d+), \$(\d+), \$(\d+);", asm) == [
        (str(i), str(i), str(2 * n + i)) for i in range(n)
    ]
    # The skip tests the thread's two rows (values 0 and 2 of wgmma's accumulator layout)
    # for alpha == 1.0 and jumps past every multiply; a plain (divergent) branch.
    assert re.findall(r"setp\.eq(?:\.and)?\.f32 keep, \$(\d+), 0f3F800000", asm) == ["8", "10"]
    assert "@keep bra SKIP;" in asm and asm.index("SKIP:") > asm.rindex("mul.f32")
    constraints = gf.RESCALE_CONSTRAINTS.value.split(",")
    pack = gf.RESCALE_PACK.value
    assert constraints == ["=f"] * pack + [str(i) for i in range(pack)] + ["f"] * pack


@pytest.mark.parametrize("head_dim", [64, 128])
def test_each_pack_of_32_accumulator_values_holds_two_rows_at_values_0_and_2(head_dim):
    # wgmma's accumulator layout, as the kernels build O's: register bit 1 is row + 8,
    # every other bit a column. So each pack of 32 consecutive values (5 bits) holds
    # rows r (value 0) and r + 8 (value 2) and no other; a layout or triton change that
    # broke this would make the skip test the wrong rows.
    from triton._C.libtriton import gluon_ir, ir
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language._semantic import GluonSemantic

    context = ir.context()
    ir.load_dialects(context)
    semantic = GluonSemantic(gluon_ir.GluonOpBuilder(context))
    o_layout = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, head_dim, 16]
    )
    bases = gl.to_linear_layout(o_layout, [gf.ROWS.value, head_dim], _semantic=semantic)
    reg_bases = bases.value.reg_bases
    assert 2 ** len(reg_bases) == gf.ROWS.value * head_dim // 128  # values a thread
    assert gf.RESCALE_PACK.value == 32 and reg_bases[1] == [8, 0]
    assert all(row == 0 for i, (row, _) in enumerate(reg_bases) if i != 1)


@pytest.mark.parametrize(
    ("head_dim", "variant", "lazy"),
    [
        (128, "ws-persistent", 1),
        (128, "ws", 1),
        (64, "simple-overlap", 1),
        (64, "simple", 1),
        (64, "ws-persistent-pingpong", 0),  # measured slower with it (the one dispatched)
        (64, "ws", 0),
    ],
)
def test_the_config_turns_it_off_for_the_two_warpgroup_kernels_at_64(head_dim, variant, lazy):
    assert flash_plan.gluon_config(head_dim, False, variant)["LAZY_RESCALE"] == lazy
    assert (
        flash_plan.gluon_config(head_dim, False, variant, LAZY_RESCALE=1 - lazy)["LAZY_RESCALE"]
        == 1 - lazy
    )


def _rising_inputs(batch, heads_q, heads_kv, seq, head_dim, dtype, seed):
    # Keys scaled up along the sequence: a row's scores grow from tile to tile by a
    # factor its own query sets, so some rows' maxima rise by many log2 units and
    # others' hardly move.
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, heads_q, seq, head_dim, generator=gen)
    q *= torch.rand(batch, heads_q, seq, 1, generator=gen) * 3
    k = torch.randn(batch, heads_kv, seq, head_dim, generator=gen)
    k *= torch.linspace(0.3, 3.0, seq).view(1, 1, seq, 1)
    v = torch.randn(batch, heads_kv, seq, head_dim, generator=gen)
    return q.to("cuda", dtype), k.to("cuda", dtype), v.to("cuda", dtype)


def _split_row_pairs(q, k, block_n: int, causal: bool) -> int:
    # Key tiles (after each row's first) at which a thread's two rows (r and r + 8 of
    # each 16) disagree, one's max rising past the slack and the other's not: the lazy
    # rule replayed on the float32 scores, in log2 units, from key tile 0.
    s = attention_scores(q, k, causal=causal) * math.log2(math.e)
    m = torch.full(s.shape[:-1], float("-inf"), device=s.device)
    moved = []
    for tile in s.split(block_n, dim=-1):
        tile_max = tile.amax(-1)
        rises = tile_max > m + gf.RESCALE_SLACK.value
        m = torch.where(rises, tile_max, m)
        moved.append(rises)
    later = torch.stack(moved, -1)[..., 1:]  # (..., rows, key tiles after the first)
    rows = later.shape[-2] // 16 * 16
    pairs = later[..., :rows, :].unflatten(-2, (rows // 16, 2, 8))
    return int((pairs[..., 0, :, :] != pairs[..., 1, :, :]).sum())


CASES = [  # (variant, overrides, batch, heads_q, heads_kv, seq, head_dim, causal, dtype)
    ("simple-overlap", {"BLOCK_N": 64}, 2, 4, 2, 700, 64, True, torch.bfloat16),
    ("simple-overlap", {}, 1, 4, 4, 1000, 64, False, torch.float16),
    ("simple", {}, 1, 4, 4, 1000, 64, False, torch.bfloat16),
    ("ws-persistent", {"SPLIT_KEYS": 1}, 2, 70, 70, 1000, 128, False, torch.float16),
    ("ws-persistent", {}, 1, 8, 2, 1500, 128, True, torch.bfloat16),
    ("ws", {}, 2, 4, 4, 1300, 128, True, torch.float16),
    ("ws-persistent-pingpong", {}, 2, 8, 8, 1100, 64, False, torch.bfloat16),
]


@pytest.mark.gpu
@needs_sm90
@pytest.mark.parametrize("lazy", [1, 0])
@pytest.mark.parametrize(
    ("variant", "overrides", "batch", "heads_q", "heads_kv", "seq", "head_dim", "causal",
     "dtype"),
    CASES,
    ids=[f"{c[0]}-{c[2]}x{c[3]}x{c[4]}x{c[5]}x{c[6]}-{'causal' if c[7] else 'full'}"
         for c in CASES],
)  # fmt: skip
def test_gpu_rising_maxima_match_the_reference(variant, overrides, batch, heads_q, heads_kv,
                                               seq, head_dim, causal, dtype, lazy):  # fmt: skip
    q, k, v = _rising_inputs(batch, heads_q, heads_kv, seq, head_dim, dtype,
                             seed=seq + head_dim + lazy + KERNEL_SEED)  # fmt: skip
    cfg = flash_plan.gluon_config(head_dim, causal, variant, **overrides)
    assert _split_row_pairs(q, k, cfg["BLOCK_N"], causal) > 0, "the branch would not diverge"
    out = torch.full_like(q, float("nan"))
    gf.flash_attention_fwd(q, k, v, causal=causal, out=out, variant=variant,
                           LAZY_RESCALE=lazy, **overrides)  # fmt: skip
    yardstick = Yardstick.of(q, k, v, causal=causal)
    yardstick.assert_rel(out)
    yardstick.assert_max(out)
