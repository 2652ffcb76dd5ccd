"""benchmarks/ncu_stalls.py reads ncu's source page (SASS with warp-state samples) into its
per-launch tables (no GPU needed): the fixture is cut from its own capture on an H200
(FA3's causal head_dim-128 kernel and ours at (1,16,16,8192,128) bf16, after the fill
kernel FA3 launches first): each launch's first instructions, its hottest ones and the
first and last of its step loop."""

from __future__ import annotations

import sys
from pathlib import Path

from conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import ncu_stalls  # benchmarks/ is not a package

CAPTURE = Path(__file__).resolve().parent / "fixtures" / "ncu" / "h200_stalls.csv"


def test_one_launch_per_kernel_name_with_its_instructions():
    launches = ncu_stalls.launches_of(CAPTURE.read_text())  # ncu's log line skipped
    assert [launch.kernel.split("<")[0] for launch in launches] == [
        "void at::native::vectorized_elementwise_kernel",
        "void cutlass::device_kernel",
        "void flash_sm90::flash_fwd_sm90_kernel",
    ]
    assert [len(launch.rows) for launch in launches] == [15, 21, 21]
    assert all(row["Address"].startswith("0x") for launch in launches for row in launch.rows)


def test_samples_are_summed_by_opcode_without_the_predicate():
    assert ncu_stalls.opcode("@!P0  SYNCS.ARRIVE.TRANS64.RED.A1T0 RZ, [R13+URZ], RZ") == "SYNCS"
    assert ncu_stalls.opcode("      HGMMA.64x128x16.F32.BF16 R24, gdesc[UR48], RZ") == "HGMMA"
    ours = ncu_stalls.launches_of(CAPTURE.read_text())[2]
    total, by_op, top = ncu_stalls.summary(ours.rows)
    assert total == 11099 == sum(by_op.values())
    assert by_op["HGMMA"] == 3928 and by_op["WARPGROUP"] == 1334
    # The step's first Q K^T wgmma waits for the tensor pipe (the other warpgroup's P V).
    assert top[0] == (2194, top[0][1], "HGMMA.64x128x16.F32.BF16 R24, gdesc[UR20], RZ, !UPT")
    assert [n for n, _, _ in top] == sorted((n for n, _, _ in top), reverse=True)


def test_the_report_skips_launches_without_samples_and_names_the_kernels():
    text = ncu_stalls.markdown(ncu_stalls.launches_of(CAPTURE.read_text()))
    headings = [line for line in text.splitlines() if line.startswith("## ")]
    assert [h.split(":")[0] for h in headings] == ["## launch 1", "## launch 2"]
    assert "flash_sm90::flash_fwd_sm90_kernel" in headings[1]
    assert "| HGMMA |" in text and "11601 samples, 21 instructions" in text


def test_the_step_loop_is_the_smallest_loop_with_half_the_samples():
    fa3, ours = ncu_stalls.launches_of(CAPTURE.read_text())[1:]
    # The whole capture's step loops: FA3's 469 instructions, ours 509 (first and last
    # kept in the cut, with the hottest ones between them).
    fa3_loop, our_loop = ncu_stalls.hot_loop(fa3.rows), ncu_stalls.hot_loop(ours.rows)
    assert [fa3_loop[0]["Address"], fa3_loop[-1]["Address"]] == ["0x7f25837af0e0", "0x7f25837b0e20"]
    assert [our_loop[0]["Address"], our_loop[-1]["Address"]] == ["0x7f257b02c940", "0x7f257b02e900"]
    assert our_loop[-1]["Source"].split()[-1] == "0x7f257b02c940"  # the branch back
    assert 2 * sum(map(ncu_stalls.samples, our_loop)) >= sum(map(ncu_stalls.samples, ours.rows))
    table = ncu_stalls.loop_table(our_loop, 11099)
    assert table[0].startswith("\nThe step loop 0x7f257b02c940-0x7f257b02e900: 15 instructions")
    assert "| WARPGROUP | 1334 |" in "\n".join(table)
    # A launch without a loop that holds half its samples (FA3's fill kernel: none) has none.
    assert ncu_stalls.hot_loop(ncu_stalls.launches_of(CAPTURE.read_text())[0].rows) == []


def test_step_loop_rows_are_labelled_with_their_calls():
    launches = ncu_stalls.launches_of(CAPTURE.read_text())
    log = (
        "profiled fa3 (1, 16, 8192, 128, True, 'bfloat16')\n==PROF== Disconnected\n"
        "profiled cuda_flash (1, 16, 8192, 128, True, 'bfloat16')\n"
    )
    calls = ncu_stalls.profiled_calls(log)
    assert calls[0] == "fa3 (1, 16, 8192, 128, True, 'bfloat16')"
    rows = ncu_stalls.step_loop_rows(launches, calls)
    fa3_loop, our_loop = (ncu_stalls.hot_loop(launch.rows) for launch in launches[1:])
    # torch's fill kernel is no call: FA3's kernel takes the first call's name.
    assert [r["kernel"] for r in rows] == ["fa3"] * len(fa3_loop) + ["cuda_flash"] * len(our_loop)
    assert {tuple(r["shape"]) for r in rows} == {(1, 16, 8192, 128, True, "bfloat16")}
    ours = [r for r in rows if r["kernel"] == "cuda_flash"]
    start = int(launches[2].rows[0]["Address"], 16)
    assert ours[0]["offset"] == int(our_loop[0]["Address"], 16) - start > 0
    assert [r["samples"] for r in ours] == [ncu_stalls.samples(r) for r in our_loop]
    assert sum(r["not_issued"] for r in ours) > 0 and all(r["executed"] > 0 for r in ours)
    assert ours[-1]["sass"].split()[-1] == our_loop[0]["Address"]  # the branch back
    # One call short: no launch gets another call's name.
    unpaired = ncu_stalls.step_loop_rows(launches, calls[:1])
    assert {r["kernel"] for r in unpaired} == {"launch 1", "launch 2"}
    assert all(r["shape"] is None for r in unpaired)
