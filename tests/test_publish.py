"""The published history (``guard publish``, ``guard.report.site``): built from a
history with a planted step, opened in headless Chromium, and from the histories that
break generators: empty, one run, a case that disappears, thousands of runs."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path

import numpy as np
import report_data as data
from test_report import _chromium, _console_errors, needs_chromium

from guard.commands import main as commands_main
from guard.report import site
from guard.store import history
from guard.store.changepoint import detect_steps
from guard.store.history import HistoryPoint, Trend
from guard.store.results import CRASHED, OK, SCHEMA_VERSION, CaseResult, RunResult

STEPPED = "triton_flash/b1-h8-s512-d64-full"
FLAT = "sdpa_flash/b1-h8-s512-d64-full"
REPO = "https://github.com/example/attn-guard"
H100, H200 = "nvidia-h100-80gb-hbm3", "nvidia-h200"


def _runs(
    n: int, *, step_at: int, factor: float, gpu: str = H100, drop_after: int | None = None
) -> list[RunResult]:
    """``n`` runs on successive commits, fresh noise each time; ``STEPPED`` is
    ``factor`` times slower from run ``step_at`` on; ``FLAT`` is left out of the runs
    from ``drop_after`` on (the case disappears)."""
    rng = np.random.default_rng()
    out = []
    for i in range(n):
        cases = []
        for kernel, name in (
            ("triton_flash", "b1-h8-s512-d64-full"),
            ("sdpa_flash", "b1-h8-s512-d64-full"),
        ):
            mu = data.TIMES[(kernel, name)][0] * (1 + rng.uniform(0.0, 0.001))
            if f"{kernel}/{name}" == STEPPED and i >= step_at:
                mu *= factor
            if f"{kernel}/{name}" == FLAT and drop_after is not None and i >= drop_after:
                continue
            cases.append(CaseResult(data.case(name, kernel), OK, rounds=data.rounds(rng, mu, 4, 6)))
        commit = f"{i:04x}" + rng.bytes(18).hex()
        out.append(
            RunResult(
                SCHEMA_VERSION,
                f"2026-10-{1 + i // 24:02d}T{i % 24:02d}:00:00+00:00",
                "attention-fwd",
                "5eed5eed5eed5eed",
                data.env(commit=commit, gpu_slug=gpu, gpu_name=gpu.upper()),
                tuple(cases),
                label=f"main@{i}",
            )
        )
    return out


def _db(tmp_path: Path, runs: list[RunResult]) -> Path:
    db = tmp_path / "history.sqlite"
    for run in runs:
        history.append(run, db)
    return db


def _publish(db: Path, out: Path, *extra: str) -> int:
    return commands_main.main(
        ["publish", "--db", str(db), "--out", str(out), "--repo-url", REPO, *extra]
    )


def _svgs(html: str) -> list[str]:
    return re.findall(r"<svg .*?</svg>", html, flags=re.S)


def _self_contained(html: str) -> None:
    assert "<script" not in html.lower()
    assert not re.search(r"""(src|href)=["']?(https?:)?//(?!github\.com/example/)""", html)
    assert "<link" not in html
    for plot in _svgs(html):
        ET.fromstring(plot)


# ------------------------------------------------------------------ the planted step


def test_the_planted_step_is_marked_and_linked(tmp_path: Path) -> None:
    runs = _runs(24, step_at=14, factor=1.08) + _runs(9, step_at=99, factor=1.0, gpu=H200)
    db = _db(tmp_path, runs)
    out = tmp_path / "site"
    assert _publish(db, out) == 0
    planted = runs[14].environment.commit
    page = (out / "cases" / site.page_name(STEPPED)).read_text("utf-8")
    _self_contained(page)
    steps = re.findall(r'<g class="step" data-commit="([0-9a-f]+)"', page)
    assert steps == [planted]
    assert f'href="{REPO}/commit/{planted}"' in page  # the mark links to its commit
    assert page.count('<section id="gpu-') == 2  # H100 and H200 on one page
    assert page.count('class="band"') == 2 and page.count('class="run"') == 24 + 9
    assert f"step at {planted[:10]}" in page  # the hover text of the mark
    flat = (out / "cases" / site.page_name(FLAT)).read_text("utf-8")
    assert 'class="step"' not in flat and "No change point" in flat
    index = (out / "index.html").read_text("utf-8")
    _self_contained(index)
    row = index.split(STEPPED, 1)[1].split("</tr>", 1)[0]
    assert re.search(r'class="slower" href="[^"]+/commit/' + planted + r'">\+[78]\.\d%', row), row
    assert row.count('class="spark"') == 2 and row.count('class="step"') == 1
    assert f">{H100}<br>latest<" in index and f">{H200}<br>latest<" in index


