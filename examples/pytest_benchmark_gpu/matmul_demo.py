"""A small GPU function under pytest-benchmark: a batched float32 matmul (torch).

``SLOWDOWN`` is the planted slowdown of docs/PYTEST.md, in ``batched_matmul`` only:
1.0 is the real code; 1.1 multiplies a tenth of the batch again (the result unused),
i.e. 10% more work with the same answer. benchmarks/pytest_gpu_proof.sh flips it in a
copy of this folder; ``row_softmax`` never changes.
"""

from __future__ import annotations

import torch

SLOWDOWN = 1.0


def batched_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    out = torch.matmul(a, b)
    extra = int(a.shape[0] * (SLOWDOWN - 1.0) + 0.5)
    while extra > 0:  # the planted extra work: part of the batch again, its result unused
        k = min(extra, a.shape[0])
        torch.matmul(a[:k], b[:k])
        extra -= k
    return out


def row_softmax(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, dim=-1)
