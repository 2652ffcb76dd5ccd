"""The PR comment from hostile or oversized outcome files: ``python -m guard.github.comment``
answers every bad input with one line and exit 2 (never a traceback, a hang or all
memory), writes a comment that mentions no one and links only http(s) URLs, and keeps
it within GitHub's 65,536-character limit without cutting a Markdown construct."""

from __future__ import annotations

import json
import os
import re
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from guard.base import text
from guard.decide.outcome import (
    MAX_CASES,
    MAX_TEXT,
    CaseOutcome,
    CaseProfile,
    CaseVerdict,
    CheckVerdict,
    Outcome,
)
from guard.report import comment

ROOT = Path(__file__).resolve().parent.parent
GITHUB_MAX_BODY = 65_536  # characters GitHub accepts in a comment
ZWSP = "\u200b"


def _limit_memory() -> None:
    # A reader that slurps /dev/zero dies of MemoryError here instead of filling the
    # shared machine's memory.
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))


def _cli(*args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-s", "-E", "-m", "guard.github.comment", *map(str, args)],
        cwd=ROOT, capture_output=True, text=True, errors="replace", timeout=120,
        preexec_fn=_limit_memory,
    )  # fmt: skip


def _assert_one_line_error(proc: subprocess.CompletedProcess[str], names: str) -> None:
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.startswith("guard.github.comment: error: ") and proc.stderr.count("\n") == 1
    assert names in proc.stderr


def _valid(**edit: Any) -> dict[str, Any]:
    return {
        "schema_version": 2,
        "verdict": "regression",
        "headline": "FAIL: 1 significant regression(s)",
        "gpu": "NVIDIA H100 80GB HBM3",
        "cases": [{"id": "k/a", "gate": True, "verdict": "regression", "fails": True}],
        "run_url": "https://github.com/o/r/actions/runs/1",
        **edit,
    }


