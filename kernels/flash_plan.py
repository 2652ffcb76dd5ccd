"""Launch plans of the FlashAttention forward: which kernel and path a call takes, and with
which config. Shared by the Triton kernel (``kernels/triton_flash.py``), the Gluon kernel
(``kernels/gluon_flash_fwd.py``), the dispatching entry point
(``kernels/flash_attention.py``) and the compiler-resource records
(``kernel_reports/triton_flash_resources.py``).

``choose`` is the one path chooser: a pure function of the workload (lengths, head_dim,
dtype size, causal), the GPU (capability, shared memory per block, TMA alignment of the
tensors) and the environment switches (``Env``), returning a frozen ``Choice``. Nothing
here queries a device, so a GPU-less process (the resources records, the tests) gets
the same answer a launcher on that GPU gets.

The paths, by the kernel that runs them:

- ``triton`` (``kernels/triton_flash.py``): ``pointer`` (pointer loads pipelined with
  cp.async; any GPU), ``tma_ws`` (sm_90: TMA descriptors and triton's automatic warp
  specialization; non-causal head_dim 128, seq_k >= ``WS_MIN_SEQ_K`` and a multiple of
  the tile; only with ``ATTN_TRITON_WS=1``), ``autotune`` (``ATTN_TRITON_AUTOTUNE=1``:
  over ``CONFIGS``), ``interpret`` (``TRITON_INTERPRET=1``: one small config).
- ``gluon`` (``kernels/gluon_flash_fwd.py``, sm_90 only): one of ``VARIANTS`` with
  ``gluon_config``'s tiles; ``FASTER`` names the variant per (head_dim, causal), and
  ``FASTER_FROM`` another one from a larger seq_q * seq_k and count of CTA tiles up.

What each caller asks for (``kernel``):

- ``"auto"`` (the entry point, registry name ``flash_attention``): the Gluon kernel on
  sm_90 where the GPU model's dispatch table names it for the nearest measured shape
  (``kernels/dispatch_table.py``), or, without a table, where ``FASTER`` or a tier of
  ``FASTER_FROM`` says it was measured faster (``ATTN_GLUON=0``: never), else the Triton
  kernel's path.
- ``"triton"`` (registry name ``triton_flash``): the Triton kernel everywhere.
- ``"gluon"`` (registry name ``gluon_flash``): the Gluon kernel at any length, with the
  variant ``faster_variant`` names; ``Unsupported`` where it cannot run.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal, NamedTuple

import triton

from kernels import dispatch_table
from kernels.dispatch_table import DispatchTable

Kernel = Literal["auto", "triton", "gluon"]

POINTER = "pointer"  # pointer loads pipelined with cp.async
TMA_WS = "tma_ws"  # TMA tensor descriptors + automatic warp specialization (sm_90)
AUTOTUNE = "autotune"  # ATTN_TRITON_AUTOTUNE=1: triton.autotune over CONFIGS
INTERPRET = "interpret"  # TRITON_INTERPRET=1: INTERPRET_CONFIG
GLUON = "gluon"  # the Gluon kernel; Choice.variant says which of VARIANTS
SPLIT_KV = "split_kv"  # decode: keys split across programs, then merged (triton_decode.py)

TRITON_HEAD_DIMS = (32, 64, 96, 128, 256)
GLUON_HEAD_DIMS = (64, 128)
GLUON_CAPABILITY = 90  # wgmma, TMA: sm_90 only

# The switches, by environment variable.
AUTOTUNE_ENV = "ATTN_TRITON_AUTOTUNE"  # "1": autotune the Triton kernel
# "1": the TMA + warp-specialized Triton path (off by default: on an H200 with triton 3.6
# it left NaN in 233 of 240 calls at 1x16x16384x128 while 5 other processes shared the
# GPU, where the pointer path and the Gluon kernel left none and it alone was right:
# benchmarks/concurrent_nan.py, docs/notes/triton-kernel.md).
WS_ENV = "ATTN_TRITON_WS"
GLUON_ENV = "ATTN_GLUON"  # "0": the entry point never takes the Gluon kernel
INTERPRET_ENV = "TRITON_INTERPRET"  # "1": kernels interpreted on the CPU


class Unsupported(ValueError):
    """The asked-for kernel cannot take this workload here (the message says why)."""


@dataclass(frozen=True)
class Env:
    """The environment switches the choice depends on."""

    gluon: bool = True  # ATTN_GLUON != "0" (and the Gluon kernel importable)
    triton_ws: bool = False  # ATTN_TRITON_WS == "1"
    autotune: bool = False  # ATTN_TRITON_AUTOTUNE == "1"
    interpret: bool = False  # TRITON_INTERPRET == "1"
    table: str | None = None  # ATTN_DISPATCH_TABLE: a table file, "off", or None (packaged)

    @classmethod
    def read(
        cls, getenv: Callable[[str], str | None] = os.environ.get, *, interpret: bool | None = None
    ) -> Env:
        """The switches as set now; ``interpret`` overrides TRITON_INTERPRET (which a
        process reads once, when triton decorates the kernels)."""
        return cls(
            gluon=getenv(GLUON_ENV) != "0",
            triton_ws=getenv(WS_ENV) == "1",
            autotune=getenv(AUTOTUNE_ENV) == "1",
            interpret=getenv(INTERPRET_ENV) == "1" if interpret is None else interpret,
            table=getenv(dispatch_table.TABLE_ENV) or None,
        )


@dataclass(frozen=True)
class Choice:
    """The path one call takes and its launch config.

    ``config``: the Triton kernel's (None for ``autotune`` and ``gluon``). ``variant``,
    ``overrides`` and ``gluon_config``: the Gluon kernel's (``overrides`` as passed to
    ``gluon_config``, which gives ``gluon_config``). ``source``: where the config comes
    from ("PINNED[sm_90]", "WS_PINNED", "fallback", "FASTER", ...).
    """

    path: str  # POINTER, TMA_WS, AUTOTUNE, INTERPRET, GLUON or SPLIT_KV
    source: str
    config: triton.Config | None = None
    variant: str | None = None
    overrides: tuple[tuple[str, int], ...] = ()
    gluon_config: tuple[tuple[str, int], ...] = ()

    @property
    def kernel(self) -> Literal["triton", "gluon"]:
        return "gluon" if self.path == GLUON else "triton"

    @property
    def label(self) -> str:
        """The path as resource records name it: "pointer", "tma_ws", "gluon-ws", ..."""
        return f"{GLUON}-{self.variant}" if self.path == GLUON else self.path


# ----------------------------------------------------------------------------------------
# The Triton kernel's configs
# ----------------------------------------------------------------------------------------


def triton_config(block_m: int, block_n: int, num_warps: int, num_stages: int) -> triton.Config:
    return triton.Config(
        {"BLOCK_M": block_m, "BLOCK_N": block_n}, num_warps=num_warps, num_stages=num_stages
    )


# Hopper search space (H100/H200: 132 SMs, 227 KB shared memory per block). Small on
# purpose: each config costs a compile and about 0.1 s of timing per autotune key.
# BLOCK_N never exceeds BLOCK_M, which keeps the causal split to at most
# BLOCK_M / BLOCK_N masked tiles per row block.
CONFIGS: list[triton.Config] = [
    triton_config(block_m, block_n, num_warps, num_stages)
    for block_m, block_n, num_warps in (
        (64, 64, 4),
        (128, 32, 4),
        (128, 64, 4),
        (128, 64, 8),
        (128, 128, 8),
    )
    for num_stages in (2, 3, 4)
    # 128x128 tiles at 4 stages exceed 227 KB for head_dim 128 anyway.
    if not (block_n == 128 and num_stages == 4)
] + [
    # The only tile here that holds head_dim 256 within Ada's 99 KB per block.
    triton_config(64, 32, 4, 2),
]

# Under the interpreter every op is a NumPy call per program: small tiles keep the
# CPU tests fast, and num_warps/num_stages mean nothing there.
INTERPRET_CONFIG = triton_config(16, 16, 1, 1)

# The last resort when a pinned config does not compile for lack of resources.
FALLBACK_CONFIG = triton_config(64, 32, 4, 1)


def smem_bytes(config: triton.Config, head_dim: int, elem_size: int = 2) -> int:
    """Shared memory estimate: a Q tile plus num_stages buffered K and V tiles.

    The compiler's own figure differs a little (layout conversions, barriers); a
    config that slips through and does not fit fails to compile, and both the
    autotuner and the pinned path handle that.
    """
    block_d: int = triton.next_power_of_2(head_dim)
    block_m: int = config.kwargs["BLOCK_M"]
    block_n: int = config.kwargs["BLOCK_N"]
    num_stages: int = config.num_stages
    return (block_m * block_d + 2 * num_stages * block_n * block_d) * elem_size


def _pinned_table() -> dict[tuple[str, int, bool], triton.Config]:
    # sm_90 is measured (below); sm_80 and sm_89 are untimed starting points that fit
    # each part's per-block shared memory with margin (no such GPU at hand).
    by_arch = {
        # H100/H200, 227 KB per block. Measured on H100 80GB HBM3 (2026-11-26,
        # benchmarks/tune_triton.py, do_bench median): 64x64, 4 warps, 3 stages was the
        # best of 15 configs on 7 of 8 shapes (4x32x4096x128: 2.27 ms vs 2.56 ms for
        # 128x64/8 warps); causal hd64 prefers 4 stages (0.0110 vs 0.0114 ms at S=512).
        "sm_90": {
            32: triton_config(64, 64, 4, 3),
            64: triton_config(64, 64, 4, 3),
            96: triton_config(64, 64, 4, 3),
            128: triton_config(64, 64, 4, 3),
            256: triton_config(64, 32, 4, 2),
        },
        # A100, 163 KB per block.
        "sm_80": {
            32: triton_config(128, 64, 4, 3),
            64: triton_config(128, 64, 4, 3),
            96: triton_config(128, 64, 8, 2),
            128: triton_config(128, 64, 8, 2),
            256: triton_config(64, 32, 4, 2),
        },
        # L4 / RTX 4090, 99 KB per block.
        "sm_89": {
            32: triton_config(128, 64, 4, 2),
            64: triton_config(128, 64, 4, 2),
            96: triton_config(64, 64, 4, 2),
            128: triton_config(64, 64, 4, 2),
            256: triton_config(64, 32, 4, 2),
        },
    }
    table = {
        (arch, head_dim, causal): config
        for arch, table in by_arch.items()
        for head_dim, config in table.items()
        for causal in (False, True)
    }
    table[("sm_90", 64, True)] = triton_config(64, 64, 4, 4)
    return table


PINNED: dict[tuple[str, int, bool], triton.Config] = _pinned_table()

# The TMA + warp-specialized path (sm_90 only; non-causal, seq_k a multiple of BLOCK_N):
# head_dim -> config, num_warps=4 per consumer group (12 warps in all). 128x128 with 2
# stages was the best of five on H200 (2026-11-26): 2.09 ms at 4x32x4096x128 vs 2.36 ms
# for 128x64; num_stages=3 gave wrong results with triton 3.6 (rel err inf).
WS_PINNED: dict[int, triton.Config] = {128: triton_config(128, 128, 4, 2)}
# Below this many keys the pointer path wins: at S=1024 (hd 64) warp specialization took
# 0.0202 ms vs 0.0186 ms, at S=2048 (hd 128) 0.0732 vs 0.0769 ms (H200, 2026-11-26).
WS_MIN_SEQ_K = 2048


def pinned(
    capability: int, head_dim: int, causal: bool, elem_size: int, smem_budget: int
) -> tuple[triton.Config, str]:
    """The pointer path's config without autotuning, and its source.

    An architecture missing from ``PINNED`` (sm_86, sm_100, sm_120, ...) borrows the
    entry of the nearest listed one that fits ``smem_budget`` (shared memory per block):
    Hopper's for newer parts, Ampere's and then Ada's for older ones; else the fallback.
    """
    nearest = ("sm_90", "sm_80", "sm_89") if capability >= 90 else ("sm_80", "sm_89", "sm_90")
    for arch in (f"sm_{capability}", *nearest):
        config = PINNED.get((arch, head_dim, causal))
        if config is not None and smem_bytes(config, head_dim, elem_size) <= smem_budget:
            return config, f"PINNED[{arch}]"
    return FALLBACK_CONFIG, "fallback"


# ----------------------------------------------------------------------------------------
# The Gluon kernel's configs
# ----------------------------------------------------------------------------------------

VARIANTS = (
    "ws",
    "ws-pingpong",
    "ws-persistent",
    "ws-persistent-pingpong",
    "simple",
    "simple-overlap",
)


def gluon_config(
    head_dim: int, causal: bool, variant: str = "ws", **overrides: int
) -> dict[str, int]:
    """The Gluon kernel's tile and pipeline choice per head_dim (BLOCK_N, STAGES, registers).

    Shared memory per CTA (fp16): Q 2 x 64 x d, then STAGES x (K + V) of BLOCK_N x d.
    hd 128: 32 KB + 3 x 64 KB = 224 KB; hd 64: 16 KB + 4 x 32 KB = 144 KB (of 227 KB).
    The persistent variants add O's own buffers (2 x 64 x d) and a second pair of Q
    buffers (``Q_BUFFERS``): hd 128 with 2 stages, 64 + 32 + 128 = 224 KB.
    ``GROUP_PAIRS`` (the per-tile grids: the one-warpgroup variants, "ws" and
    "ws-pingpong"; causal): (batch, head) pairs per group of the grid, 0 for the
    launcher's choice (``causal_group``).
    Registers: 12 warps (two consumer warpgroups, the producer's warp rounded up to a
    warpgroup) share 64K registers. With maxnreg=168 triton gives the producer 24, the
    worker consumer 232 and the default-partition consumer the rest (248): FA3 uses
    240 / 24-56. No spills (tests/test_gluon_compile.py).
    """
    del causal  # same tiles for both (FA3 narrows BLOCK_N for causal hd 128: 128 vs 176)
    if variant.startswith("simple"):
        cfg = {
            "BLOCK_N": 64 if head_dim == 128 else 128,
            "STAGES": 3,
            "num_warps": 4,
            "GROUP_PAIRS": 0,
        }
    else:
        cfg = {
            "BLOCK_N": 128,
            # hd 128, 3 stages (224 KB): 0.939 vs 1.038 ms at 4x32x4096 causal, 1.776 vs
            # 1.794 full (H200); 2 stages were the first working choice. The persistent
            # kernel's own O buffers (32 KB) leave room for two.
            "STAGES": (2 if variant.startswith("ws-persistent") else 3) if head_dim == 128 else 4,
            "num_warps": 4,
            "CONSUMER_REGS": 232,
            "PRODUCER_REGS": 24,
            "maxnreg": 168,
        }
        if variant.startswith("ws-persistent"):
            # Two pairs of Q buffers: the producer goes on to the next tile's Q and key
            # tiles without waiting for this tile's last Q·K^T.
            cfg["Q_BUFFERS"] = 2
            # 1: non-causal, where the row blocks do not divide evenly among the CTAs,
            # cut the key tiles into equal runs instead (a row block cut in two is
            # merged through a global workspace); see split_runs.
            cfg["SPLIT_KEYS"] = 0
            # Causal, from one round of row blocks to this many rounds: deal units of a
            # heavy and a light row block instead of row blocks heaviest first
            # (paired_deal); 0: never. H200, head_dim 128, 8 rounds
            # (docs/data/h200-2026-11-28/gluon-causal-paired-deal-1936.txt): 4-22% less
            # time from 256 to 1024 row blocks, level at 2048, 2.8% more at 4096.
            cfg["PAIRED_ROUNDS"] = 8
        else:  # the per-tile grid
            cfg["GROUP_PAIRS"] = 0
    # 1: FlashAttention-4's lazy O rescale (a row's max moves only when it rises by more
    # than gluon_flash_fwd.RESCALE_SLACK; a thread skips O's multiply when its rows kept
    # theirs). H200, 8 interleaved rounds, on and off in the same rounds
    # (docs/data/h200-2026-11-28/gluon-lazy-rescale-per-thread-1743.txt): 1-3% less time
    # for the persistent kernel at head_dim 128, 0.5-0.7% for the per-tile grid where it
    # is dispatched, about 1% for the one-warpgroup kernel at 64 causal. The ping-pong
    # persistent kernel at 64 (the only two-warpgroup kernel dispatched there) took
    # 1.2-3.9% more: per key tile a thread there skips 32 multiplies for 64 exponentials
    # (64 for 64 at head_dim 128), and the branch's convergence barrier costs more. So
    # off for the two-warpgroup kernels at 64. The one-warpgroup kernel non-causal was
    # not timed apart; the PR check found its cases unchanged or inconclusive (0.994x to
    # 1.011x; gluon-lazy-rescale-pr-check-1753.txt).
    cfg["LAZY_RESCALE"] = 0 if head_dim == 64 and not variant.startswith("simple") else 1
    unknown = set(overrides) - set(cfg)
    if unknown:
        raise ValueError(f"config overrides {sorted(unknown)} unknown for variant {variant!r}")
    cfg = {**cfg, **overrides}
    if variant == "simple-overlap" and cfg["STAGES"] < 2:
        # Its loop refills a slot only after waiting for the next tile: with one slot
        # that tile never comes.
        raise ValueError(f"variant {variant!r} needs STAGES >= 2, got {cfg['STAGES']}")
    return cfg


# Where the Gluon kernel was measured faster than the portable Triton kernel, and with
# which variant: (head_dim, causal) -> (smallest seq_q * seq_k measured, variant,
# config overrides). The entry point ("auto") takes it from that product up (and from a
# FASTER_FROM tier's, below); the gluon_flash name takes the variant at any length. H200, 2026-11-26
# (docs/notes/gluon-kernel.md, CUDA-graph medians, three runs): hd 128 at S = 2048-16384
# took 0.70-0.87x the Triton kernel's time (0.98x once) and 0.80-1.00x cuDNN's; hd 64 at
# S = 1024 with the plain kernel 0.90-0.94x Triton's (64-key tiles for causal; parity
# with cuDNN at 4x16x1024 causal, 0.93x at 1x16x1024). The launch plan keeps encoded TMA
# descriptors, so the Gluon launch costs no more host time than the Triton one. Shapes
# below the smallest measured product keep the Triton kernel (launch-bound; it is ahead
# of cuDNN there).
# hd 64 causal: the one-warpgroup kernel with intra-warpgroup overlap and 64-key tiles,
# H100 2026-11-26 (docs/data/gluon-h100/): 0.0336 vs 0.0348 ms (plain, 64-key tiles)
# at (4,16,1024,64), 0.1060 vs 0.1163 at (8,32,1024,64) bf16; non-causal it tied the
# plain kernel (0.0127 both) with 128-key tiles and lost with 64.
# hd 128 non-causal: the persistent kernel, H100 2026-11-26, side by side with cuDNN in
# 25 interleaved rounds (docs/data/gluon-h100/persistent/): 0.972x [0.963, 0.981] at
# (2,8,2048,128) and 0.970x [0.962, 0.978] at (4,32,4096,128), where the per-tile grid
# measured 1.009x and 1.001x in the same rounds.
# hd 128 causal: the persistent kernel (tiles of L2-sized head groups, heaviest first),
# H100 2026-11-27, side by side with cuDNN in 8 interleaved rounds
# (docs/data/h100-2026-11-27/gluon-persistent-causal-1346.txt): 0.847x at (2,8,2048,128)
# and 0.930x at (4,32,4096,128), where the per-tile grid measured 0.935x and 0.982x;
# from 8192^2 (FASTER_FROM) the per-tile grid again, whose hardware block scheduler
# balances row blocks of 1 to 128 key tiles better than a static dealing: 0.916x vs
# 0.947x at (1,32,8,8192,128) GQA, 0.863x vs 1.037x at (1,16,16,16384,128).
FASTER: dict[tuple[int, bool], tuple[int, str, dict[str, int]]] = {
    (128, False): (960 * 960, "ws-persistent", {}),
    (128, True): (960 * 960, "ws-persistent", {}),
    (64, False): (1024 * 1024, "simple", {}),
    (64, True): (1024 * 1024, "simple-overlap", {"BLOCK_N": 64}),
}
ROWS_PER_TILE = dispatch_table.ROWS_PER_TILE  # query rows of a two-warpgroup variant's tile


class Tier(NamedTuple):
    """Another variant than FASTER's, from a product seq_q * seq_k and a count of CTA tiles
    (batch x heads x seq_q / ROWS_PER_TILE, rounded up) up."""

    smallest_product: int
    smallest_tiles: int
    variant: str
    overrides: dict[str, int]


# From a larger seq_q * seq_k (and tile count) up, another variant than FASTER's (the
# last that applies), or FASTER's own below FASTER's product.
# hd 128 from 512^2 and 256 tiles (FASTER's variant, below its 960^2): H200 2026-11-29,
# the entry point beside both kernels by name in 3 interleaved rounds
# (benchmarks/side_by_side.py --set entry-grid and entry-small,
# docs/data/h200-2026-11-29/entry-grid.jsonl.gz, entry-small.jsonl.gz). At (4,16,16,S,128) bf16
# the Gluon kernel took 0.73-0.76x the Triton kernel's time from S = 512 to 2047, causal
# or not, where the entry point took the Triton kernel below 2048^2 (1.2-1.4x the
# fastest of its kernels: the cliff at 2048). With 8 or 16 (batch, head) pairs (32 to 64
# tiles) the Triton kernel stays ahead at 512 (8.8 vs 11.0 us) and the two tie from 1023
# (16.8 both at (1,8,8,1023,128) causal): hence 960^2 for any count.
# hd 64 non-causal from 256 tiles (two per SM of an H100 or H200) and 256^2: the persistent
# kernel with the scheduler barrier and two pairs of Q buffers, H200 2026-11-27, side by
# side with cuDNN in 6 interleaved rounds (docs/data/h200-2026-11-27/gluon-hd64-tiles-2309.txt):
# on the five shapes whose choice this changes, 0.949-1.021x against 0.994-1.103x for the
# choice before (the Triton kernel below 1024^2, the plain one-warpgroup kernel above),
# e.g. (16,16,16,512,64) 0.992x vs 1.054x; at 128 tiles ((1,16,16,1024,64)) 1.000x
# against the plain kernel's 0.913x through the entry point (0.950x by name). Longer
# lengths with fewer than 256 row blocks (e.g. (1,8,8,2048,64), which the persistent
# kernel ran before, from 2048^2 at any count) follow the 128-row-block measurement
# there: not measured on their own.
# hd 128 non-causal from 4096^2 and 1024 tiles: the persistent kernel ending on equal
# runs of key tiles (SPLIT_KEYS; where the row blocks divide evenly among the CTAs it
# runs as before), H100 2026-11-28, side by side with cuDNN and the entry point in two
# calls (docs/data/h100-2026-11-28/gluon-split-keys-0554.txt, -goals-0559.txt):
# (1,16,16,16384,128) fp16 0.927x and 0.937x against 0.967x and 0.965x,
# (4,32,32,4096,128) 0.942x and 0.938x against 0.948x and 0.955x, GQA (1,32,4,16384,128)
# 0.951x and 0.946x against 0.952x and 0.959x. Not below: (2,8,8,2048,128) took 1.217x
# against 0.956x (short key ranges: the cut's merge and the shorter parts cost more than
# the last round's idle CTAs).
# hd 128 causal from 8192^2: the per-tile grid, in groups of 4 (batch, head) pairs with
# the heaviest row blocks first since 2026-11-28 (H200, 8 interleaved rounds,
# docs/data/h200-2026-11-28/gluon-causal-ws-grid-groups-1534.txt: 0.826x to 0.886x cuDNN
# against the plain order's 0.852x to 0.899x); below 8192^2 the persistent kernel stays
# ahead of it (0.904x against 0.947x at (4,32,4096,128)).
# hd 64 causal from 256^2 and 256 tiles: the one-warpgroup kernel (FASTER's variant, below
# its product), its grid in groups of (batch, head) pairs with the heaviest row blocks
# first (kernels/flash_plan.causal_group), H200 2026-11-28, side by side with cuDNN
# in 8 interleaved rounds (docs/data/h200-2026-11-28/gluon-causal-grid-order-1357.txt):
# 0.699x at (4,16,16,512,64), 0.727x at (8,16,16,256,64), 0.942x at (16,16,16,512,64),
# 0.798x at (4,32,8,512,64) GQA, where the Triton kernel took 0.956x, 1.103x, 1.173x and
# 1.091x; at 32 tiles ((1,8,8,512,64)) the two tie (0.734x both), so the Triton kernel
# stays there.
FASTER_FROM: dict[tuple[int, bool], tuple[Tier, ...]] = {
    (128, False): (
        Tier(512 * 512, 256, "ws-persistent", {}),
        Tier(4096 * 4096, 1024, "ws-persistent", {"SPLIT_KEYS": 1}),
    ),
    (128, True): (Tier(512 * 512, 256, "ws-persistent", {}), Tier(8192 * 8192, 0, "ws", {})),
    (64, False): (Tier(256 * 256, 256, "ws-persistent-pingpong", {}),),
    (64, True): (Tier(256 * 256, 256, "simple-overlap", {"BLOCK_N": 64}),),
}


def tiles_of(batch_heads: int, seq_q: int) -> int:
    """CTA tiles of ROWS_PER_TILE query rows: what a persistent grid deals out."""
    return batch_heads * -(-seq_q // ROWS_PER_TILE)


def _tier(head_dim: int, causal: bool, seq_q: int, seq_k: int, batch_heads: int) -> Tier | None:
    """FASTER_FROM's last tier that these lengths and tiles reach, if any."""
    found = None
    tiles = tiles_of(batch_heads, seq_q)
    for tier in FASTER_FROM.get((head_dim, causal), ()):
        if seq_q * seq_k >= tier.smallest_product and tiles >= tier.smallest_tiles:
            found = tier
    return found


