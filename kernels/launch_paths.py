"""The launch paths of the gated kernels: which compiled kernel, config and host rule one
call takes on a GPU arch, as a short label, without a GPU.

A path is what the dispatch decides before anything runs: for ``triton_flash`` the path
and config ``flash_plan.choose`` picks; for ``gluon_flash`` the variant, its config and
the launcher's host rules (equal runs of key tiles, the causal deal in pairs, a grid in
groups of (batch, head) pairs); for ``cuda_flash`` the instantiation the dispatcher of
``csrc/`` launches (the mma.sync kernel below ``kHopperMinWork``, else the Hopper
kernel's tile, stages, cluster, narrowed last key block and causal tile counter, read
from the header: ``kernels/cuda_flash_plan.py``). Each label names the dtype, head_dim
and causal flag, whose instantiations differ. ``choice_for`` is the Triton and Gluon
kernels' choice on an arch without its GPU, which the compiler-resource records
(``kernel_reports/``) compile.

``launch_path(kernel, params, arch)`` labels one workload (a suite case's ``params()``);
``path_workloads()`` is a grid of workloads around every boundary of those tables
(lengths beside each tile, tier and seq_k threshold, batch x heads beside each multiple
of the SM count, GQA, decode), from which ``every_path`` collects the paths a gated
kernel has. The guard lists the paths no case of a suite runs (``guard list
--coverage``); a test keeps the surface suite covering all of them.

Not labelled: the integer specializations triton compiles per call (a length divisible
by 16, one KV head per query head), which the surface meets with odd lengths and GQA
beside each path; the pointer path's ``OutOfResources`` fallback, which only a compile
can tell.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import itertools
import os
from collections.abc import Mapping
from typing import Any

from kernels import cuda_flash_plan, flash_plan
from kernels.arch import max_shared_bytes, parse_arch
from kernels.flash_plan import Choice, Env, Kernel

SM_COUNT = 132  # H100 SXM and H200: what the persistent and grouped grids are sized by
ELEMENT = {"float16": "fp16", "bfloat16": "bf16"}


def _workload(params: Mapping[str, Any]) -> tuple[int, int, int, int, int, int, str, bool]:
    batch, heads, seq_q, head_dim = (int(n) for n in params["shape"])
    seq_k = int(params.get("seq_k", seq_q))
    kv_heads = int(params.get("kv_heads", heads))
    dtype, causal = str(params["dtype"]), bool(params["causal"])
    return batch, heads, kv_heads, seq_q, seq_k, head_dim, dtype, causal


def _head(head_dim: int, dtype: str, causal: bool) -> str:
    return f"d{head_dim} {ELEMENT.get(dtype, dtype)} {'causal' if causal else 'full'}"


def _gluon_importable() -> bool:
    try:
        importlib.import_module("kernels.gluon_flash_fwd")
    except ImportError:
        return False
    return True


def choice_for(
    arch: str,
    kernel: Kernel,
    *,
    head_dim: int,
    causal: bool,
    seq_q: int,
    seq_k: int,
    batch_heads: int,
    elem_size: int = 2,
    tma_aligned: bool = True,
) -> Choice:
    """The choice ``flash_plan.choose`` makes for ``kernel`` on a GPU of ``arch`` (its
    shared memory per block for the device's), with the switches set here (less
    autotuning and the interpreter); before the pointer path's ``OutOfResources``
    fallback, which only a compile can tell (the resource records apply it:
    ``kernel_reports.triton_flash_resources``)."""
    env = dataclasses.replace(Env.read(os.environ.get), autotune=False, interpret=False)
    if kernel == "auto" and not _gluon_importable():
        env = dataclasses.replace(env, gluon=False)
    return flash_plan.choose(
        head_dim=head_dim,
        causal=causal,
        seq_q=seq_q,
        seq_k=seq_k,
        batch_heads=batch_heads,
        elem_size=elem_size,
        capability=parse_arch(arch),
        smem_budget=max_shared_bytes(arch),
        tma_aligned=tma_aligned,
        env=env,
        kernel=kernel,
    )


def _choice(arch: str, kernel: Kernel, params: Mapping[str, Any]) -> Choice:
    batch, heads, _, seq_q, seq_k, head_dim, _, causal = _workload(params)
    return choice_for(
        arch,
        kernel,
        head_dim=head_dim,
        causal=causal,
        seq_q=seq_q,
        seq_k=seq_k,
        batch_heads=batch * heads,
    )


def triton_path(params: Mapping[str, Any], arch: str) -> str:
    """``triton_flash``: its path (pointer loads, TMA with warp specialization) and config."""
    choice = _choice(arch, "triton", params)
    _, _, _, _, _, head_dim, dtype, causal = _workload(params)
    config = choice.config
    tile = ""
    if config is not None:
        kw = config.kwargs
        tile = f" {kw['BLOCK_M']}x{kw['BLOCK_N']} w{config.num_warps} s{config.num_stages}"
    return f"triton {choice.path}{tile} {_head(head_dim, dtype, causal)}"


def gluon_path(params: Mapping[str, Any], arch: str) -> str:
    """``gluon_flash``: its variant, tiles, pipeline and the launcher's host rules."""
    if parse_arch(arch) != flash_plan.GLUON_CAPABILITY:
        return f"gluon unavailable on {arch}"
    choice = _choice(arch, "gluon", params)
    return _gluon_label(choice, params)


