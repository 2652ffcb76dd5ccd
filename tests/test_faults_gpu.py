"""GPU-only fault: a kernel that hits an illegal address poisons its CUDA context.

The guard must report that case as crashed, restart a worker for the rest, measure
the other cases, and exit 3. Run on a real GPU: ``pytest -m gpu tests/test_faults_gpu.py``.
"""

from __future__ import annotations

import pytest
import torch
from conftest import TESTS

from guard import results
from guard.cli import main

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def test_illegal_address_is_isolated(tmp_path):
    suite = tmp_path / "suite.yaml"
    suite.write_text(
        "schema_version: 1\nname: gpu-faults\n"
        "kernels: [fault_illegal_address, sdpa]\n"
        "timing: {rounds: 2, max_rounds: 2, samples_per_round: 5, case_timeout_s: 120}\n"
        "cases:\n  - {shape: [1, 2, 128, 64]}\n  - {shape: [1, 2, 256, 64], causal: true}\n"
    )
    out = tmp_path / "r.json"
    code = main(
        [
            "run",
            "--suite",
            str(suite),
            "--device",
            "cuda",
            "-q",
            "--out",
            str(out),
            "--fault-module",
            "fault_kernels",
            "--worker-path",
            str(TESTS),
        ]
    )
    run = results.load(out)
    by_id = {c.id: c for c in run.cases}
    bad = [c for c in run.cases if c.case.kernel == "fault_illegal_address"]
    good = [c for c in run.cases if c.case.kernel == "sdpa"]
    assert code == 3
    assert all(c.status == "crashed" for c in bad), {
        k: (v.status, v.reason) for k, v in by_id.items()
    }
    assert all(
        "illegal" in (c.reason + c.worker_output).lower() or "context" in c.reason for c in bad
    )
    assert all(c.status == "ok" and len(c.rounds) == 2 for c in good)