def faster_variant(
    head_dim: int, causal: bool, seq_q: int, seq_k: int, batch_heads: int
) -> tuple[str, dict[str, int]]:
    """The Gluon variant and config overrides for (head_dim, causal) at these lengths and
    batch x heads: FASTER's, or FASTER_FROM's last tier that they reach."""
    tier = _tier(head_dim, causal, seq_q, seq_k, batch_heads)
    if tier is not None:
        return tier.variant, tier.overrides
    _, variant, overrides = FASTER[(head_dim, causal)]
    return variant, overrides


def gluon_choice(head_dim: int, causal: bool, variant: str, overrides: Mapping[str, int]) -> Choice:
    """The Gluon kernel's ``Choice`` for an explicit variant (ValueError for a bad one)."""
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    cfg = gluon_config(head_dim, causal, variant, **overrides)
    return Choice(
        path=GLUON,
        source="FASTER",
        variant=variant,
        overrides=tuple(sorted(overrides.items())),
        gluon_config=tuple(cfg.items()),
    )


# ----------------------------------------------------------------------------------------
# The Gluon launcher's host rules (pure: the launcher and the launch paths share them)
# ----------------------------------------------------------------------------------------


def causal_group(pairs: int, n_m: int, wanted: int, ctas_per_sm: int, sms: int) -> int:
    """(batch, head) pairs per group of a causal per-tile grid (0: the plain order, a
    head's row blocks together) of ``pairs`` pairs of ``n_m`` row blocks on ``sms`` SMs,
    rounded down to a divisor of the pair count so that every group is whole."""
    # `wanted` 0: measured on an H200 (docs/notes/gluon-kernel-measurements.md,
    # "Causal one-warpgroup grid in groups" and "Causal per-tile grid in groups"). At
    # most one CTA an SM: the order changes nothing. Up to about two waves: one group, so
    # the first CTAs each SM takes mix heavy and light row blocks (in the plain order an
    # SM of the one-warpgroup grid, four CTAs an SM, can take four of the same weight).
    # More, with short pairs (under 16 row blocks): the plain order (the one-warpgroup
    # grid grouped measured 3-13% slower). More, with long pairs: the one-warpgroup grid
    # about 1024 CTAs a group, so that each group's last CTAs are light ones; the
    # two-warpgroup grid (one CTA an SM; measured on pairs of 64 to 256 row blocks) 4
    # pairs, so the last group's heaviest row blocks start long before the end (in the
    # plain order the last head's start about one row block's time before the others end).
    if not wanted:
        ctas = pairs * n_m
        if ctas <= sms:
            return 0
        if ctas <= 2 * ctas_per_sm * sms:
            wanted = pairs
        elif n_m < 16:
            return 0
        else:
            wanted = 4 if ctas_per_sm == 1 else 1024 // n_m
    group = max(1, min(pairs, wanted))
    while pairs % group:
        group -= 1
    # The grid's third dimension takes at most 65535 groups.
    return group if pairs // group <= 65535 else 0


