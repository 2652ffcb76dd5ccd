"""pytest-benchmark benchmarks of ``matmul_demo`` on the GPU (the CPU without one).

Each timed call ends with ``torch.cuda.synchronize()``, so a sample is the GPU's time
for the call, not the time to queue it. Each test checks its result against float64.
"""

from __future__ import annotations

import torch
from matmul_demo import batched_matmul, row_softmax

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
BATCH = 10
SIZE = 1024 if DEVICE == "cuda" else 96  # about 0.4 ms on an H100, 1 ms on a CPU
# 64k rows of 1024 on a GPU (about 0.2 ms): a call of microseconds under synchronize()
# times the host's launch and wait more than the GPU, and stays inconclusive.
ROWS = 65536 if DEVICE == "cuda" else 256
if DEVICE == "cpu":
    # One thread: on a busy CPU a parallel region waits out a descheduled thread's
    # time slice (samples of 8 ms instead of 80 us).
    torch.set_num_threads(1)


def timed(fn, *args):
    def call():
        out = fn(*args)
        if DEVICE == "cuda":
            torch.cuda.synchronize()
        return out

    return call


def test_batched_matmul(benchmark) -> None:
    a = torch.randn(BATCH, SIZE, SIZE, device=DEVICE)  # fresh inputs every run
    b = torch.randn(BATCH, SIZE, SIZE, device=DEVICE)
    out = benchmark(timed(batched_matmul, a, b))
    want = torch.matmul(a.double(), b.double())
    torch.testing.assert_close(out.double(), want, rtol=2e-3, atol=2e-2)


def test_row_softmax(benchmark) -> None:
    x = torch.randn(ROWS, 1024, device=DEVICE)
    out = benchmark(timed(row_softmax, x))
    want = torch.softmax(x.double(), dim=-1)
    torch.testing.assert_close(out.double(), want, rtol=1e-4, atol=1e-6)
