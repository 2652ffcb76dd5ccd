"""benchmarks/bench_gluon.py's provider names: which config entries they set and which
shapes they are checked and timed on (no GPU needed)."""

from __future__ import annotations

import sys

import pytest
from conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import bench_gluon  # benchmarks/ is not a package

HD64_FULL = (1, 2, 2, 10, 10, 64, False, "float16")
HD64_CAUSAL = (1, 2, 2, 10, 10, 64, True, "float16")
HD128_FULL = (1, 2, 2, 10, 10, 128, False, "float16")


def test_shape_filters_are_not_config_entries():
    assert bench_gluon.parse_gluon("gluon-ws-persistent:STAGES=3:hd=64:causal=0") == (
        "ws-persistent",
        {"STAGES": 3},
    )
    assert bench_gluon.parse_gluon("gluon-simple:BLOCK_N=64") == ("simple", {"BLOCK_N": 64})


@pytest.mark.parametrize(
    ("provider", "taken"),
    [
        ("sdpa", (True, True, True)),
        ("triton+gluon", (True, True, True)),
        ("gluon-ws:hd=128", (False, False, True)),
        ("gluon-ws-persistent:STAGES=3:hd=64:causal=0", (True, False, False)),
        ("gluon-simple-overlap:causal=1", (False, True, False)),
    ],
)
def test_a_provider_takes_only_the_shapes_its_filters_name(provider, taken):
    cases = (HD64_FULL, HD64_CAUSAL, HD128_FULL)
    assert tuple(bench_gluon._takes(provider, case) for case in cases) == taken


def test_base_is_not_a_config_entry():
    assert bench_gluon.parse_gluon("gluon-simple-overlap:BLOCK_N=64:BASE=1:hd=64") == (
        "simple-overlap",
        {"BLOCK_N": 64},
    )


def test_the_base_kernel_comes_from_a_revision_or_a_file(tmp_path):
    import subprocess

    head = subprocess.run(["git", "show", "HEAD:kernels/gluon_flash_fwd.py"], cwd=ROOT,
                          capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert bench_gluon.write_base_module("HEAD", tmp_path / "a").read_text() == head
    saved = tmp_path / "saved.py"
    saved.write_text("# another kernel\n")
    assert bench_gluon.write_base_module(str(saved), tmp_path / "b").read_text() == (
        "# another kernel\n"
    )
    with pytest.raises(SystemExit, match="--base no-such-rev"):
        bench_gluon.write_base_module("no-such-rev", tmp_path / "c")