def split_runs(causal: bool, tiles: int, key_tiles: int, ctas: int) -> bool:
    """Whether the persistent kernel ends on equal runs of key tiles (SPLIT_KEYS):
    non-causal, more row blocks than CTAs and not a multiple of them (else each CTA has
    the same whole row blocks already; with at least a round's row blocks in the runs,
    a run spans a row block or more, so a row block is cut at most once), and the run
    arithmetic within int32."""
    return (
        not causal and tiles > ctas and tiles % ctas != 0 and tiles * key_tiles * (ctas + 1) < 2**31
    )


def paired_deal(causal: bool, tiles: int, ctas: int, rounds: int) -> bool:
    """Whether the persistent kernel deals causal row blocks in units of a heavy and a
    light one (PAIRED; ``_paired_units``): more than one round of them and at most
    ``rounds`` (the config's ``PAIRED_ROUNDS``). More rounds: row blocks heaviest first,
    whose last rounds are light ones, where a unit of two is a coarse last round."""
    return causal and ctas < tiles <= rounds * ctas


# ----------------------------------------------------------------------------------------
# Decode: the split-KV kernel (kernels/triton_decode.py)
# ----------------------------------------------------------------------------------------

# The Triton kernel and the entry point take the split-KV kernel for non-causal calls of
# at most DECODE_MAX_SEQ_Q queries against at least DECODE_MIN_SEQ_K keys per 4 queries
# (decode_takes). (Top-left causal calls of so few queries see only the first keys: the
# row-block kernels.) H200, side by side with SDPA (benchmarks/side_by_side.py --set
# decode-short, docs/data/h200-2026-11-29/decode-sweep-a.jsonl.gz): at 4x32x8 heads, one query,
# the split kernel took 0.86x SDPA's time at 512 keys (hd 64; 0.80x at hd 128) where the
# row-block kernels took 1.07-1.44x; 16 queries, it was behind them below 2048 keys.
DECODE_MAX_SEQ_Q = 16
DECODE_MIN_SEQ_K = 512
SM_COUNT = 132  # H100 SXM and H200: what a GPU-less choice sizes grids by

