"""Nsight Compute profiles of a confirmed regression (guard.measure.profile), on the CPU.

ncu itself never runs here: the CSV parser reads output captured on an H100
(tests/fixtures/ncu/), and fake ``ncu`` scripts on PATH stand in for the skip paths
(not installed, counters not readable, past the budget, a failing case) and for the
happy path end to end through ``profile_case``.
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, make_case

from guard.measure import profile
from guard.measure.profile import (
    ALL_METRICS,
    COUNTERS_HINT,
    DURATION,
    KernelProfile,
    ProfileComparison,
    kernel_profile,
    parse_number,
    parse_raw_csv,
    profile_case,
    profile_markdown,
    profile_rows,
    short_kernel_name,
    stall_metric,
)

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "ncu"
GOLDEN = Path(__file__).resolve().parent / "golden"
BASE_CSV = FIXTURES / "h100_triton_flash_base.csv"
HEAD_CSV = FIXTURES / "h100_triton_flash_head.csv"

posix_only = pytest.mark.skipif(os.name != "posix", reason="fake ncu is a shell script")


def _profile(name: str) -> KernelProfile:
    result = kernel_profile(parse_raw_csv((FIXTURES / name).read_text()))
    assert result is not None
    return result


# --------------------------------------------------------------------------- parsing


def test_parse_captured_triton_profile():
    rows = parse_raw_csv(BASE_CSV.read_text())
    assert [r.name for r in rows] == ["_attn_fwd"]
    p = kernel_profile(rows)
    assert p is not None
    assert p.kernel_name == "_attn_fwd"
    assert p.metrics == {
        "gpu__time_duration.sum": 960512.0,  # "960,512" ns
        "sm__throughput.avg.pct_of_peak_sustained_elapsed": 59.76,
        "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed": 42.65,
        "dram__throughput.avg.pct_of_peak_sustained_elapsed": 8.21,
        "sm__warps_active.avg.pct_of_peak_sustained_active": 18.75,
        "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active": 61.99,
        "sm__inst_issued.avg.pct_of_peak_sustained_active": 30.04,
        "lts__t_sector_hit_rate.pct": 90.11,
        "launch__registers_per_thread": 168.0,
    }
    assert p.stalls == (("long_scoreboard", 30.17), ("barrier", 29.94), ("wait", 15.47))
    assert p.kernels == (("_attn_fwd", 960512.0),)


def test_every_requested_metric_is_in_the_captured_csv():
    """The H100 capture holds a column for each metric we ask for (names are right)."""
    header = next(line for line in BASE_CSV.read_text().splitlines() if line.startswith('"ID",'))
    columns = set(json.loads(f"[{header}]"))
    assert set(ALL_METRICS) <= columns


def test_several_kernels_the_longest_is_shown():
    p = _profile("h100_reference_10_kernels.csv")
    assert len(p.kernels) == 10  # --launch-count 10 cut the call
    durations = [d for _, d in p.kernels]
    assert p.metrics[DURATION] == max(durations) == 26496.0
    assert p.kernel_name == "at::elementwise_kernel"
    assert p.kernels[0] == ("nvjet_sm90_hsh_128x256_64x4_2x1_v_bz_coopA_TNN", 9408.0)
    note = profile._launches_note("base", p)
    assert note is not None
    assert "launched 10 kernels (ncu's limit of 10 launches" in note
    assert "longest: `at::elementwise_kernel` 26.5 µs" in note
    assert "and 6 more" in note


def test_parse_edge_cases():
    """Program output before the report, usecond with thousands separators, n/a and
    empty cells, a truncated row."""
    rows = parse_raw_csv((FIXTURES / "edge_cases.csv").read_text())
    assert len(rows) == 2
    small, big = rows
    assert small.values[DURATION] == 1_234_500.0  # "1,234.50" usecond
    assert "launch__registers_per_thread" not in small.values  # n/a
    assert stall_metric("long_scoreboard") not in small.values
    assert big.values[DURATION] == 2_500_000.0
    assert big.values["launch__registers_per_thread"] == 1024.0  # "1,024"
    assert "lts__t_sector_hit_rate.pct" not in big.values  # n/a
    assert "sm__warps_active.avg.pct_of_peak_sustained_active" not in big.values  # ""
    p = kernel_profile(rows)
    assert p is not None
    assert p.kernel_name == "(anonymous)::big_kernel"
    # Ties broken by name; zero stalls left out.
    assert p.stalls == (("long_scoreboard", 40.0), ("barrier", 7.5), ("wait", 7.5))
    assert "lts__t_sector_hit_rate.pct" not in p.metrics
    assert profile_rows(ProfileComparison("c", p, p))[8] == ["L2 hit rate", "—", "—", "—"]


def test_parse_no_report():
    assert parse_raw_csv("") == []
    assert (
        parse_raw_csv("==PROF== Disconnected from process 1\n==WARNING== No kernels were profiled.")
        == []
    )
    assert kernel_profile([]) is None


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("88,896", 88896.0),
        ("1,234.5", 1234.5),
        ("0", 0.0),
        ("-3.5", -3.5),
        ("12.0e3", 12000.0),
        ("n/a", None),
        ("", None),
        ("PolicySpread", None),
        ("(128, 1, 1)", None),
        ("1,23", None),
        ("nan", None),
    ],
)
def test_parse_number(text, value):
    assert parse_number(text) == value


@pytest.mark.parametrize(
    ("name", "short"),
    [
        ("_attn_fwd", "_attn_fwd"),
        (
            "void at::vectorized_elementwise_kernel<8, at::AUnaryFunctor<c10::Half, c10::Half, "
            "c10::Half, binary_internal::MulFunctor<float>>, std::array<char *, 2>>(int, T2, T3)",
            "at::vectorized_elementwise_kernel",
        ),
        (
            "void at::<unnamed>::distribution_elementwise_grid_stride_kernel<float, 4>(long, T2)",
            "at::(anonymous)::distribution_elementwise_grid_stride_kernel",
        ),
        (
            "void (anonymous namespace)::flash_fwd_kernel<__half, 128, 0>(FlashFwdParams)",
            "(anonymous)::flash_fwd_kernel",
        ),
        ("x" * 100, "x" * 79 + "…"),
    ],
)
def test_short_kernel_name(name, short):
    assert short_kernel_name(name) == short


# --------------------------------------------------------------------------- rendering


def _comparison() -> ProfileComparison:
    return ProfileComparison(
        "triton_flash/b4-h16-s4096-d128-full",
        _profile("h100_triton_flash_base.csv"),
        _profile("h100_triton_flash_head.csv"),
    )


def test_markdown_golden():
    assert profile_markdown(_comparison()) == (GOLDEN / "profile.md").read_text()


def test_markdown_skipped_is_one_line():
    pc = ProfileComparison("triton_flash/b1-h8", None, None, "ncu (Nsight Compute) is not on PATH")
    assert profile_markdown(pc) == (
        "**Nsight Compute** `triton_flash/b1-h8`: skipped: ncu (Nsight Compute) is not on PATH\n"
    )
    assert profile_rows(pc) == [["profile skipped", "ncu (Nsight Compute) is not on PATH", "", ""]]


def test_markdown_escapes_names():
    evil = KernelProfile(
        "k|<script>`x`*_",
        {DURATION: 1500.0},
        (("a|b_c", 1.0),),
        (("k|<script>`x`*_", 1500.0), ("<img src=x>", 10.0)),
    )
    text = profile_markdown(ProfileComparison("case|`id`<b>", evil, evil))
    for line in text.splitlines():  # outside code spans, no HTML and no bare "|" or "`"
        plain = re.sub(r"(`+)(?!`).*?(?<!`)\1(?!`)", "", line)
        assert "<" not in plain and "`" not in plain, line
        assert not re.search(r"(?<!\\)\|", plain) or line.startswith("|"), line
    assert "``case|`id`<b>``" in text  # a code span, fenced longer than its backticks
    table = [line for line in text.splitlines() if line.startswith("| kernel")]
    assert table == [
        "| kernel | k\\|&lt;script&gt;\\`x\\`\\*\\_ | k\\|&lt;script&gt;\\`x\\`\\*\\_ |  |"
    ]
    assert "- base: a\\|b c 1.0%" in text  # the stall reason, "_" as a space
    skipped = profile_markdown(ProfileComparison("c", None, None, "ncu failed: <b>|x</b>"))
    assert skipped.endswith("skipped: ncu failed: &lt;b&gt;\\|x&lt;/b&gt;\n")


def test_rows_match_the_table():
    rows = profile_rows(_comparison())
    assert all(len(r) == 4 for r in rows)
    assert rows[0] == ["kernel", "_attn_fwd", "_attn_fwd", ""]
    assert rows[1] == ["duration", "960.5 µs", "1.086 ms", "+13.1%"]
    assert rows[-3:] == [
        ["stall #1 (% of active warps)", "long scoreboard 30.2%", "wait 22.8%", ""],
        ["stall #2 (% of active warps)", "barrier 29.9%", "barrier 17.9%", ""],
        ["stall #3 (% of active warps)", "wait 15.5%", "short scoreboard 10.6%", ""],
    ]


@pytest.mark.parametrize(
    ("kind", "base", "head", "text"),
    [
        ("time", 1000.0, 1100.0, "+10.0%"),
        ("time", 0.0, 1.0, "—"),
        ("pct", 50.0, 45.5, "-4.5 pp"),
        ("count", 168.0, 200.0, "+32"),
        ("count", None, 200.0, "—"),
        ("pct", math.nan, 1.0, "—"),
    ],
)
def test_change(kind, base, head, text):
    assert profile.format_change(kind, base, head) == text


# --------------------------------------------------------------------------- fake ncu


def _fake_ncu(tmp_path: Path, body: str) -> Path:
    """A directory holding an executable ``ncu`` that runs ``body`` (sh)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    exe = bin_dir / "ncu"
    exe.write_text("#!/bin/sh\n" + body)
    exe.chmod(0o755)
    return bin_dir


