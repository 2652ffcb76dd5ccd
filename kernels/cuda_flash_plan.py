"""Which instantiation the CUDA kernel's dispatcher (``csrc/``) launches for a workload,
read from its headers: what the launch paths name (``kernels.launch_paths.cuda_path``)
and the compiler-resource records report (``kernel_reports.cuda_flash_resources``).

The mma.sync kernel below ``kHopperMinWork`` (``flash_fwd.h``), else on sm_90 the
Hopper kernel (``flash_fwd_sm90.cuh``) with the tile, ring depth, cluster and narrowed
last key block its host side picks from the ``FLASH_SM90_*`` defaults, and the shared
memory layout its ``Traits`` fit in. Each function takes the header's text
(``cuda_flash.CSRC / "flash_fwd.h"``, ``cuda_flash.HOPPER_KERNEL_HEADER``), so nothing
here reads a file or needs torch's extension build.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from kernels.arch import parse_arch

_MACRO = re.compile(r"#define\s+(FLASH_SM90_\w+)\s+(\d+)")
_MIN_WORK = re.compile(r"kHopperMinWork\s*=\s*1LL\s*<<\s*(\d+)")


def header_macros(source: str) -> dict[str, int]:
    """The Hopper header's ``#define FLASH_SM90_* <number>`` defaults."""
    return {name: int(value) for name, value in _MACRO.findall(source)}


def hopper_cluster(source: str, head_dim: int, causal: bool, seq_q: int, seq_k: int) -> int:
    """CTAs per cluster the launcher picks: two on head_dim 128 non-causal where the
    row blocks pair up and, where O shares the V ring, a tile has more key blocks than
    the ring has stages (``launch_full_tiles`` in the header), else one."""
    m = header_macros(source)
    cluster = m.get("FLASH_SM90_D128_CLUSTER", 1)
    if head_dim != 128 or causal or cluster == 1 or -(-seq_q // 128) % cluster != 0:
        return 1
    block_m, block_n, stages = hopper_tile(source, head_dim, causal, seq_q, seq_k)
    separate_o, _ = _hopper_buffers(head_dim, block_m, block_n, stages)
    return cluster if separate_o or -(-seq_k // block_n) > stages else 1


def hopper_tile(
    source: str, head_dim: int, causal: bool, seq_q: int, seq_k: int
) -> tuple[int, int, int]:
    """(rows of Q, keys per step, stages) the launcher picks, from the header's defaults."""
    m = header_macros(source)
    # A head_dim's own ring depth where the header sets one, else the common one.
    stages = m.get(f"FLASH_SM90_D{head_dim}_STAGES", m["FLASH_SM90_STAGES"])
    if head_dim == 64 and causal:
        long = seq_q >= m["FLASH_SM90_D64_CAUSAL_LONG_Q"]
        rows = m["FLASH_SM90_D64_CAUSAL_LONG_M" if long else "FLASH_SM90_D64_CAUSAL_M"]
        return rows, m["FLASH_SM90_D64_CAUSAL_N"], stages
    if causal:
        return 128, m["FLASH_SM90_D128_CAUSAL_N"], stages
    # Non-causal: the key tile by seq_k (``launch_full``).
    d = f"FLASH_SM90_D{head_dim}"
    block_m = m[f"{d}_FULL_M"] if head_dim == 64 else 128
    short = seq_k <= m[f"{d}_SHORT_K"]
    return block_m, m[f"{d}_FULL_SHORT_N" if short else f"{d}_FULL_N"], stages


def hopper_last_keys(source: str, causal: bool, seq_k: int, block_n: int) -> int:
    """Keys the last (ragged) key block's products run on (``with_last_keys`` in the
    header): at 192-key non-causal tiles 64 or 128 where that block's keys fit there and
    the tile has another block, else every key of the step."""
    if causal or block_n != 192 or not header_macros(source).get("FLASH_SM90_NARROW_LAST_BLOCK"):
        return block_n
    last = seq_k - (seq_k - 1) // block_n * block_n
    if seq_k > block_n and last <= 64:
        return 64
    if seq_k > block_n and last <= 128:
        return 128
    return block_n


def hopper_shared_bytes(head_dim: int, block_m: int, block_n: int, stages: int) -> int:
    """``sizeof(SharedStorage)``: Q (two buffers where they fit beside the rest), the K and
    V rings, O on its own where it fits (else in the V ring), the barriers and tile
    slots, each buffer 1024-byte aligned (``Traits::fits`` in the header)."""
    q = o = block_m * head_dim * 2
    kv = stages * block_n * head_dim * 2
    separate, q_buffers = _hopper_buffers(head_dim, block_m, block_n, stages)
    return q_buffers * q + kv + (kv + o if separate else max(kv, o)) + 1024


def hopper_q_buffers(head_dim: int, block_m: int, block_n: int, stages: int) -> int:
    """Q buffers of a Hopper instantiation (``Traits::kQStages``): 2 where they fit."""
    return _hopper_buffers(head_dim, block_m, block_n, stages)[1]


def _hopper_buffers(head_dim: int, block_m: int, block_n: int, stages: int) -> tuple[bool, int]:
    """(O has its own buffer, Q buffers): ``Traits::kSeparateO`` and ``kQStages``."""
    q = o = block_m * head_dim * 2
    kv = stages * block_n * head_dim * 2
    barriers = 2 * 8 + 8 + 2 * 16 * stages + 2 * 4

    def fits(q_buffers: int, separate_o: bool) -> bool:
        used = q_buffers * q + 2 * kv + (o if separate_o else 0) + barriers + 1024
        return used <= 227 * 1024

    separate = fits(1, True)
    return separate, 2 if fits(2, separate) else 1


def uses_hopper_kernel(params: Mapping[str, Any], arch: str, header: str) -> bool:
    """Whether the auto dispatch runs the Hopper kernel for this workload on ``arch``."""
    if parse_arch(arch) != 90:
        return False
    batch, heads, seq_q, _ = (int(n) for n in params["shape"])
    seq_k = int(params.get("seq_k", seq_q))
    found = _MIN_WORK.search(header)
    min_work = 1 << int(found[1]) if found else 0
    return batch * heads * seq_q * seq_k >= min_work
