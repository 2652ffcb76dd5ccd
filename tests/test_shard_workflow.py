"""The PR workflow's shards: a matrix of shards per GPU kind, a merge job per kind that
runs the base commit's ``guard merge`` and no PR code, and a comment that shows the
merged verdict (one table per GPU kind), never a shard's."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

WORKFLOWS = Path(__file__).resolve().parent.parent / ".github" / "workflows"


def _load(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((WORKFLOWS / name).read_text("utf-8"))
    return doc


def test_each_gpu_kind_runs_its_shards_then_one_merge() -> None:
    jobs = _load("perf-guard.yml")["jobs"]
    guard, merge = jobs["guard"], jobs["merge"]
    shards = guard["strategy"]["matrix"]["shard"]
    count = int(re.fullmatch(r"\$\{\{ matrix\.shard \}\}/(\d+)", guard["env"]["SHARD"])[1])
    assert shards == list(range(1, count + 1))  # every shard of N, each once
    [check] = [s["run"] for s in guard["steps"] if "guard.ci" in s.get("run", "")]
    assert '--shard "$SHARD"' in check
    [upload] = [s for s in guard["steps"] if "upload-artifact" in s.get("uses", "")]
    assert upload["with"]["name"].startswith("perf-guard-shard-${{ matrix.gpu }}-")
    # always(): skipped or cancelled GPU jobs end in the merge as exit 3, never a pass.
    assert "guard" in merge["needs"] and "always()" in merge["if"]
    assert merge["strategy"]["matrix"]["gpu"] == guard["strategy"]["matrix"]["gpu"]
    refs = [s["with"].get("ref") for s in merge["steps"] if "checkout" in s.get("uses", "")]
    assert refs == ["${{ needs.authorize.outputs.base_sha }}"]  # the judge, no PR code
    [download] = [s for s in merge["steps"] if "download-artifact" in s.get("uses", "")]
    assert download["with"]["pattern"] == "perf-guard-shard-${{ matrix.gpu }}-*"
    [run] = [s["run"] for s in merge["steps"] if "guard merge" in s.get("run", "")]
    assert "--out ../perf-guard-out/meta.json" in run
    [verdict] = [s for s in merge["steps"] if "upload-artifact" in s.get("uses", "")]
    assert verdict["with"]["name"] == "perf-guard-${{ matrix.gpu }}"
    assert merge["permissions"] == {"contents": "read"}


def test_the_comment_reads_the_merged_verdicts_not_the_shards() -> None:
    steps = _load("perf-guard-comment.yml")["jobs"]["comment"]["steps"]
    [render] = [s["run"] for s in steps if "guard.github.comment" in s.get("run", "")]
    assert "perf-guard-shard-*" in render and "metas+=" in render