def _trees(tmp_path: Path) -> tuple[Path, Path]:
    base, head = tmp_path / "base", tmp_path / "head"
    base.mkdir()
    head.mkdir()
    return base, head


def _state(pid: int) -> str | None:
    """The /proc state letter of ``pid``, or None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return text[text.rindex(")") + 2 :].split()[0]


def test_no_ncu_on_path(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder: no ncu
    base, head = _trees(tmp_path)
    pc = profile_case(make_case(), base, head, ncu=None)
    assert pc.skipped and pc.base is None and pc.head is None
    assert pc.skipped_reason == "ncu (Nsight Compute) is not on PATH"
    assert pc.case_id == make_case().id


@posix_only
def test_counters_not_readable(tmp_path, monkeypatch):
    """ncu's message when the driver keeps the counters for admins (NVIDIA's text)."""
    bin_dir = _fake_ncu(
        tmp_path,
        'echo "==PROF== Connected to process 42 (/usr/bin/python3)"\n'
        'echo "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access '
        "NVIDIA GPU Performance Counters on the target device 0. For instructions on "
        "enabling permissions and to get more information see "
        'https://developer.nvidia.com/ERR_NVGPUCTRPERM"\n'
        'echo "==PROF== Disconnected from process 42"\n'
        "exit 1\n",
    )
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    base, head = _trees(tmp_path)
    pc = profile_case(make_case(), base, head)
    assert pc.skipped_reason == COUNTERS_HINT
    assert "NVreg_RestrictProfilingToAdminUsers=0" in pc.skipped_reason
    assert "root" in pc.skipped_reason


@posix_only
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_budget_spent_kills_the_group(tmp_path):
    """A hung ncu (and the child it started) is killed at its share of the budget."""
    pids = tmp_path / "pids"
    bin_dir = _fake_ncu(
        tmp_path,
        f'sleep 300 &\necho "$$ $!" > {shlex.quote(str(pids))}\nwait\n',
    )
    base, head = _trees(tmp_path)
    pc = profile_case(make_case(), base, head, budget_s=4, ncu=str(bin_dir / "ncu"))
    assert pc.skipped and pc.base is None and pc.head is None
    assert pc.skipped_reason.startswith("profiling budget spent: ncu on base ran past 2 s")
    assert "(4 s for both arms)" in pc.skipped_reason
    spawned = [int(x) for x in pids.read_text().split()]
    assert len(spawned) == 2
    deadline = time.monotonic() + 20  # SIGKILL is delivered asynchronously
    while any(_state(p) not in (None, "Z", "X") for p in spawned) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert [p for p in spawned if _state(p) not in (None, "Z", "X")] == []


@posix_only
def test_ncu_fails_first_error_line(tmp_path):
    bin_dir = _fake_ncu(
        tmp_path,
        'echo "==PROF== Connected to process 7 (/usr/bin/python3)"\n'
        "echo \"guard.measure.profile_target: unknown kernel 'nope'\" >&2\n"
        'echo "==ERROR== The application returned an error code (2)."\n'
        'echo "==ERROR== something later"\n'
        "exit 2\n",
    )
    base, head = _trees(tmp_path)
    pc = profile_case(make_case(), base, head, ncu=str(bin_dir / "ncu"))
    assert pc.skipped_reason == (
        "ncu failed on base: guard.measure.profile_target: unknown kernel 'nope'"
    )

    bin_dir = _fake_ncu(tmp_path, 'echo "==ERROR== Failed to profile kernel \\"x\\""\nexit 1\n')
    pc = profile_case(make_case(), base, head, ncu=str(bin_dir / "ncu"))
    assert pc.skipped_reason == 'ncu failed on base: Failed to profile kernel "x"'

    bin_dir = _fake_ncu(tmp_path, 'echo "==WARNING== No kernels were profiled."\nexit 0\n')
    pc = profile_case(make_case(), base, head, ncu=str(bin_dir / "ncu"))
    assert pc.skipped_reason == (
        "ncu failed on base: no kernel was launched inside the NVTX range 'guard-profile'"
    )


@posix_only
def test_a_kernel_name_past_csvs_field_limit_is_cut_not_raised(tmp_path, monkeypatch):
    """A 200 KB name (csv refuses fields over 128 KB by default) once raised _csv.Error
    out of profile_case, which never raises: the guard's exit 3 for a regression."""
    name = "void huge_kernel<" + "float, " * 30_000 + "4>(float*, int)"
    assert len(name) > 200_000
    text = BASE_CSV.read_text().replace('"_attn_fwd"', f'"{name}"')
    limit = csv.field_size_limit()
    rows = parse_raw_csv(text)
    assert csv.field_size_limit() == limit  # put back
    assert len(rows) == 1 and len(rows[0].name) == profile.MAX_NAME_CHARS
    assert rows[0].values[DURATION] == 960512.0  # the row's metrics are still read
    big = tmp_path / "big.csv"
    big.write_text(text)
    bin_dir = _fake_ncu(tmp_path, f"cat {shlex.quote(str(big))}\n")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    pc = profile_case(make_case(), *_trees(tmp_path))
    assert not pc.skipped, pc.skipped_reason
    assert pc.base is not None and pc.base.kernel_name == "huge_kernel"