def _meta(tmp_path: Path, data: dict[str, Any], name: str = "meta.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data), "utf-8")
    return path


# ------------------------------------------------------------------ bad input: exit 2


@pytest.mark.parametrize("opening", ["[", '{"a":'])
def test_deeply_nested_meta_is_one_line_error(tmp_path: Path, opening: str) -> None:
    meta = tmp_path / "meta.json"
    meta.write_text(opening * 200_000)
    proc = _cli("--meta", meta, "--out", tmp_path / "c.md")
    _assert_one_line_error(proc, f"{meta}: nested too deeply")
    assert not (tmp_path / "c.md").exists()


@pytest.mark.parametrize("kind", ["/dev/zero", "fifo", "directory", "missing"])
def test_meta_that_is_no_regular_file_is_one_line_error(tmp_path: Path, kind: str) -> None:
    meta = {
        "/dev/zero": Path("/dev/zero"),
        "fifo": tmp_path / "fifo",
        "directory": tmp_path,
        "missing": tmp_path / "none.json",
    }[kind]
    if kind == "fifo":
        os.mkfifo(meta)  # no writer: an open() for reading would wait for one forever
    proc = _cli("--meta", meta, "--out", tmp_path / "c.md")
    _assert_one_line_error(proc, f"{meta}: cannot read it")


def test_too_many_meta_files_is_one_line_error(tmp_path: Path) -> None:
    meta = _meta(tmp_path, _valid())
    proc = _cli(*["--meta", meta] * (comment.MAX_FILES + 1), "--out", tmp_path / "c.md")
    _assert_one_line_error(proc, "--meta")


@pytest.mark.parametrize("where", ["directory", "under a file", "missing parent", "fifo"])
def test_out_that_cannot_be_written_is_one_line_error(tmp_path: Path, where: str) -> None:
    meta = _meta(tmp_path, _valid())
    out = {
        "directory": tmp_path,
        "under a file": meta / "c.md",
        "missing parent": tmp_path / "no" / "c.md",
        "fifo": tmp_path / "fifo",
    }[where]
    if where == "fifo":
        os.mkfifo(out)  # no reader: writing would wait for one
    proc = _cli("--meta", meta, "--out", out)
    _assert_one_line_error(proc, f"--out {out}: cannot write it")


def test_lone_surrogates_are_replaced_and_the_comment_written(tmp_path: Path) -> None:
    # "\ud800" is a valid JSON string escape but no UTF-8: every field that holds one
    # is shown with U+FFFD, and the comment is still written.
    bad = "x\ud800y"
    data = _valid(
        gpu=bad,
        headline=bad,
        cases=[{"id": bad, "gate": True, "verdict": "regression", "fails": True,
                "reason": bad, "notes": [bad]}],
        notes=[bad],
        policy_changes=[bad],
        baseline_changes=[bad],
        run_url=bad,
        profiles=[{"id": bad, "rows": [[bad, bad, bad, bad]]}],
    )  # fmt: skip
    meta = _meta(tmp_path, data)
    assert "\\ud800" in meta.read_text()  # json.dumps escapes it: the file is ASCII
    out = tmp_path / "c.md"
    proc = _cli("--meta", meta, "--out", out)
    assert proc.returncode == 0, proc.stderr
    body = out.read_bytes().decode("utf-8")  # strict: valid UTF-8
    # gpu, headline, case, reason, resource note (its case and text), note, policy,
    # baseline, run URL, profile title and its 4 cells
    assert body.count("x\ufffdy") == 15, body


# ------------------------------------------------------------------ what the comment shows


def _everywhere(value: str) -> Outcome:
    """An outcome with ``value`` in every string field, its case moved and failing."""
    return Outcome(
        CheckVerdict.REGRESSION,
        value,
        cases=(CaseOutcome(value, True, CaseVerdict.REGRESSION, True, 1.2, reason=value,
                           notes=(value,)),),
        notes=(value,),
        policy_changes=(value,),
        baseline_changes=(value,),
        gpu=value,
        tested_commit=value,
        judge_commit=value,
        run_url=value,
        profiles=(CaseProfile(value, ((value, value, value, value),)),),
    )  # fmt: skip


def test_no_string_from_the_file_mentions_anyone() -> None:
    body = comment.markdown([_everywhere("@octocat @org/team a@b.c")])
    assert body.count("@") >= 20  # every field is shown...
    assert re.findall(f"@(?!{ZWSP})", body) == []  # ...and no "@" is a mention
    assert f"`@{ZWSP}octo" in body  # in code spans too (an e-mail reply is plain text)


def test_mention_escape_in_the_text_helpers() -> None:
    assert text.md_text("hi @octocat") == f"hi @{ZWSP}octocat"
    assert text.md_code("@octocat") == f"`@{ZWSP}octocat`"
    table = text.md_table(["@a"], [["@b"]])
    assert re.findall(f"@(?!{ZWSP})", table) == []


@pytest.mark.parametrize(
    "url",
    [
        "javascript:alert(1)",
        "JavaScript:alert(1)",
        "data:text/html,<script>alert(1)</script>",
        "vbscript:msgbox(1)",
        "//evil.example/run",
        "runs/1",
        "https://github.com@evil.example/run",  # a host that reads as github.com
        "https://evil.example/a b",
        "https://\u0435vil.example/run",  # not ASCII
    ],
)
def test_only_http_urls_become_links(url: str) -> None:
    body = comment.markdown([Outcome(CheckVerdict.PASS, "PASS", run_url=url)])
    assert "](" not in body  # no link at all
    assert "(not linked: not an http(s) URL)" in body


def test_a_run_url_is_a_link() -> None:
    url = "https://github.com/o/r/actions/runs/123?check_suite_focus=true"
    body = comment.markdown([Outcome(CheckVerdict.PASS, "PASS", run_url=url)])
    assert body.rstrip().endswith(f"[The run, its reports and results]({url})")
    assert text.md_link("x", "http://e.invalid/(a)") == "[x](<http://e.invalid/(a)>)"


@pytest.mark.parametrize("gpu", ["", "  "])
def test_a_gpu_without_a_name_reads_unnamed_gpu(gpu: str) -> None:
    body = comment.markdown([Outcome(CheckVerdict.PASS, "PASS", gpu=gpu)])
    assert "### ✅ unnamed GPU: no significant regression (exit 0)" in body


@pytest.mark.parametrize(
    ("data", "escaped"),
    [
        ("a|b", "a\\|b"),
        ("<img src=x onerror=alert(1)>", "&lt;img src=x onerror=alert(1)&gt;"),
        ("&#64;x &amp;", "&amp;#64;x &amp;amp;"),
        ("`code`", "\\`code\\`"),
        ("a\nb\r\nc", "a b c"),
        ("[x](http://e.invalid)", "[x\\](http://e.invalid)"),
        ("![i](http://e.invalid/i.png)", "![i\\](http://e.invalid/i.png)"),
        ("[x]: http://e.invalid", "[x\\]: http://e.invalid"),
        ("*b* _i_ ~s~", "\\*b\\* \\_i\\_ \\~s\\~"),
        ("# heading", "\\# heading"),
        ("- item", "\\- item"),
        ("+ item", "\\+ item"),
        ("1. item", "1\\. item"),
        ("2) item", "2\\) item"),
        ("---", "\\---"),
        ("===", "\\==="),
        ("x\ud800", "x\ufffd"),
        # unchanged: plain names and numbers
        ("triton_flash/b1-h8-s512-d64-full", "triton_flash/b1-h8-s512-d64-full"),
        ("+13.1%", "+13.1%"),
        ("-5.0 pp", "-5.0 pp"),
        ("1.054x", "1.054x"),
    ],
)
def test_md_text_escapes_data(data: str, escaped: str) -> None:
    assert text.md_text(data) == escaped


def test_md_url_encodes_what_could_end_the_link() -> None:
    assert text.md_url("https://e.invalid/a") == "https://e.invalid/a"
    assert text.md_url("https://e.invalid/a b)") == "<https://e.invalid/a%20b)>"
    # a non-ASCII space as its UTF-8 bytes (was "%2028"), a control character too
    assert text.md_url("https://e.invalid/a\u2028\x01") == "<https://e.invalid/a%E2%80%A8%01>"


# ------------------------------------------------------------------ the size cap

HOSTILE = "<&|@`*_](x)"  # each character grows when escaped


def _long(prefix: str, n: int = MAX_TEXT) -> str:
    return (prefix + HOSTILE * n)[:n]


def _at_limits(gpu: str) -> dict[str, Any]:
    """A valid outcome file just under the reader's byte limit, every string as long
    as allowed and made of characters that grow when escaped; half its cases fail."""
    cases = [
        {
            "id": _long(f"k{i:03}/"),
            "gate": True,
            "verdict": "regression" if i % 2 else "error",
            "fails": bool(i % 2),
            "ratio": 1.5,
            "low": 1.4,
            "high": 1.6,
            "reason": _long(f"reason {i} "),
            "notes": [_long(f"note {i} ", 600)] if i < 80 else [],
        }
        for i in range(MAX_CASES)
    ]
    data = _valid(
        verdict="regression",
        headline=_long("headline "),
        gpu=_long(gpu),
        cases=cases,
        notes=[_long(f"note {i} ") for i in range(10)],
        policy_changes=[_long(f"policy {i} ") for i in range(8)],
        baseline_changes=[_long(f"baselines/{i}.json ") for i in range(8)],
        profiles=[
            {"id": _long(f"p{p} "), "rows": [[_long(f"m{r} ", 200)] * 4 for r in range(16)]}
            for p in range(2)
        ],
    )
    size = len(json.dumps(data))
    assert comment.MAX_FILE_BYTES - 50_000 < size <= comment.MAX_FILE_BYTES, size
    return data


def _outside_code(line: str) -> str:
    return re.sub(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", "", line)


def _assert_whole_constructs(body: str) -> None:
    """Nothing cut inside a construct: folded blocks closed, table rows whole, code
    spans closed, entities whole, no link but the run's."""
    assert body.count("<details>") == body.count("</details>")
    for line in body.splitlines():
        plain = _outside_code(line)
        assert not re.search(r"(?<!\\)`", plain), line
        assert not re.search(r"&(?!amp;|lt;|gt;)", plain), line
        plain = re.sub(r"\]\(https://github\.com/o/r/actions/runs/1\)$", "", plain)
        assert not re.search(r"(?<!\\)\]\(", plain), line
        if line.startswith("<details>"):
            assert line.endswith("</summary>"), line
        if line.startswith("|"):
            assert len(re.findall(r"(?<!\\)(?:\\\\)*\|", line)) == 5, line  # 4 columns


def _assert_fits(body: str, gpus: int) -> None:
    assert len(body) <= GITHUB_MAX_BODY
    assert len(body.encode("utf-8")) <= comment.MAX_COMMENT_BYTES
    assert body.startswith(comment.MARKER)
    assert body.count("### 🔴 ") == gpus  # every GPU's verdict
    assert body.rstrip().endswith("[The run, its reports and results]("
                                  "https://github.com/o/r/actions/runs/1)")  # fmt: skip
    _assert_whole_constructs(body)


def test_comment_at_the_readers_limits_fits_github(tmp_path: Path) -> None:
    meta = _meta(tmp_path, _at_limits("gpu "))
    out = tmp_path / "c.md"
    proc = _cli("--meta", meta, "--out", out)
    assert proc.returncode == 0, proc.stderr
    body = out.read_text("utf-8")
    _assert_fits(body, 1)
    rows = [line for line in body.splitlines() if line.startswith("| k")]
    assert rows and all("regression (fails)" in row for row in rows)  # failing cases first
    assert re.search(r"\.\.\. and \d+ more case\(s\) that moved, \d+ of them failing", body)


def test_comments_of_many_gpus_at_the_limits_fit_github(tmp_path: Path) -> None:
    metas = [
        _meta(tmp_path, _at_limits(f"gpu{i} "), f"meta{i}.json") for i in range(comment.MAX_FILES)
    ]
    out = tmp_path / "c.md"
    proc = _cli(*[a for m in metas for a in ("--meta", m)], "--out", out)
    assert proc.returncode == 0, proc.stderr
    body = out.read_text("utf-8")
    _assert_fits(body, comment.MAX_FILES)
    more = re.findall(r"\.\.\. and \d+ more case\(s\) that moved, \d+ of them failing", body)
    assert len(more) == comment.MAX_FILES


def test_a_small_outcome_is_shown_in_full() -> None:
    outcome = Outcome(
        CheckVerdict.REGRESSION,
        "FAIL",
        cases=tuple(
            CaseOutcome(f"k/{i}", True, CaseVerdict.REGRESSION, True, 1.2, notes=("regs +8",))
            for i in range(5)
        ),
        notes=("n1", "n2"),
        gpu="h100",
        run_url="https://github.com/o/r/actions/runs/1",
    )
    body = comment.markdown([outcome])
    assert "see the run" not in body
    assert all(f"| k/{i} |" in body for i in range(5)) and "> n2" in body


def test_shortening_goes_from_lists_to_rows() -> None:
    # Budgets between full and bare: lists and notes shrink before the failing rows do.
    outcome = Outcome.from_json(_at_limits("gpu "))
    sizes = []
    for budget in (400_000, 120_000, 60_000, 20_000, 8_000):
        body = comment.markdown([outcome], budget=budget)
        assert len(body.encode("utf-8")) <= budget
        _assert_whole_constructs(body)
        sizes.append(sum(1 for line in body.splitlines() if line.startswith("| k")))
    assert sizes == sorted(sizes, reverse=True) and sizes[0] == comment.DETAILS[0].rows
    assert sizes[-1] < sizes[0]