# head_dim -> the split kernel's config: BLOCK_M is the most packed query rows a program
# takes (fewer when the group's rows are fewer: at least 16, the smallest dot). H200,
# 4 interleaved rounds with SDPA (docs/data/h200-2026-11-29/decode-sweep-b.jsonl.gz): hd 128,
# 128-key tiles in 3 stages: 0.990x, 0.997x and 0.088x SDPA's time at (4,32,8,1,32768),
# (64,32,8,1,4096) and (1,64,8,4,131072) bf16, where 64-key tiles in 4 stages took 1.060x,
# 1.005x, 0.103x; hd 64, 128-key tiles in 4 stages: 0.997x at (4,32,8,1,32768) fp16 and
# 1.014x at (32,16,16,1,16384) bf16 (64-key tiles: 1.407x and 1.020x).
DECODE_CONFIGS: dict[int, triton.Config] = {
    32: triton_config(64, 128, 4, 4),
    64: triton_config(64, 128, 4, 4),
    96: triton_config(64, 128, 4, 3),
    128: triton_config(64, 128, 4, 3),
    256: triton_config(64, 64, 4, 2),  # 2 x 64 x 256 x 2 B a stage: 128 KB in two
}
DECODE_INTERPRET_CONFIG = triton_config(16, 16, 1, 1)


