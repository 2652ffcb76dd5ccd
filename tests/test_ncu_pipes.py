"""benchmarks/ncu_pipes.py reads ncu's raw CSV into its pipe table (no GPU needed): the
fixture is its own capture on an H100 (the entry point and cuDNN at two shapes)."""

from __future__ import annotations

import sys
from pathlib import Path

from conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import ncu_pipes  # benchmarks/ is not a package

CAPTURE = Path(__file__).resolve().parent / "fixtures" / "ncu" / "h100_pipes.csv"
NAMES = ["ours hd64", "cudnn hd64", "ours hd128", "cudnn hd128"]


def _table() -> list[str]:
    rows = ncu_pipes.rows_of(CAPTURE.read_text())
    metrics = [*ncu_pipes.PIPES, *(c for c in rows[0] if c.startswith("smsp__warp_issue_"))]
    return ncu_pipes.markdown(rows, NAMES, metrics).splitlines()


def test_one_row_per_profiled_launch_under_its_kernel_name():
    rows = ncu_pipes.rows_of(CAPTURE.read_text())  # ncu's log lines and units row skipped
    assert [r["Kernel Name"].split("_sdpa")[0] for r in rows] == [
        "_attn_fwd_ws_persistent",
        "cudnn_generated_fort_native",
        "_attn_fwd_ws_persistent",
        "cudnn_generated_fort_native",
    ]
    assert all(r["gpu__time_duration.sum"].replace(",", "").isdigit() for r in rows)


def test_the_table_shows_each_pipe_and_the_largest_stalls_first():
    header, _, *body = _table()
    assert "XU pipe (MUFU) %" in header and "tensor pipe %" in header
    assert [line.split(" | ")[0] for line in body] == [f"| {n}" for n in NAMES]
    # The captured hd-64 row: tensor 48.10, XU 50.17; stalls barrier > wait > long scoreboard.
    cells = body[0].split(" | ")
    assert cells[4:6] == ["48.10", "50.17"]
    assert cells[-1].rstrip(" |") == "barrier 30.2, wait 25.2, long_scoreboard 10.3"


def test_launches_that_outnumber_the_calls_are_not_named_after_them():
    # Two calls that launched four kernels (as FA3 launches a fill before its kernel): a
    # name by position would put the second call's name on the first call's second kernel.
    rows = ncu_pipes.rows_of(CAPTURE.read_text())
    lines = ncu_pipes.markdown(rows, NAMES[:2], list(ncu_pipes.PIPES)).splitlines()
    assert [line.split(" | ")[0] for line in lines[2:6]] == [
        "| launch 0", "| launch 1", "| launch 2", "| launch 3",
    ]  # fmt: skip
    assert lines[-1] == "4 launches of 2 calls, in order: ours hd64; cudnn hd64"


def test_metrics_the_gpu_lacks_are_named_not_requested(monkeypatch):
    listing = "Device 0 (NVIDIA H100)\nsm__inst_executed_pipe_xu  XU\ngpu__time_duration  time\n"

    class Done:
        stdout = listing

    monkeypatch.setattr(ncu_pipes.subprocess, "run", lambda *a, **k: Done())
    wanted = ["gpu__time_duration.sum", "sm__inst_executed_pipe_xu.avg.pct", "sm__nope.sum"]
    assert ncu_pipes.known_metrics("ncu", wanted) == (wanted[:2], ["sm__nope.sum"])


def test_the_profile_command_hands_the_target_the_shapes_it_was_given() -> None:
    from ncu_gluon import parse_shape

    shapes = [(2, 32, 4096, 64, True, "bfloat16"), (4, 16, 2048, 128, False, "float16")]
    cmd = ncu_pipes.profile_command("ncu", ["--section", "SourceCounters"], shapes, ["fa3", "sdpa"])
    target = cmd.index("--target")
    assert cmd[0] == "ncu" and cmd[target - 1].endswith("benchmarks/ncu_pipes.py")
    assert cmd.index("SourceCounters") < target  # ncu's own options before the program
    given = [parse_shape(a.removeprefix("--shape=")) for a in cmd if a.startswith("--shape=")]
    assert given == shapes
    assert cmd[cmd.index("--arms") + 1 :] == ["fa3", "sdpa"]
    log = "==PROF== Connected\nprofiled fa3 (2, 32, 4096, 64, True, 'bfloat16')\nskipped sdpa\n"
    assert ncu_pipes.profiled_calls(log) == ["fa3 (2, 32, 4096, 64, True, 'bfloat16')"]
