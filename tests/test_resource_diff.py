"""`guard compare --against REF` on a CPU-only machine says what changed in the compiled
kernels: a temporary repository whose second commit raises the Triton kernel's tile
(64 -> 128 query rows for head_dim 64 on sm_90) reports the register change beside a
"no verdict" (nothing can be timed without a GPU). Compiles for sm_90 with triton's
bundled ptxas; no GPU needed."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import git as _git

pytest.importorskip("triton")
ROOT = Path(__file__).resolve().parent.parent
SUITE = """\
schema_version: 1
name: resources-tiny
kernels: [triton_flash, sdpa]
gate: [triton_flash]
cases:
  - {shape: [1, 2, 128, 64], causal: false}
"""
OLD = "            64: triton_config(64, 64, 4, 3),\n"
NEW = "            64: triton_config(128, 64, 4, 3),\n"


def test_compare_against_reports_a_register_rise_without_a_gpu(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for folder in ("guard", "kernels", "kernel_reports"):
        shutil.copytree(ROOT / folder, repo / folder, ignore=ignore)
    (repo / "suite.yaml").write_text(SUITE)
    _git(repo.parent, "init", "-q", "-b", "main", str(repo))
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "base")
    kernel = repo / "kernels" / "flash_plan.py"
    text = kernel.read_text()
    assert text.count(OLD) >= 1
    kernel.write_text(text.replace(OLD, NEW, 1))  # the sm_90 table comes first
    _git(repo, "commit", "-qam", "head: bigger tiles")
    md = tmp_path / "compare.md"
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(repo)
    proc = subprocess.run(
        [sys.executable, "-m", "guard", "compare", "--against", "HEAD~1", "--suite",
         "suite.yaml", "--device", "cpu", "--markdown", str(md), "--json", "-q",
         "--out", str(tmp_path / "results.json")],
        cwd=repo, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]  # no verdict
    out = json.loads(proc.stdout[: proc.stdout.rindex("}") + 1])
    assert out["headline"].startswith("NO VERDICT")
    report = md.read_text()
    assert "Compiler resources that changed" in report
    # As rendered: Markdown-escaped ("\_attn_fwd", "-&gt;"), e.g. "registers 125 -> 238".
    rise = re.search(r"sm_90 \\_attn_fwd: registers (\d+) -&gt; (\d+)", report)
    assert rise, report
    assert int(rise.group(2)) > int(rise.group(1))
    assert "config.BLOCK_M" in report
    # The records are kept in the results file (schema 2), per case and arch.
    from guard.store import results

    [triton] = [c for c in results.load(tmp_path / "results.json").cases if c.resources]
    assert triton.resources[0]["arch"] == "sm_90" and triton.resources[0]["registers"] > 0