@posix_only
def test_happy_path_end_to_end(tmp_path, monkeypatch):
    """A fake ncu on PATH prints the captured H100 output (base's or head's, by the
    --kernels-root it was given) and records its arguments."""
    args_file = tmp_path / "args"
    bin_dir = _fake_ncu(
        tmp_path,
        f'printf "%s\\n" "$@" >> {shlex.quote(str(args_file))}\n'
        'case "$*" in\n'
        f'  *"/base --case-json"*) cat {shlex.quote(str(BASE_CSV))} ;;\n'
        f"  *) cat {shlex.quote(str(HEAD_CSV))} ;;\n"
        "esac\n",
    )
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    base, head = _trees(tmp_path)
    case = make_case("b4-h16-s4096-d128-full")
    pc = profile_case(case, base, head, seed=7)
    assert not pc.skipped, pc.skipped_reason
    assert pc == _comparison()
    assert profile_markdown(pc) == (GOLDEN / "profile.md").read_text()

    argv = args_file.read_text().splitlines()
    first = argv[: len(argv) // 2]  # the base run's arguments
    assert first[:9] == [
        "--nvtx", "--nvtx-include", "guard-profile/", "--clock-control", "none",
        "--launch-count", "10", "--metrics", ",".join(ALL_METRICS),
    ]  # fmt: skip
    assert first[9:15] == ["--csv", "--page", "raw", "--target-processes", "all", sys.executable]
    target = "guard.measure.profile_target"
    assert first[15:19] == ["-m", target, "--kernels-root", str(base.resolve())]
    assert json.loads(first[20]) == case.to_json()
    assert first[21:] == ["--seed", "7"]
    assert str(head.resolve()) in argv[len(argv) // 2 :]


# --------------------------------------------------------------------------- the child


def _target(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-m", "guard.measure.profile_target", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_target_bad_tree_and_case(tmp_path):
    proc = _target("--kernels-root", str(tmp_path), "--case-json", "{}")
    assert proc.returncode == 2 and proc.stdout == ""
    assert (
        proc.stderr.strip()
        == f"guard.measure.profile_target: {tmp_path.resolve()} has no kernels/ package"
    )
    proc = _target("--kernels-root", str(ROOT), "--case-json", "{")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("guard.measure.profile_target: bad --case-json (JSONDecodeError")


def _has_gpu() -> bool:
    import torch

    return torch.cuda.is_available()


@pytest.mark.skipif(_has_gpu(), reason="a GPU is here: the child would profile, not fail")
def test_target_without_gpu_says_so():
    """Everything the child prints goes to stderr: stdout belongs to ncu's CSV."""
    proc = _target("--kernels-root", str(ROOT), "--case-json", json.dumps(make_case().to_json()))
    assert proc.returncode == 2
    assert proc.stdout == ""
    last = proc.stderr.strip().splitlines()[-1]
    assert last == "guard.measure.profile_target: torch sees no CUDA GPU"


def _recording_ncu(tmp_path: Path, args_file: Path) -> Path:
    """A fake ncu that appends its arguments to ``args_file`` and prints the head CSV."""
    record = f'printf "%s\\n" "$@" >> {shlex.quote(str(args_file))}'
    return _fake_ncu(tmp_path, f"{record}\ncat {shlex.quote(str(HEAD_CSV))}\n")


@posix_only
def test_head_case_runs_in_the_head_arm(tmp_path, monkeypatch):
    """Two kernels on one shape: the base arm profiles ``case``, the head arm ``head_case``
    (SDPA against a kernel of this tree), and the answer keeps ``case``'s id."""
    args_file = tmp_path / "args"
    bin_dir = _recording_ncu(tmp_path, args_file)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    base_case = make_case("b4-h16-s2048-d64-full", kernel="sdpa")
    head_case = make_case("b4-h16-s2048-d64-full", kernel="cuda_flash")
    pc = profile_case(base_case, *_trees(tmp_path), head_case=head_case)
    assert not pc.skipped, pc.skipped_reason
    assert pc.case_id == base_case.id
    cases = [json.loads(a) for a in args_file.read_text().splitlines() if a.startswith("{")]
    assert [c["kernel"] for c in cases] == ["sdpa", "cuda_flash"]


@posix_only
def test_ncu_gluon_profiles_two_registry_names_of_this_tree(tmp_path, monkeypatch):
    """benchmarks/ncu_gluon.py end to end with a fake ncu: by default the portable Triton
    kernel (triton_flash) as the base and the entry point (flash_attention) as the head,
    both in this tree, on each built-in shape; a malformed --shape exits 2."""
    from benchmarks import ncu_gluon

    args_file = tmp_path / "args"
    bin_dir = _recording_ncu(tmp_path, args_file)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    out = tmp_path / "out"
    assert ncu_gluon.main(["--out", str(out)]) == 0
    argv = args_file.read_text().splitlines()
    cases = [json.loads(a) for a in argv if a.startswith("{")]
    assert [c["kernel"] for c in cases] == ["triton_flash", "flash_attention"] * 2
    roots = [argv[i + 1] for i, a in enumerate(argv) if a == "--kernels-root"]
    assert set(roots) == {str(ROOT.resolve())}
    text = (out / "ncu-gluon.md").read_text()
    assert text.count("base = triton_flash, head = flash_attention") == len(ncu_gluon.SHAPES)
    with pytest.raises(SystemExit) as info:
        ncu_gluon.main(["--out", str(out), "--shape", "4,16,2048,64,sideways,float16"])
    assert info.value.code == 2
