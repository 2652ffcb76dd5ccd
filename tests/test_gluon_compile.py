"""The Gluon Hopper kernel (kernels/gluon_flash_fwd.py) compiles for sm_90a without spills.

No GPU needed: ``benchmarks/compile_report.py --gluon --json`` compiles every variant
for fp16/bf16 x head_dim 64/128 x causal, and the opt-in configs (the persistent
kernel's runs of key tiles), through a target-only driver and reads
registers, spills and shared memory with triton's bundled ptxas, and where the softmax
lies in the SASS with cuobjdump (the toolkit's or triton's). It runs in a
subprocess: the compile-only driver replaces triton's active driver for the whole
process, and the interpreter tests of this session must not see that.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton.experimental.gluon.language.nvidia.hopper")

ROOT = Path(__file__).resolve().parent.parent
SMEM_PER_BLOCK_SM90 = 232448  # cudaDevAttrMaxSharedMemoryPerBlockOptin on H100/H200


@pytest.fixture(scope="module")
def report() -> list[dict]:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks/compile_report.py"), "--gluon", "--json"],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=900, check=False,
    )  # fmt: skip
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert rows, f"no report (rc {proc.returncode}): {proc.stderr[-2000:]}"
    return rows


def _ids(rows):
    return [f"{r['variant']}-{r['dtype']}-hd{r['head_dim']}-{'causal' if r['causal'] else 'full'}"
            + "".join(f"-{k}={v}" for k, v in r["overrides"].items()) for r in rows]  # fmt: skip


def test_every_config_compiles_without_spills(report):
    from kernels import gluon_flash_fwd as gf

    # Every variant's defaults, and the opt-in configs of compile_report's GLUON_OPT_IN:
    # both persistent variants with SPLIT_KEYS, non-causal, and with PAIRED_ROUNDS,
    # causal, at both head dims.
    expected = (len(gf.VARIANTS) * 2 + 4) * 2 * len(gf.SUPPORTED_HEAD_DIMS)
    assert len(report) == expected
    runs = [r for r in report if r["overrides"] == {"SPLIT_KEYS": 1}]
    assert {(r["variant"], r["head_dim"], r["causal"]) for r in runs} == {
        (variant, head_dim, False)
        for variant in ("ws-persistent", "ws-persistent-pingpong")
        for head_dim in gf.SUPPORTED_HEAD_DIMS
    }
    for row, name in zip(report, _ids(report), strict=True):
        print(name, {k: row.get(k) for k in ("regs", "spill_st", "spill_ld", "smem", "warps")})
        assert "error" not in row, f"{name}: {row.get('error')}"
        assert row["spill_st"] == 0 and row["spill_ld"] == 0, f"{name} spills: {row}"
        assert row["smem"] <= SMEM_PER_BLOCK_SM90, f"{name} shared memory: {row['smem']}"
        assert not row["ptxas_warnings"], f"{name}: {row['ptxas_warnings']}"


def test_structure_of_the_warp_specialized_kernel(report):
    # What makes it FA3-shaped: one warp-specialized region (producer + consumers),
    # wgmma and TMA, a wait that leaves one wgmma group in flight (softmax under P.V),
    # and register reallocation between the partitions.
    for row, name in zip(report, _ids(report), strict=True):
        assert row["wgmma"] > 0 and row["tma"] > 0 and row["cp_async"] == 0, name
        if row["variant"].startswith("ws"):
            assert row["ws_regions"] == 1 and row["warps"] == 12, name
            assert 1 in row["wgmma_wait"], f"{name}: no overlapped wgmma wait"
            assert row["setmaxnreg"], f"{name}: no register reallocation"
        else:
            assert row["ws_regions"] == 0 and row["warps"] == 4, name


def test_only_key_runs_synchronize_ctas_through_global_memory(report):
    # SPLIT_KEYS: a release once a cut row block's first part is parked, acquire loads
    # while the second part waits for it. Nothing else in the kernel orders global memory
    # between CTAs.
    for row, name in zip(report, _ids(report), strict=True):
        if row["overrides"].get("SPLIT_KEYS"):
            assert row["atomics"] == ["acquire", "release"], name
        else:
            assert row["atomics"] == [], name


def test_a_whole_tiles_softmax_runs_under_the_p_v_product(report):
    # In the SASS, between the wait that leaves P·V in flight and the wait for it: at
    # least one tile's exponentials a thread (64 rows x BLOCK_N keys over 128 threads).
    # ptxas may move work across a wait whatever the source order says, so the check
    # reads what the GPU runs. The plain kernel, which waits for P·V before its softmax,
    # has none there: the check tells the two apart.
    from kernels.flash_plan import gluon_config

    if any(row.get("exp_under_pv") is None for row in report):
        reason = "no cuobjdump (CUDA toolkit or triton) to read the SASS with"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    for row, name in zip(report, _ids(report), strict=True):
        tile = gluon_config(row["head_dim"], row["causal"], row["variant"])["BLOCK_N"] // 2
        if row["variant"] == "simple":
            assert row["exp_under_pv"] == 0, f"{name}: {row['exp_under_pv']}"
        else:
            assert row["exp_under_pv"] >= tile, f"{name}: {row['exp_under_pv']} < {tile}"


PHASED_COMPILE = """
import json, sys, torch
sys.path.insert(0, "benchmarks")
import compile_report
from benchmarks import trace_tile_phases
from kernels import flash_plan
from kernel_reports.triton_compile import compile_only

phased = trace_tile_phases._phased_module()
q = torch.empty(4, 16, 2048, 64, dtype=torch.bfloat16)
phased.TRACE[0] = torch.zeros(132 * 256, dtype=torch.int64)
choice = flash_plan.gluon_choice(64, False, "ws-persistent-pingpong", {"SPLIT_KEYS": 0})
with compile_only("sm_90") as launches:
    phased.launch_choice(q, q, q, torch.empty_like(q), False, 0.125, choice)
print(json.dumps(compile_report.resources(launches[-1], "sm_90")))
"""


def test_the_phase_tools_copy_compiles_with_its_softmax_under_p_v():
    # benchmarks/trace_tile_phases.py times the steps of a key tile in a stamped copy of
    # the persistent kernel: that copy must compile, and its stamps must leave the
    # softmax where the kernel has it (under P·V), or the steps it reports are not the
    # kernel's. A subprocess: the compile-only driver replaces triton's for the process.
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run([sys.executable, "-c", PHASED_COMPILE], capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=600, check=False)  # fmt: skip
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert lines, f"no report (rc {proc.returncode}): {proc.stderr[-2000:]}"
    row = json.loads(lines[-1])
    assert row["spill_st"] == 0 and row["spill_ld"] == 0, row
    if row["exp_under_pv"] is None:
        if os.environ.get("CI") == "true":
            pytest.fail("no cuobjdump (CUDA toolkit or triton) to read the SASS with")
        pytest.skip("no cuobjdump to read the SASS with")
    assert row["exp_under_pv"] >= 64, row
