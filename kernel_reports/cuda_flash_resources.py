"""Compiler resources of the CUDA C++ FlashAttention forward for one workload and GPU arch.

The registry's ``resources`` hook for ``cuda_flash``: ``resources(params, arch)``
compiles ``csrc/flash_fwd.cu`` for ``arch`` with nvcc and ``-Xptxas -v``, with the
flags and the ``-gencode`` the extension build uses (``cuda_flash.compile_kernel_object``,
``cuda_flash.arch_flags``: sm_90 is built as sm_90a), and returns the record of the
template instantiation a call on the workload launches (dtype, head_dim, causal).

The compile covers every instantiation at once; its report is cached on disk under
``kernel_reports.ptxas.cache_dir()`` by the hash of the sources and flags
(``cuda_flash.source_hash``) and the nvcc version, so each (source, arch) compiles
once. Without nvcc the hook raises ``ResourcesUnavailable`` saying so.

Shared memory is dynamic (``smem_bytes<HEAD_DIM>()`` in the .cu, not in ptxas's
report); it and the tile shape are read from the source's ``TileConfig``
specializations and computed as the launcher does (``dynamic_shared_bytes``). Which
instantiation a workload runs, and the Hopper kernel's tile, cluster and shared memory,
are the dispatcher's rules (``kernels/cuda_flash_plan.py``).
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from kernel_reports.ptxas import (
    PtxasEntry,
    ResourcesUnavailable,
    cached_text,
    parse_ptxas,
    tool_version,
)
from kernels import cuda_flash
from kernels.arch import parse_arch
from kernels.cuda_flash_plan import (
    hopper_cluster,
    hopper_last_keys,
    hopper_shared_bytes,
    hopper_tile,
    uses_hopper_kernel,
)
from kernels.registry import ResourceRecord

_COMPILE_TIMEOUT_S = 600.0
_DTYPES = {"float16": "__half", "bfloat16": "__nv_bfloat16"}
_INSTANCE = re.compile(r"flash_fwd_kernelI(\d+)(\w+?)Li(\d+)ELb([01])E")
_TILE = re.compile(
    r"struct\s+TileConfig<(\d+)>\s*\{\s*static\s+constexpr\s+int\s+kWarps\s*=\s*(\d+);"
    r"\s*static\s+constexpr\s+int\s+kBlockN\s*=\s*(\d+);"
)
NUM_STAGES = 2  # K/V double buffering (load_kv into stage ^ 1), fixed in the .cu


def capability_of(arch: str) -> tuple[int, int]:
    capability = parse_arch(arch)
    return divmod(capability, 10)


def tile_configs(source: str) -> dict[int, tuple[int, int]]:
    """head_dim -> (warps, BLOCK_N) from the ``TileConfig<HEAD_DIM>`` specializations."""
    return {int(hd): (int(w), int(n)) for hd, w, n in _TILE.findall(source)}


def dynamic_shared_bytes(head_dim: int, block_n: int) -> int:
    """``smem_bytes<HEAD_DIM>()``: 2 stages x (K + V) x BLOCK_N x (HEAD_DIM + 8) x 2 B."""
    return NUM_STAGES * 2 * block_n * (head_dim + 8) * 2


def instantiation(symbol: str) -> tuple[str, int, bool] | None:
    """(C++ element type, head_dim, causal) of a mangled ``flash_fwd_kernel<...>``."""
    match = _INSTANCE.search(symbol)
    if match is None:
        return None
    return match.group(2), int(match.group(3)), match.group(4) == "1"


def _report(key: str, source: Path, gencode: str, flags: Sequence[str], nvcc: str) -> str:
    """``nvcc -Xptxas -v`` output of one torch-free source of ``csrc/``, cached on disk."""
    version = tool_version(nvcc)

    def compile_() -> str:
        with tempfile.TemporaryDirectory() as tmp:
            proc = cuda_flash.compile_object(
                source,
                gencode,
                Path(tmp) / "k.o",
                extra_flags=(*flags, "-Xptxas", "-v"),
                nvcc=nvcc,
                timeout=_COMPILE_TIMEOUT_S,
            )
        text = proc.stdout + proc.stderr
        if proc.returncode != 0:
            raise RuntimeError(
                f"nvcc failed for {source.name} {gencode} (rc {proc.returncode}):\n{text[-4000:]}"
            )
        return f"// nvcc {version} {gencode}\n{text}"

    return cached_text(key, compile_)


def ptxas_text(arch: str, *, nvcc: str | None = None) -> str:
    """``nvcc -Xptxas -v`` output of the mma.sync kernel TU for ``arch``, cached on disk."""
    nvcc = nvcc or cuda_flash.find_nvcc()
    if nvcc is None:
        raise ResourcesUnavailable("nvcc not found (set CUDA_HOME or put nvcc on PATH)")
    gencode = cuda_flash.arch_flags(capability_of(arch))[0]
    key = f"cuda_flash-{cuda_flash.source_hash((gencode, tool_version(nvcc)))}-{arch}"
    return _report(key, cuda_flash.KERNEL_SOURCE, gencode, (), nvcc)


def records_from_report(
    text: str, arch: str, params: Mapping[str, Any], source: str, toolchain: str = ""
) -> list[ResourceRecord]:
    """The record of the instantiation ``params``'s workload launches, from a report."""
    batch, heads, seq_q, head_dim = (int(n) for n in params["shape"])
    dtype = str(params.get("dtype", "float16"))
    causal = bool(params.get("causal", False))
    element = _DTYPES.get(dtype)
    if element is None:
        raise ResourcesUnavailable(f"cuda_flash takes float16 or bfloat16, not {dtype}")
    tiles = tile_configs(source)
    if head_dim not in tiles:
        raise ResourcesUnavailable(
            f"cuda_flash has no TileConfig<{head_dim}> (head dims: {sorted(tiles)})"
        )
    warps, block_n = tiles[head_dim]
    block_m = 16 * warps
    wanted = (element, head_dim, causal)
    found: list[PtxasEntry] = [e for e in parse_ptxas(text) if instantiation(e.symbol) == wanted]
    if not found:
        raise RuntimeError(
            f"no ptxas entry for flash_fwd_kernel<{element}, {head_dim}, {causal}> in:\n"
            f"{text[-2000:]}"
        )
    entry = found[0]
    return [
        {
            "arch": arch,
            "kernel": f"flash_fwd_kernel<{element}, {head_dim}, {str(causal).lower()}>",
            "registers": entry.registers,
            "spill_store_bytes": entry.spill_store_bytes,
            "spill_load_bytes": entry.spill_load_bytes,
            "stack_bytes": entry.stack_bytes,
            "shared_bytes": entry.static_shared_bytes + dynamic_shared_bytes(head_dim, block_n),
            "num_warps": warps,
            "num_stages": NUM_STAGES,
            "grid": [-(-seq_q // block_m), heads, batch],
            "config": {"BLOCK_M": block_m, "BLOCK_N": block_n, "target": entry.target},
            "path": "mma_sync",
            "toolchain": toolchain,
        }
    ]


# ---- the Hopper kernel (csrc/flash_fwd_sm90*.cu) ----------------------------------------

_SM90_INSTANCE = re.compile(
    r"flash_fwd_sm90_kernelINS_6TraitsILi(\d+)ELi(\d+)ELi(\d+)ELi(\d+)EN7cutlass\d+(\w+?)"
    r"ELi(\d+)ELi(\d+)EEELb([01])E"
)
_SM90_ELEMENTS = {"float16": "half_t", "bfloat16": "bfloat16_t"}


class HopperInstance(NamedTuple):
    """The template arguments of one ``flash_fwd_sm90_kernel<Traits<...>, causal>``."""

    head_dim: int
    block_m: int
    block_n: int
    stages: int
    element: str  # CUTLASS's type name: half_t, bfloat16_t
    cluster: int
    last_keys: int  # keys the last key block's products run on (block_n, or fewer)
    causal: bool


def hopper_instantiation(symbol: str) -> HopperInstance | None:
    """The template arguments of a mangled Hopper kernel name (ptxas's or cuobjdump's)."""
    m = _SM90_INSTANCE.search(symbol)
    if m is None:
        return None
    return HopperInstance(
        int(m[1]), int(m[2]), int(m[3]), int(m[4]), m[5], int(m[6]), int(m[7]), m[8] == "1"
    )


def hopper_ptxas_text(dtype: str, head_dim: int, *, nvcc: str) -> str:
    """``-Xptxas -v`` of the Hopper TU for one dtype and head_dim, cached on disk."""
    name = f"flash_fwd_sm90_{'fp16' if dtype == 'float16' else 'bf16'}_hdim{head_dim}.cu"
    gencode = cuda_flash.arch_flags(cuda_flash.HOPPER)[0]
    key = f"cuda_flash_sm90-{cuda_flash.source_hash((gencode, tool_version(nvcc), name))}"
    try:
        flags = cuda_flash.hopper_flags()
    except FileNotFoundError as exc:
        raise ResourcesUnavailable(str(exc)) from exc
    return _report(key, cuda_flash.CSRC / name, gencode, flags, nvcc)


def hopper_records(
    text: str, params: Mapping[str, Any], source: str, toolchain: str = ""
) -> list[ResourceRecord]:
    """The record of the Hopper instantiation ``params``'s workload launches."""
    batch, heads, seq_q, head_dim = (int(n) for n in params["shape"])
    seq_k = int(params.get("seq_k", seq_q))
    dtype = str(params.get("dtype", "float16"))
    causal = bool(params.get("causal", False))
    block_m, block_n, stages = hopper_tile(source, head_dim, causal, seq_q, seq_k)
    cluster = hopper_cluster(source, head_dim, causal, seq_q, seq_k)
    last_keys = hopper_last_keys(source, causal, seq_k, block_n)
    wanted = HopperInstance(
        head_dim, block_m, block_n, stages, _SM90_ELEMENTS[dtype], cluster, last_keys, causal
    )
    found = [e for e in parse_ptxas(text) if hopper_instantiation(e.symbol) == wanted]
    if not found:
        raise RuntimeError(f"no ptxas entry for the Hopper kernel {wanted} in:\n{text[-2000:]}")
    entry = found[0]
    element = _SM90_ELEMENTS[dtype]
    return [
        {
            "arch": "sm_90",
            "kernel": f"flash_fwd_sm90_kernel<{head_dim}, {block_m}x{block_n}, {element}, "
            f"{str(causal).lower()}>"
            + (f", last key block on {last_keys}" if last_keys < block_n else "")
            + (f" on clusters of {cluster}" if cluster > 1 else ""),
            "registers": entry.registers,
            "spill_store_bytes": entry.spill_store_bytes,
            "spill_load_bytes": entry.spill_load_bytes,
            "stack_bytes": entry.stack_bytes,
            "shared_bytes": hopper_shared_bytes(head_dim, block_m, block_n, stages),
            "num_warps": (block_m // 64 + 1) * 4,
            "num_stages": stages,
            # Persistent: min(tiles, SMs) CTAs walk the tiles; the grid counts the tiles.
            "grid": [-(-seq_q // block_m) * heads * batch, 1, 1],
            "config": {
                "BLOCK_M": block_m,
                "BLOCK_N": block_n,
                "target": entry.target,
                "schedule": "persistent",
                **({"CLUSTER": cluster} if cluster > 1 else {}),
                **({"LAST_KEYS": last_keys} if last_keys < block_n else {}),
            },
            "path": "hopper-wgmma-tma",
            "toolchain": toolchain,
        }
    ]


def resources(params: Mapping[str, Any], arch: str) -> list[ResourceRecord]:
    """Resource records of the instantiation one call on ``params``'s workload runs.

    ``params``: a suite case's ``params()``. Compiles (once per source and arch) with
    nvcc; nothing runs on a GPU. ResourcesUnavailable without nvcc. On sm_90 the Hopper
    kernel's record, where the dispatch picks it.
    """
    nvcc = cuda_flash.find_nvcc()
    header = (cuda_flash.CSRC / "flash_fwd.h").read_text(encoding="utf-8")
    if uses_hopper_kernel(params, arch, header):
        if nvcc is None:
            raise ResourcesUnavailable("nvcc not found (set CUDA_HOME or put nvcc on PATH)")
        dtype = str(params.get("dtype", "float16"))
        head_dim = int(params["shape"][3])
        text = hopper_ptxas_text(dtype, head_dim, nvcc=nvcc)
        source = cuda_flash.HOPPER_KERNEL_HEADER.read_text(encoding="utf-8")
        return hopper_records(text, params, source, f"nvcc {tool_version(nvcc)}")
    text = ptxas_text(arch, nvcc=nvcc)
    toolchain = f"nvcc {tool_version(nvcc)}" if nvcc else ""
    source = cuda_flash.KERNEL_SOURCE.read_text(encoding="utf-8")
    return records_from_report(text, arch, params, source, toolchain)
