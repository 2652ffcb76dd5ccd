"""The reports: Markdown golden files, the self-contained HTML (also rendered in
headless Chromium), the inline SVG plots, and the ``report``/``history`` commands.

Regenerate the golden files after an intended change with
``UPDATE_GOLDEN=1 python -m pytest tests/test_report.py`` and review the diff;
``UPDATE_DOCS=1`` also rewrites ``docs/report.png`` from the Chromium screenshot.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path

import pytest
import report_data as data

from guard.base import text
from guard.commands import main as commands_main
from guard.decide.compare import compare_runs
from guard.report import render, report, svg, terminal
from guard.store import history, results
from guard.store.results import CaseResult
from guard.store.suite import flops

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = Path(__file__).resolve().parent / "golden"
CHROMIUM = Path("/usr/bin/chromium")
needs_chromium = pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason="headless Chromium not installed (/usr/bin/chromium): "
    "apt-get install -y chromium (.ci/run installs it)",
)


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN"):
        path.parent.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return
    assert path.exists(), f"{path} is missing: run with UPDATE_GOLDEN=1 to create it"
    expected = path.read_text(encoding="utf-8")
    if text != expected:
        diff = "".join(
            difflib.unified_diff(
                expected.splitlines(True), text.splitlines(True), str(path), "rendered"
            )
        )
        pytest.fail(f"{name} differs from its golden file (UPDATE_GOLDEN=1 to accept):\n{diff}")


# ------------------------------------------------------------------ Markdown


def test_comparison_markdown_fail_golden() -> None:
    check_golden("comparison_fail.md", render.comparison_markdown(data.fixed_comparison("fail")))


def test_comparison_markdown_pass_golden() -> None:
    md = render.comparison_markdown(
        data.fixed_comparison("pass"), report_url="https://example.invalid/run/1"
    )
    check_golden("comparison_pass.md", md)


def test_run_markdown_golden() -> None:
    check_golden("run.md", render.run_markdown(data.fixed_run()))
    check_golden(
        "run_no_verdict.md",
        render.run_markdown(data.fixed_run(), "no baseline for this hardware"),
    )


def test_comparison_markdown_order() -> None:
    """Verdict first, the cases that moved in the table, the rest folded away."""
    md = render.comparison_markdown(data.fixed_comparison("fail"))
    lines = md.splitlines()
    assert lines[2] == "**FAIL: 1 case(s) with wrong results, 1 significant regression(s)**"
    table, folded = md.split("<details><summary>", 1)[0], md.split("<details><summary>", 1)[1]
    assert "triton_flash/b1-h8-s512-d64-full" in table  # regression: moved
    assert "cuda_flash/b1-h8-s512-d64-causal" in table  # wrong: moved
    assert "triton_flash/b1-h8-s512-d64-causal" not in table  # unchanged: folded
    assert "triton_flash/b1-h8-s512-d64-causal" in folded
    assert "Environment differs" in md and "580.82" in md


# Names and messages a results file or a kernel may carry: HTML, pipes, backticks,
# a link, emphasis, a line break that would start a workflow command.
EVIL_NAME = "x<img src=x onerror=alert(1)>|`t`*b*[a](http://e.invalid)\n::error::pwned"
EVIL_REASON = "boom | `code` <script>alert(1)</script> [x]: http://e.invalid\r\n> quote"
TAGS_OF_OURS = {"<details>", "<summary>", "</summary>", "</details>"}


def _check_markdown_is_inert(md: str, columns: dict[str, int]) -> None:
    """No raw HTML but ours, no link but ours, no line started by the data, every
    table row with its columns (unescaped pipes), backticks paired on every line."""
    for line in md.splitlines():
        text = re.sub(r"(`+).*?\1", "", line.replace("\\`", ""))  # code spans are literal
        text = re.sub(r"\]\(<[^<>\s]*>\)", "](url)", text)  # our link's <destination>
        assert set(re.findall(r"</?[a-z][^>]*>", text)) <= TAGS_OF_OURS, line
        assert "`" not in text, line
        assert not re.search(r"(?<!\\)\]\((?!url\))", text), line
        assert not line.lstrip().startswith("::"), line
        assert not line.startswith("> quote"), line
        if line.startswith("|"):
            pipes = len(re.findall(r"(?<!\\)\|", line))
            assert pipes in {n + 1 for n in columns.values()}, line


def _evil_comparison():
    fixed = data.fixed_comparison("fail")
    cases = tuple(
        replace(c, case_id=f"{c.kernel}/{EVIL_NAME}{i}", reason=EVIL_REASON if c.reason else "")
        for i, c in enumerate(fixed.cases)
    )
    env = replace(fixed.candidate.environment, gpu_name=EVIL_NAME, torch="2.11 | <b>")
    return replace(
        fixed,
        cases=cases,
        candidate=replace(fixed.candidate, environment=env),
        baseline=replace(fixed.baseline, label="base`s <i>label</i>"),
        environment_diff=(("driver", EVIL_NAME, "580|82"),),
        notes=(EVIL_REASON,),
    )


def test_comparison_markdown_escapes_data() -> None:
    md = render.comparison_markdown(_evil_comparison(), report_url="https://e.invalid/a b)")
    _check_markdown_is_inert(md, {"comparison": 7, "environment": 3})
    assert "x&lt;img src=x onerror=alert(1)&gt;\\|\\`t\\`\\*b\\*[a\\](http" in md
    assert "[Full report](<https://e.invalid/a%20b)>)" in md
    assert "``base`s <i>label</i>``" in md  # a code span: literal, fenced past its backtick


def test_run_markdown_escapes_data() -> None:
    run = data.fixed_run()
    first = run.cases[2]
    bad = replace(first, case=replace(first.case, name=EVIL_NAME), reason=EVIL_REASON)
    run = replace(run, cases=(*run.cases[:2], bad), notes=(EVIL_REASON,))
    md = render.run_markdown(run, EVIL_REASON)
    _check_markdown_is_inert(md, {"run": 6})
    assert "wrong: boom \\| \\`code\\` &lt;script&gt;" in md


def test_markdown_escaping_keeps_plain_names() -> None:
    for name in ("triton_flash/b1-h8-s512-d64-full", "pytest/t.py::test_attn[fp16]", "a-b.c"):
        assert text.md_text(name) == name
    assert text.md_text("_x_ a_b") == "\\_x\\_ a_b"
    assert text.md_code("a`b") == "``a`b``" and text.md_code("`x") == "`` `x ``"
    assert text.md_block("```\n</details>") == "````\n```\n</details>\n````"


def test_annotations_are_one_command_each() -> None:
    """A newline in a case name or message must not start a second workflow command,
    nor a "::" in a name end the title early."""
    lines = render.annotations(_evil_comparison().outcome())
    # The regression and the wrong case fail the check (errors); the not-gated kernel
    # that failed to run is shown only (a warning).
    assert [line.split(" ", 1)[0] for line in lines] == ["::error", "::error", "::warning"]
    for line in lines:
        assert "\n" not in line and "\r" not in line
        command, props, _ = re.fullmatch(r"::(\w+) ([^:]*)::(.*)", line).groups()
        assert command in ("error", "warning") and props.startswith("title=")
        assert props.endswith("%0A%3A%3Aerror%3A%3Apwned" + props[-1])  # title, escaped
    assert lines[0].startswith("::error title=Wrong results%3A cuda_flash/x<img")
    assert lines[1].startswith("::error title=Performance regression%3A triton_flash/x<img")
    assert re.search(
        r": 1\.\d{3}x \[1\.\d{3}, 1\.\d{3}\] of the baseline's time "
        r"\(regression: ≥ 1\.\d{3}x > 1\.005\)$",
        lines[1],
    )
    assert lines[2].startswith("::warning title=Kernel failed to run%3A cuda_flash/x<img")


# ----------------------------------------------------------------- the HTML

EXTERNAL = re.compile(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//|@import|url\(""", re.I)