def _gluon_label(choice: Choice, params: Mapping[str, Any]) -> str:
    batch, heads, _, seq_q, seq_k, head_dim, dtype, causal = _workload(params)
    cfg = dict(choice.gluon_config)
    variant = str(choice.variant)
    parts = [f"gluon {variant}", _head(head_dim, dtype, causal), f"N{cfg['BLOCK_N']}"]
    parts.append(f"S{cfg['STAGES']}")
    if cfg.get("LAZY_RESCALE"):
        parts.append("lazy")
    pairs = batch * heads
    if variant.startswith("ws-persistent"):
        n_m = -(-seq_q // flash_plan.ROWS_PER_TILE)
        tiles = n_m * pairs
        ctas = min(tiles, SM_COUNT)
        key_tiles = -(-seq_k // cfg["BLOCK_N"])
        if cfg["SPLIT_KEYS"] and flash_plan.split_runs(causal, tiles, key_tiles, ctas):
            parts.append("split")
        if flash_plan.paired_deal(causal, tiles, ctas, cfg["PAIRED_ROUNDS"]):
            parts.append("paired")
    elif causal:
        simple = variant.startswith("simple")
        rows = flash_plan.ROWS_PER_TILE // 2 if simple else flash_plan.ROWS_PER_TILE
        n_m = -(-seq_q // rows)
        per_sm = 4 if simple else 1
        group = flash_plan.causal_group(pairs, n_m, cfg["GROUP_PAIRS"], per_sm, SM_COUNT)
        parts.append("grouped" if group else "plain")
    return " ".join(parts)


@functools.cache
def _cuda_sources() -> tuple[str, str]:
    from kernels import cuda_flash

    return (
        (cuda_flash.CSRC / "flash_fwd.h").read_text(encoding="utf-8"),
        cuda_flash.HOPPER_KERNEL_HEADER.read_text(encoding="utf-8"),
    )


def cuda_path(params: Mapping[str, Any], arch: str) -> str:
    """``cuda_flash``: the instantiation and host rule its dispatcher takes."""
    batch, heads, _, seq_q, seq_k, head_dim, dtype, causal = _workload(params)
    header, hopper = _cuda_sources()
    head = _head(head_dim, dtype, causal)
    if not cuda_flash_plan.uses_hopper_kernel(params, arch, header):
        return f"cuda mma_sync {head}"
    block_m, block_n, stages = cuda_flash_plan.hopper_tile(hopper, head_dim, causal, seq_q, seq_k)
    parts = [f"cuda hopper {head} {block_m}x{block_n} s{stages}"]
    cluster = cuda_flash_plan.hopper_cluster(hopper, head_dim, causal, seq_q, seq_k)
    if cluster > 1:
        parts.append(f"cluster{cluster}")
    last = cuda_flash_plan.hopper_last_keys(hopper, causal, seq_k, block_n)
    if last < block_n:
        parts.append(f"last{last}")
    tiles = -(-seq_q // block_m) * heads * batch
    dynamic = cuda_flash_plan.header_macros(hopper).get("FLASH_SM90_DYNAMIC_CAUSAL", 0)
    if causal and dynamic and tiles > SM_COUNT:
        parts.append("tile-counter")
    return " ".join(parts)


PATHS = {"triton_flash": triton_path, "gluon_flash": gluon_path, "cuda_flash": cuda_path}


def launch_path(kernel: str, params: Mapping[str, Any], arch: str) -> str:
    """The launch path of ``kernel`` (a registry name) for one workload on ``arch``."""
    return PATHS[kernel](params, arch)


# Lengths beside every boundary of the tables: the tiles (64, 128, 192 keys), seq_k
# thresholds (1024, 2048), the products of FASTER and FASTER_FROM (256^2 to 8192^2), and
# the short and long ends people run.
LENGTHS = (
    1, 16, 17, 64, 127, 128, 129, 192, 193, 255, 256, 257, 320, 384, 385, 511, 512, 513,
    1023, 1024, 1025, 1151, 1152, 2047, 2048, 2049, 4095, 4096, 4097, 8191, 8192, 8193,
    16384, 32768,
)  # fmt: skip
DECODE_QUERIES = (1, 4, 16)
# (batch, heads, kv_heads): from a single (batch, head) pair to 2048, beside the multiples
# of the SM count that the persistent deal and the grouped grids turn on, MHA and GQA.
HEADS = (
    (1, 8, 8), (1, 16, 16), (1, 32, 8), (1, 32, 32), (2, 16, 16), (1, 64, 8), (4, 32, 8),
    (4, 32, 32), (8, 32, 32), (16, 32, 32), (32, 32, 32), (64, 32, 8),
)  # fmt: skip


def path_workloads() -> list[dict[str, Any]]:
    """The grid ``every_path`` walks: prefill (seq_q = seq_k) at every length of
    ``LENGTHS``, decode (a few queries against each longer key length), both head dims,
    dtypes and causal flags, every batch x heads of ``HEADS``."""
    lengths = [(n, n) for n in LENGTHS]
    lengths += [(q, k) for q in DECODE_QUERIES for k in LENGTHS if k >= 64 and k != q]
    out = []
    for (batch, heads, kv), (seq_q, seq_k), head_dim, dtype, causal in itertools.product(
        HEADS, lengths, (64, 128), ("float16", "bfloat16"), (False, True)
    ):
        out.append(
            {
                "shape": [batch, heads, seq_q, head_dim],
                "seq_k": seq_k,
                "kv_heads": kv,
                "dtype": dtype,
                "causal": causal,
            }
        )
    return out


def every_path(kernel: str, arch: str) -> frozenset[str]:
    """Every path of ``kernel`` on ``arch`` that a workload of ``path_workloads`` takes."""
    label = PATHS[kernel]
    return frozenset(label(w, arch) for w in path_workloads())


def _work(params: Mapping[str, Any]) -> float:
    batch, heads, _, seq_q, seq_k, head_dim, _, causal = _workload(params)
    return batch * heads * seq_q * seq_k * head_dim / (2.0 if causal else 1.0)


def cheapest_workloads(kernel: str, arch: str) -> dict[str, dict[str, Any]]:
    """For every path of ``kernel`` on ``arch``, the workload of ``path_workloads`` with
    the least work that takes it: a case to add where a suite misses the path."""
    label = PATHS[kernel]
    out: dict[str, dict[str, Any]] = {}
    for w in sorted(path_workloads(), key=_work):
        out.setdefault(label(w, arch), w)
    return out
