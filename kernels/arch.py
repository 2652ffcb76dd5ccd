"""GPU architectures by name, as the guard passes them (``"sm_90"``, ``"sm_89"``), and the
shared memory a block may use on each.

What a launcher's choice on a GPU of some arch needs without that GPU
(``kernels.launch_paths.choice_for``): the capability the name stands for and the
shared memory per block that the configs must fit. Standard library only.
"""

from __future__ import annotations

import re

# Opt-in shared memory per block (cudaDevAttrMaxSharedMemoryPerBlockOptin), by compute
# capability: what the launchers' configs must fit on each part.
MAX_SHARED_BYTES: dict[int, int] = {
    80: 166912,  # A100: 163 KB
    86: 101376,  # RTX 30xx, A10: 99 KB
    87: 166912,  # Orin: 163 KB
    89: 101376,  # L4, RTX 40xx: 99 KB
    90: 232448,  # H100, H200: 227 KB
    100: 232448,  # B200: 227 KB
    120: 101376,  # RTX 50xx: 99 KB
}

_ARCH = re.compile(r"sm_(\d+)a?")


def parse_arch(arch: str) -> int:
    """``"sm_90"`` (or ``"sm_90a"``) -> 90; ValueError for anything else or unknown."""
    match = _ARCH.fullmatch(arch) if isinstance(arch, str) else None
    if match is None:
        raise ValueError(f"arch must look like 'sm_90', got {arch!r}")
    capability = int(match.group(1))
    if capability not in MAX_SHARED_BYTES:
        known = ", ".join(f"sm_{c}" for c in sorted(MAX_SHARED_BYTES))
        raise ValueError(f"unknown arch {arch!r} (known: {known})")
    return capability


def max_shared_bytes(arch: str) -> int:
    """Shared memory a block may use on ``arch`` (opt-in maximum)."""
    return MAX_SHARED_BYTES[parse_arch(arch)]