@needs_chromium
def test_chromium_opens_the_site_without_console_errors(tmp_path: Path) -> None:
    runs = _runs(20, step_at=12, factor=0.93) + _runs(8, step_at=99, factor=1.0, gpu=H200)
    db = _db(tmp_path, runs)
    out = tmp_path / "site"
    assert _publish(db, out) == 0
    planted = runs[12].environment.commit
    page = out / "cases" / site.page_name(STEPPED)
    proc = _chromium(tmp_path, "--dump-dom", page.as_uri())
    assert proc.returncode == 0, proc.stderr[-2000:]
    dom = proc.stdout
    assert f'<g class="step" data-commit="{planted}"' in dom  # in the rendered DOM
    assert f'<a href="{REPO}/commit/{planted}">' in dom
    assert "faster" in dom and _console_errors(proc.stderr) == []
    proc = _chromium(tmp_path, "--dump-dom", (out / "index.html").as_uri())
    assert proc.returncode == 0 and f">{STEPPED}</a>" in proc.stdout
    assert _console_errors(proc.stderr) == []
    png = tmp_path / "page.png"
    proc = _chromium(tmp_path, f"--screenshot={png}", "--window-size=1100,900", page.as_uri())
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and _console_errors(proc.stderr) == []


# ------------------------------------------------------------- histories that break


def test_empty_history(tmp_path: Path, capsys) -> None:
    empty = tmp_path / "empty.sqlite"
    empty.write_bytes(b"")  # created, no run appended yet
    assert _publish(empty, tmp_path / "a") == 0
    index = (tmp_path / "a" / "index.html").read_text("utf-8")
    assert 'id="empty"' in index and not (tmp_path / "a" / "cases").exists()
    # A store with its schema and no timed run: the same.
    nothing = _db(tmp_path, [])
    run = _runs(1, step_at=9, factor=1.0)[0]
    failed = replace(run, cases=tuple(replace(c, status=CRASHED, rounds=()) for c in run.cases))
    assert history.append(failed, nothing) is None
    assert history.every_trend(empty) == ()
    # A missing file is a mistake, not an empty history.
    assert _publish(tmp_path / "missing.sqlite", tmp_path / "b") == 2
    assert "no history database" in capsys.readouterr().err


def test_one_run(tmp_path: Path) -> None:
    db = _db(tmp_path, _runs(1, step_at=9, factor=1.0))
    assert _publish(db, tmp_path / "site") == 0
    page = (tmp_path / "site" / "cases" / site.page_name(STEPPED)).read_text("utf-8")
    _self_contained(page)
    assert 'class="run"' in page and 'class="step"' not in page and "1 run(s)" in page


def test_a_case_that_disappears(tmp_path: Path) -> None:
    """A case dropped from the later runs is shown as gone, not as the latest; one gone
    from the history altogether loses the page an earlier build wrote for it."""
    runs = _runs(10, step_at=99, factor=1.0, drop_after=6)
    out = tmp_path / "site"
    assert _publish(_db(tmp_path, runs), out) == 0
    index = (out / "index.html").read_text("utf-8")
    row = index.split(f">{FLAT}</a>", 1)[1].split("</tr>", 1)[0]
    assert "gone" in row
    assert "gone" not in index.split(f">{STEPPED}</a>", 1)[1].split("</tr>", 1)[0]
    page = (out / "cases" / site.page_name(FLAT)).read_text("utf-8")
    assert f"last measured at {runs[5].environment.commit[:10]}" in page
    # Rebuilt from a history without the case: its page goes, the site's other files stay.
    only = [replace(r, cases=r.cases[:1]) for r in runs]
    assert _publish(_db(tmp_path / "again", only), out) == 0
    assert not (out / "cases" / site.page_name(FLAT)).exists()
    assert (out / "cases" / site.page_name(STEPPED)).exists()


def test_refuses_a_folder_that_is_not_a_site(tmp_path: Path, capsys) -> None:
    db = _db(tmp_path, _runs(2, step_at=9, factor=1.0))
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    assert _publish(db, mine) == 2
    assert "no .guard-site" in capsys.readouterr().err
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]
    assert _publish(db, tmp_path / "site") == 0 and _publish(db, tmp_path / "site") == 0


