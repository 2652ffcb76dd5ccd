"""pytest-benchmark benchmarks of ``checksum_demo``, each checking its result."""

from __future__ import annotations

import functools
import operator
import random

from checksum_demo import MASK, checksum, fold_xor

N = 2000


def fresh() -> list[int]:
    return [random.randrange(1, 1 << 16) for _ in range(N)]  # fresh inputs, never zeros


def test_checksum(benchmark) -> None:
    data = fresh()
    # The same checksum by another route: the sum of powers, not Horner's rule.
    want = sum(x * pow(31, N - 1 - i, MASK + 1) for i, x in enumerate(data)) & MASK
    assert benchmark(checksum, data) == want


def test_fold_xor(benchmark) -> None:
    data = fresh()
    assert benchmark(fold_xor, data) == functools.reduce(operator.xor, data, 0)
