"""Two CPU functions under pytest-benchmark, in pure Python (deterministic work).

``SLOWDOWN`` is the planted slowdown of docs/PYTEST.md, in ``checksum`` only: 1.0 is
the real code; 1.1 repeats its loop over a tenth of the data (the result unused), i.e.
10% more work with the same answer (3.0: three times the work). The tests and
benchmarks/pytest_gpu_proof.sh flip it in a copy of this folder; ``fold_xor`` never
changes (the case that must stay "unchanged").
"""

from __future__ import annotations

SLOWDOWN = 1.0

MASK = 0xFFFFFFFF


def checksum(data: list[int]) -> int:
    """sum(data[i] * 31 ** (n - 1 - i)) mod 2**32, by Horner's rule."""
    total = _horner(data)
    extra = SLOWDOWN - 1.0
    while extra > 1e-9:  # the planted extra work: the same loop again, its result unused
        _horner(data[: int(len(data) * min(extra, 1.0) + 0.5)])
        extra -= 1.0
    return total


def _horner(data: list[int]) -> int:
    total = 0
    for x in data:
        total = (total * 31 + x) & MASK
    return total


def fold_xor(data: list[int]) -> int:
    """The exclusive or of every item."""
    total = 0
    for x in data:
        total ^= x
    return total