def decode_choice(head_dim: int, *, interpret: bool) -> Choice:
    """The split-KV kernel's ``Choice`` for ``head_dim``."""
    if interpret:
        return Choice(SPLIT_KV, "DECODE_INTERPRET_CONFIG", DECODE_INTERPRET_CONFIG)
    return Choice(SPLIT_KV, "DECODE_CONFIGS", DECODE_CONFIGS[head_dim])


def decode_takes(causal: bool, seq_q: int, seq_k: int) -> bool:
    """Whether the Triton kernel's and the entry point's call takes the split-KV kernel."""
    return (
        not causal and seq_q <= DECODE_MAX_SEQ_Q and seq_k >= DECODE_MIN_SEQ_K * max(1, seq_q // 4)
    )


def decode_splits(ctas: int, key_tiles: int, sms: int, most: int = 128) -> int:
    """Splits of the keys for ``ctas`` programs of one split each (batch x KV heads x
    packed row blocks) over ``key_tiles`` key tiles on ``sms`` SMs: FlashAttention's
    rule. One when the programs already fill 80% of the SMs; else the fewest splits
    whose last wave is at least 85% as full as the best count's (at most ``most``, and
    no more than the key tiles)."""
    if ctas >= 0.8 * sms or key_tiles <= 1:
        return 1
    counts = range(1, min(most, key_tiles) + 1)

    def fill(splits: int) -> float:
        waves = ctas * splits / sms
        return waves / -(-waves // 1)

    best = max(fill(n) for n in counts)
    return next(n for n in counts if fill(n) >= 0.85 * best)


# ----------------------------------------------------------------------------------------
# The chooser
# ----------------------------------------------------------------------------------------


def _gluon_unsupported(
    head_dim: int, seq_q: int, seq_k: int, capability: int | None, tma_aligned: bool
) -> str | None:
    if capability != GLUON_CAPABILITY:
        where = "no GPU" if capability is None else f"sm_{capability}"
        return f"the Gluon kernel needs sm_90 (wgmma, TMA), this is {where}"
    if head_dim not in GLUON_HEAD_DIMS:
        return f"q has head_dim {head_dim}; the Gluon kernel takes {GLUON_HEAD_DIMS}"
    if seq_q < 1 or seq_k < 1:
        return "the Gluon kernel needs seq_q, seq_k >= 1"
    if not tma_aligned:
        return "q, k, v, out: the Gluon kernel needs 16-byte aligned rows and bases (TMA)"
    return None


def _auto_takes_gluon(
    head_dim: int,
    causal: bool,
    seq_q: int,
    seq_k: int,
    batch_heads: int,
    table: DispatchTable | None,
    dtype: str,
    group: int,
) -> bool:
    """Whether the entry point runs the Gluon kernel here: the table's measured kernel
    where it has points for (head_dim, causal), else FASTER's product or a FASTER_FROM
    tier."""
    faster = FASTER.get((head_dim, causal))
    if faster is None:
        return False
    if table is not None:
        measured = table.kernel_for(
            head_dim=head_dim, causal=causal, dtype=dtype, seq_q=seq_q, seq_k=seq_k,
            batch_heads=batch_heads, group=group,
        )  # fmt: skip
        if measured is not None:
            return measured == "gluon"
    return (
        seq_q * seq_k >= faster[0] or _tier(head_dim, causal, seq_q, seq_k, batch_heads) is not None
    )


def choose(
    *,
    head_dim: int,
    causal: bool,
    seq_q: int,
    seq_k: int,
    batch_heads: int,
    elem_size: int,
    capability: int | None,
    smem_budget: int,
    tma_aligned: bool,
    env: Env,
    kernel: Kernel = "auto",
    table: DispatchTable | None = None,
    dtype: str = "",
    group: int = 1,
) -> Choice:
    """The path and config of one call (see the module docstring).

    ``batch_heads``: batch x query heads (with seq_q, the tiles a persistent grid deals
    out); ``capability``: 90 for sm_90, None off a GPU; ``smem_budget``: shared memory a block
    may use on it; ``tma_aligned``: q, k, v and out have a unit last stride and 16-byte
    aligned rows and bases. ``kernel="gluon"`` raises ``Unsupported`` where the Gluon
    kernel cannot run; the others always choose. ``table``: the GPU model's measured
    choice of kernel for ``"auto"`` (``kernels/dispatch_table.py``; ``dtype`` and
    ``group``, query heads per KV head, locate the call in it); None: ``FASTER`` and
    ``FASTER_FROM`` decide. Does not apply the pointer path's
    ``OutOfResources`` fallback (``FALLBACK_CONFIG``), which only a compile can tell.
    """
    if kernel == "gluon":
        reason = _gluon_unsupported(head_dim, seq_q, seq_k, capability, tma_aligned)
        if reason is not None:
            raise Unsupported(reason)
        return gluon_choice(
            head_dim, causal, *faster_variant(head_dim, causal, seq_q, seq_k, batch_heads)
        )
    if decode_takes(causal, seq_q, seq_k) and (capability is not None or env.interpret):
        return decode_choice(head_dim, interpret=env.interpret)
    if env.interpret:
        return Choice(INTERPRET, "INTERPRET_CONFIG", INTERPRET_CONFIG)
    if env.autotune:
        return Choice(AUTOTUNE, "CONFIGS")
    if capability is None:
        raise Unsupported("the Triton kernel needs a CUDA GPU (or TRITON_INTERPRET=1)")
    if (
        kernel == "auto"
        and env.gluon
        and _gluon_unsupported(head_dim, seq_q, seq_k, capability, tma_aligned) is None
        and _auto_takes_gluon(head_dim, causal, seq_q, seq_k, batch_heads, table, dtype, group)
    ):
        return gluon_choice(
            head_dim, causal, *faster_variant(head_dim, causal, seq_q, seq_k, batch_heads)
        )
    ws = WS_PINNED.get(head_dim)
    if (
        ws is not None
        and env.triton_ws
        and not causal
        and capability == 90
        and seq_k >= WS_MIN_SEQ_K
        and seq_k % ws.kwargs["BLOCK_N"] == 0
        and tma_aligned
    ):
        return Choice(TMA_WS, "WS_PINNED", ws)
    config, source = pinned(capability, head_dim, causal, elem_size, smem_budget)
    return Choice(POINTER, source, config)
