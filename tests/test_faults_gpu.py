"""GPU-only fault: a kernel that hits an illegal address poisons its CUDA context.

The guard must report that case as crashed, restart a worker for the rest, measure
the other cases, and exit 3. Run on a real GPU: ``pytest -m gpu tests/test_faults_gpu.py``.
"""

from __future__ import annotations

import pytest
import torch
from conftest import TESTS

from guard.commands.main import main
from guard.store import results

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


def test_compute_sanitizer_catches_out_of_bounds_write(tmp_path):
    """``guard check --sanitize``: memcheck fails the stray writer, passes SDPA."""
    import shutil

    if shutil.which("compute-sanitizer") is None:
        pytest.skip("compute-sanitizer not on PATH")
    suite = tmp_path / "suite.yaml"
    suite.write_text(
        "schema_version: 1\nname: gpu-sanitize\nkernels: [fault_oob_gpu, sdpa]\n"
        "timing: {case_timeout_s: 300}\ncases:\n  - {shape: [1, 2, 64, 64]}\n"
    )
    out = tmp_path / "r.json"
    code = main(
        [
            "check",
            "--suite",
            str(suite),
            "--device",
            "cuda",
            "--sanitize",
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
    status = {c.case.kernel: c for c in run.cases}
    assert status["sdpa"].status == "ok"
    assert status["fault_oob_gpu"].status in ("crashed", "wrong")
    assert (
        "sanitizer" in status["fault_oob_gpu"].reason
        or "Invalid" in status["fault_oob_gpu"].worker_output
    )
    assert code in (1, 3)