def _svgs(html: str) -> list[str]:
    return re.findall(r"<svg\b.*?</svg>", html, flags=re.S)


def _assert_self_contained(html: str) -> None:
    assert "<script" not in html.lower()
    assert not EXTERNAL.search(html), EXTERNAL.search(html)
    for plot in _svgs(html):
        ET.fromstring(plot)  # every plot is well-formed XML


def test_html_comparison_shows_every_case() -> None:
    base, cand = data.pair()
    comparison = compare_runs(base, cand)
    html = report.html_report(cand, comparison)
    _assert_self_contained(html)
    for c in cand.cases:
        assert f"<h3>{c.id}</h3>" in html
    assert html.count('<section class="case') == len(cand.cases)
    assert comparison.headline in html
    # plots: a ratio plot per compared case, a distribution per timed case
    compared = [c for c in comparison.cases if c.interval is not None]
    assert html.count('aria-label="ratio ') == len(compared)
    timed = [c for c in cand.cases if c.rounds]
    assert html.count('aria-label="per-call times') == len(timed)
    # rounds are told apart: one lane per round per arm
    assert html.count('class="round"') == sum(
        len(c.rounds) + len(base.case(c.id).rounds) for c in timed
    )
    # verdicts, correctness, environment difference, worker output
    assert "regression" in html and "improvement" in html and "WRONG RESULTS" in html
    assert "relative norm error" in html and "bound (max abs)" in html
    assert "2.100e-02" in html  # the wrong case's error
    assert "This machine differs from the baseline" in html
    assert "580.65" in html and "580.82" in html
    assert "Segmentation fault" in html
    # kernel vs SDPA table
    assert "÷ triton_flash" in html