def test_data_is_text_never_markup(tmp_path: Path) -> None:
    runs = _runs(3, step_at=9, factor=1.0)
    evil = "x<script>alert(1)</script>"
    runs = [
        replace(r, cases=(replace(r.cases[0], case=replace(r.cases[0].case, name=evil)),))
        for r in runs
    ]
    db = _db(tmp_path, runs)
    assert (
        commands_main.main(
            ["publish", "--db", str(db), "--out", str(tmp_path / "s"), "--repo-url", ""]
        )
        == 0
    )
    for path in (tmp_path / "s").rglob("*.html"):
        html = path.read_text("utf-8")
        assert "<script" not in html and "/commit/" not in html
    assert commands_main.main(["publish", "--db", str(db), "--out", str(tmp_path / "t"),
                     "--repo-url", "javascript:alert(1)"]) == 2  # fmt: skip


# --------------------------------------------------------------------- thousands


def _trend(n: int, step_at: int, factor: float) -> Trend:
    rng = np.random.default_rng()
    points = []
    for i in range(n):
        mu = 21e-6 * (factor if i >= step_at else 1.0)
        meds = tuple(float(x) for x in mu * np.exp(rng.normal(0, 0.004, 4)))
        points.append(
            HistoryPoint(
                run_id=i + 1,
                created=f"2026-{1 + i // 2800:02d}-01T00:00:00+00:00/{i:05d}",
                commit=rng.bytes(20).hex(),
                commit_dirty=False,
                branch="main",
                gpu_slug=H100,
                suite_hash="5eed",
                status="ok",
                median=float(np.median(meds)),
                round_medians=meds,
                host_median=None,
                min_effect=0.02,
                kernel_hash="k",
            )
        )
    steps = detect_steps([p.time or 0.0 for p in points])
    return Trend(STEPPED, H100, tuple(points), steps, (H100,))


def test_thousands_of_runs_stay_small() -> None:
    """3000 runs: the page is built, the step is marked, hover targets are binned."""
    trend = _trend(3000, step_at=1700, factor=1.06)
    assert [s.index for s in trend.steps] == [1700]
    files = site.build_site([trend], repo_url=REPO)
    page = files["cases/" + site.page_name(STEPPED)]
    _self_contained(page)
    assert page.count('class="hit"') <= site.MAX_TARGETS
    assert page.count("<title>") <= site.MAX_TARGETS + 10
    assert f'data-commit="{trend.points[1700].commit}"' in page
    assert len(page) < 400_000
    assert len(files["index.html"]) < 50_000


def test_run_interval() -> None:
    rng = np.random.default_rng()
    meds = list(20e-6 * np.exp(rng.normal(0, 0.01, 6)))
    low, high = site.run_interval(meds) or (0.0, 0.0)
    gmean = float(np.exp(np.mean(np.log(meds))))
    assert low < gmean < high and high / low < 1.1
    assert site.run_interval(meds[:1]) is None
    wider = site.run_interval(meds, confidence=0.99)
    assert wider is not None and wider[0] < low and wider[1] > high


def test_a_site_is_never_written_through_a_link(tmp_path: Path, capsys) -> None:
    db = _db(tmp_path, _runs(3, step_at=9, factor=1.0))
    out = tmp_path / "site"
    assert _publish(db, out) == 0
    # A user's folder where the site's case pages go: nothing there may change.
    user = tmp_path / "user"
    user.mkdir()
    (user / "thesis.tex").write_text("years of work")
    import shutil

    shutil.rmtree(out / "cases")
    (out / "cases").symlink_to(user)
    assert _publish(db, out) == 2
    assert "symbolic link inside the site" in capsys.readouterr().err
    assert sorted(p.name for p in user.iterdir()) == ["thesis.tex"]
    linked = tmp_path / "linked-site"
    linked.symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    assert _publish(db, linked) == 2
    assert "is a symbolic link" in capsys.readouterr().err


def test_a_bad_manifest_is_bad_input(tmp_path: Path, capsys) -> None:
    db = _db(tmp_path, _runs(2, step_at=9, factor=1.0))
    out = tmp_path / "site"
    assert _publish(db, out) == 0
    manifest = out / ".guard-site"
    manifest.write_bytes(b"index.html\n\xff\xfe\n")
    assert _publish(db, out) == 2
    assert "not UTF-8" in capsys.readouterr().err
    big = tmp_path / "big"
    with open(big, "wb") as fh:
        fh.truncate(3 << 30)  # sparse: 3 GB that would be read whole
    manifest.unlink()
    manifest.symlink_to(big)
    assert _publish(db, out) == 2
    assert "not a regular file" in capsys.readouterr().err


def test_limit_is_bounded(tmp_path: Path, capsys) -> None:
    db = _db(tmp_path, _runs(2, step_at=9, factor=1.0))
    for limit in ("99999999999999999999", "0", "1" * 5000):
        try:
            code = _publish(db, tmp_path / "site", "--limit", limit)
        except SystemExit as exc:
            code = int(exc.code or 0)
        assert code == 2, limit
        assert "integer from 1 to" in capsys.readouterr().err
