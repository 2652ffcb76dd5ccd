"""Two CPU functions under pytest-benchmark, in pure Python (deterministic work).

``SLOWDOWN`` is the planted slowdown of docs/PYTEST.md, in ``checksum`` only: 1.0 is
the real code; 1.1 repeats its loop over a tenth of the data (the result unused), i.e.
10% more work with the same answer. The tests and benchmarks/pytest_gpu_proof.sh flip
it in a copy of this folder; ``fold_xor`` never changes (the case that must stay
"unchanged").
"""

from __future__ import annotations

SLOWDOWN = 1.0

MASK = 0xFFFFFFFF


def checksum(data: list[int]) -> int:
    """sum(data[i] * 31 ** (n - 1 - i)) mod 2**32, by Horner's rule."""
    total = 0
    for x in data:
        total = (total * 31 + x) & MASK
    wasted = 0
    for x in data[: int(len(data) * (SLOWDOWN - 1.0) + 0.5)]:  # the planted extra work
        wasted = (wasted * 31 + x) & MASK
    return total


def fold_xor(data: list[int]) -> int:
    """The exclusive or of every item."""
    total = 0
    for x in data:
        total ^= x
    return total