def test_html_run_alone() -> None:
    _, cand = data.pair()
    html = report.html_report(cand)
    _assert_self_contained(html)
    assert "RUN ONLY" in html and "FAIL: 1 case(s) with wrong results" in html
    assert 'aria-label="ratio ' not in html
    for c in cand.cases:
        assert f"<h3>{c.id}</h3>" in html
    assert "÷ triton_flash" in html
    assert "This machine differs" not in html


def test_html_escapes_data() -> None:
    _, cand = data.pair()
    evil = '<img src=x onerror="alert(1)">'
    first = cand.cases[0]
    bad = replace(first, case=replace(first.case, name=evil), reason=evil)
    run = replace(cand, cases=(bad, *cand.cases[1:]), label=evil, notes=(evil,))
    html = report.html_report(run)
    assert evil not in html
    assert "&lt;img src=x" in html
    _assert_self_contained(html)


def test_kernel_table() -> None:
    _, cand = data.pair()
    table = {w.name: w for w in report.kernel_table(cand)}
    w = table["b1-h8-s512-d64-full"]
    assert w.ours == ("triton_flash",)
    rows = {r.kernel: r for r in w.rows}
    assert w.rows[0].kernel == "triton_flash" and w.rows[0].ours
    ours = rows["triton_flash"].median
    assert ours is not None
    sdpa = rows["sdpa_flash"]
    assert sdpa.median is not None and sdpa.tflops is not None
    assert sdpa.vs_ours == (pytest.approx(sdpa.median / ours),)
    assert sdpa.tflops == pytest.approx(flops(sdpa_case_shape(cand), False) / sdpa.median / 1e12)
    assert rows["cuda_flash"].median is None and rows["cuda_flash"].vs_ours == (None,)


def sdpa_case_shape(run: results.RunResult):
    found = run.case("sdpa_flash/b1-h8-s512-d64-full")
    assert found is not None
    return found.case.shape


def test_html_with_history(tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite"
    for run in data.history_runs():
        history.append(run, db)
    base, cand = data.pair()
    trends = history.trends(db, [c.id for c in cand.cases], gpu_slug="nvidia-h100-80gb-hbm3")
    assert "triton_flash/b1-h8-s512-d64-full" in trends
    assert "cuda_flash/b1-h8-s512-d64-full" not in trends  # no history: left out
    html = report.html_report(cand, compare_runs(base, cand), trends=trends)
    _assert_self_contained(html)
    assert html.count('aria-label="history of 30 runs"') == len(trends)
    assert html.count('class="step"') == 1
    assert "step: 20c0ffee" in html  # the planted step, at its commit


# ----------------------------------------------------------------- the plots


def test_nice_ticks() -> None:
    assert svg.nice_ticks(0.0, 10.0, 5) == [0, 2, 4, 6, 8, 10]
    assert svg.nice_ticks(20.3, 21.9, 4) == pytest.approx([20.5, 21.0, 21.5])
    assert svg.nice_ticks(1.0, 1.0) == [1.0]
    assert svg.log_ticks(0.3, 30.0) == [0.5, 1, 2, 5, 10, 20]


def test_plots_handle_edge_cases() -> None:
    assert svg.distribution_svg([]) == ""
    assert svg.distribution_svg([("candidate", ((),))]) == ""
    one = svg.distribution_svg([("candidate", ((1e-5,),))])
    wide = svg.distribution_svg([("candidate", ((1e-5, 1e-5, 3e-3),))])
    assert "log scale" in wide and "log scale" not in one
    huge = svg.ratio_svg(1.5, 1e-9, 1e9, 0.02, verdict="inconclusive")
    assert huge.count("<path") == 2  # both ends cut, drawn as arrows
    flat = svg.trend_svg(["a"], [None])
    for plot in (one, wide, huge, flat, svg.trend_svg(["a", "b"], [1e-3, 1e-3])):
        ET.fromstring(plot)
    assert svg.trend_svg([], []) == ""


# ------------------------------------------------------------ headless Chromium


def _chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [
        str(CHROMIUM),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--enable-logging=stderr",
        "--v=0",
        *args,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


def _full_report(tmp_path: Path) -> tuple[Path, results.RunResult]:
    db = tmp_path / "h.sqlite"
    for run in data.history_runs():
        history.append(run, db)
    base, cand = data.pair()
    trends = history.trends(db, [c.id for c in cand.cases], gpu_slug=cand.environment.gpu_slug)
    html = report.html_report(
        cand,
        compare_runs(base, cand),
        trends=trends,
        title="Performance guard report (synthetic example data)",
    )
    path = tmp_path / "report.html"
    path.write_text(html, encoding="utf-8")
    return path, cand


def _console_errors(stderr: str) -> list[str]:
    """Console lines (--enable-logging=stderr prints them as ``INFO:CONSOLE``): the
    report has no script, so any console message at all is a fault."""
    return [line for line in stderr.splitlines() if ":CONSOLE" in line or "Uncaught" in line]


@needs_chromium
def test_chromium_console_capture_works(tmp_path: Path) -> None:
    """The capture the tests below rely on does see a script error."""
    page = tmp_path / "broken.html"
    page.write_text('<html><body><script>throw new Error("planted")</script></body></html>')
    proc = _chromium(tmp_path, "--dump-dom", page.as_uri())
    assert any("planted" in line for line in _console_errors(proc.stderr)), proc.stderr[-2000:]


@needs_chromium
def test_chromium_renders_every_case(tmp_path: Path) -> None:
    path, cand = _full_report(tmp_path)
    proc = _chromium(tmp_path, "--dump-dom", path.as_uri())
    assert proc.returncode == 0, proc.stderr[-2000:]
    dom = proc.stdout
    assert "<h1>Performance guard report" in dom, dom[:500]
    for c in cand.cases:
        assert f"<h3>{c.id}</h3>" in dom
    assert dom.count("<svg") >= len(cand.cases)
    assert _console_errors(proc.stderr) == []


@needs_chromium
def test_chromium_screenshot(tmp_path: Path) -> None:
    path, _ = _full_report(tmp_path)
    png = tmp_path / "report.png"
    proc = _chromium(tmp_path, f"--screenshot={png}", "--window-size=1200,2600", path.as_uri())
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert png.stat().st_size > 20_000  # something was drawn
    assert _console_errors(proc.stderr) == []
    if os.environ.get("UPDATE_DOCS"):
        shutil.copyfile(png, ROOT / "docs" / "report.png")


# ----------------------------------------------------------------------- CLI


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    base, cand = data.pair()
    bpath, cpath = tmp_path / "base.json", tmp_path / "cand.json"
    results.save(base, bpath)
    results.save(cand, cpath)
    return bpath, cpath


def test_cli_report(tmp_path: Path, files: tuple[Path, Path], capsys) -> None:
    bpath, cpath = files
    db = tmp_path / "h.sqlite"
    for run in data.history_runs(n=8, step_at=4):
        history.append(run, db)
    out, md = tmp_path / "out" / "r.html", tmp_path / "r.md"
    argv = ["report", str(cpath), "--baseline", str(bpath), "--html", str(out)]
    code = commands_main.main([*argv, "--markdown", str(md), "--history", str(db)])
    assert code == 0
    html = out.read_text(encoding="utf-8")
    _assert_self_contained(html)
    assert "history of 8 runs" in html
    assert md.read_text(encoding="utf-8").startswith("## Performance guard\n\n**FAIL")
    code = commands_main.main(["report", str(cpath), "--json"])
    assert code == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["headline"].startswith("FAIL: ") and "RUN ONLY" in printed["headline"]
    assert commands_main.main(["report", str(cpath)]) == 0  # Markdown to stdout
    assert capsys.readouterr().out.startswith("## Performance guard")


def test_cli_compare_html(tmp_path: Path, files: tuple[Path, Path], capsys) -> None:
    """`guard compare BASE CAND --html` (guard/commands/compare.py) writes the same report."""
    bpath, cpath = files
    out = tmp_path / "c.html"
    assert (
        commands_main.main(["compare", str(bpath), str(cpath), "--html", str(out), "--json"]) == 1
    )
    html = out.read_text(encoding="utf-8")
    _assert_self_contained(html)
    assert "FAIL: 1 case(s) with wrong results, 1 significant regression(s)" in html
    assert json.loads(capsys.readouterr().out)["exit_code"] == 1


def test_cli_report_bad_input(tmp_path: Path, files: tuple[Path, Path], capsys) -> None:
    _, cpath = files
    assert commands_main.main(["report", str(tmp_path / "missing.json")]) == 2
    assert (
        commands_main.main(["report", str(cpath), "--history", str(tmp_path / "none.sqlite")]) == 2
    )
    assert "no history database" in capsys.readouterr().err


def test_cli_history(tmp_path: Path, capsys) -> None:
    db = tmp_path / "h.sqlite"
    for run in data.history_runs():
        history.append(run, db)
    case_id = "triton_flash/b1-h8-s512-d64-full"
    assert commands_main.main(["history", case_id, "--db", str(db), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert len(printed["points"]) == 30
    assert [s["index"] for s in printed["steps"]] == [20]
    assert commands_main.main(["history", case_id, "--db", str(db)]) == 0
    text = capsys.readouterr().out
    assert "STEP slower" in text and "step at 20c0ffeec0" in text
    assert commands_main.main(["history", "nope/x", "--db", str(db)]) == 2
    assert "no history for case" in capsys.readouterr().err
    assert commands_main.main(["history", case_id, "--db", str(db), "--alpha", "2"]) == 2


def test_history_option_on_measuring_commands() -> None:
    parser = commands_main.build_parser()
    for argv in (["run"], ["compare"], ["baseline", "refresh"], ["check"]):
        args = parser.parse_args([*argv, "--history", "x.sqlite"])
        assert args.history == "x.sqlite"


TINY = """\
schema_version: 1
name: tiny-report
kernels: [reference, sdpa]
gate: [reference]
cpu_timing: {rounds: 2, max_rounds: 2, samples_per_round: 3, sample_target_ms: 1, warmup_ms: 1}
cases:
  - {shape: [1, 2, 24, 16], causal: false}
"""


@pytest.mark.slow
def test_run_appends_history(tmp_path: Path) -> None:
    """End to end on the CPU: `guard run --history` stores the run it measured."""
    suite = tmp_path / "tiny.yaml"
    suite.write_text(TINY)
    db = tmp_path / "hist" / "h.sqlite"
    out = tmp_path / "r.json"
    argv = ["run", "--suite", str(suite), "--device", "cpu", "--out", str(out), "-q"]
    code = commands_main.main([*argv, "--history", str(db), "--seed", "1"])
    assert code == 0
    run = results.load(out)
    t = history.trend(db, "reference/b1-h2-s24-d16-full")
    assert len(t.points) == 1 and t.points[0].created == run.created
    assert t.points[0].median == pytest.approx(_pooled_median(run.cases[0]))


def _pooled_median(c: CaseResult) -> float:
    import numpy as np

    return float(np.median(c.samples))


@pytest.mark.parametrize("band", [0.5, 0.9])
def test_ratio_plot_survives_wide_bands(band):
    from guard.report import svg

    assert "<svg" in svg.ratio_svg(1.0, 0.9, 1.1, band)


# ------------------------------------------------------------------ terminal


def test_piped_table_never_splits_a_case_id(capsys) -> None:
    """Piped (a CI log, ``| grep``), a long case id once came out split over two
    lines ("...-d64-fu" / "ll"); the table is as wide as its rows need instead."""
    case_id = "triton_flash/b1-h8-s128-d64-full" + "-with-a-long-variant-name" * 4
    verdict = "unchanged: ≤ 1.012x (95% bound) < 1.02"
    row = [case_id, "21.0 µs", "21.0 µs", "1.001x", "[0.964, 1.038]", "2%", verdict]
    terminal.print_table(render.COMPARISON_HEADER, [row], title="base -> head")
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if case_id in line]
    assert len(lines) == 1 and verdict in lines[0]  # one row, one line, whole cells
    assert len(out.splitlines()) == 6  # title, top rule, header, rule, row, bottom rule


def test_every_renderer_shows_the_number_a_verdict_rests_on() -> None:
    """The terminal table, the Markdown and the HTML show one text per verdict, with
    the interval's end or the one-sided bound it was compared with."""
    base, cand = data.pair()
    comparison = compare_runs(base, cand)
    texts = {c.case_id: c.outcome().verdict_text for c in comparison.cases}
    unchanged = [t for t in texts.values() if t.startswith("unchanged: ≤ ")]
    assert unchanged and all("(95% bound) < 1.05" in t for t in unchanged)
    assert any(t.startswith("regression: ≥ ") and t.endswith("> 1.03") for t in texts.values())
    rows = render.comparison_rows(comparison)
    assert [row[-1] for row in rows] == list(texts.values())
    md = render.comparison_markdown(comparison)
    html = report.html_report(cand, comparison)
    for t in unchanged:
        assert text.md_text(t) in md and t.replace("<", "&lt;") in html
