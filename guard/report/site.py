"""The published history: a static site of every case's time over commits, per GPU.

``build_site(trends, ...)`` turns the history store's trends (``guard.store.history.
every_trend``: one per case and GPU) into files, ``{relative path: HTML}``:

- ``index.html``: one row per case, one column per GPU kind: the latest time, the last
  step change (its size and commit) and a sparkline of the recent runs;
- ``cases/<case>.html``: per GPU, the time over commits with its interval band, the
  level between change points, the change points marked and linked to their commits,
  every run's numbers on hover, and the list of steps and recent runs as tables.

Pure functions from data to strings (the CLI writes the files), and a site that needs
nothing but a browser: inline CSS and inline SVG, no script, nothing fetched, so it
opens from a folder, an artifact or GitHub Pages alike. Hover is SVG ``<title>``.
Thousands of runs stay fast: the line and band are one path each, and the hover
targets are at most ``MAX_TARGETS`` per plot (runs binned into columns when there are
more; a column's tooltip gives the range of its runs).

The interval band of a run is a 95% Student t interval of the mean of its log round
medians (each round a fresh process, the guard's unit of replication); a run of one
round has none. The number drawn is the run's time as everywhere
(``HistoryPoint.time``: ``stats.case_time``).
"""

from __future__ import annotations

import hashlib
import itertools
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from html import escape

import numpy as np
from scipy import stats as sps

from guard.base.text import fmt_time, is_web_url
from guard.report import svg
from guard.report.report import environment
from guard.store.changepoint import Step
from guard.store.history import HistoryPoint, Trend

MAX_TARGETS = 400  # hover targets per plot; more runs share a column
SPARK_RUNS = 60  # runs in an index sparkline
RECENT_RUNS = 50  # runs listed in a case page's table
CONFIDENCE = 0.95  # of a run's interval band
_HEX = re.compile(r"[0-9a-f]{7,40}")


# ------------------------------------------------------------------------ data


@dataclass(frozen=True)
class Run:
    """One run of one case on one GPU, as the site shows it (times in seconds)."""

    index: int  # position in the series, oldest first
    commit: str
    dirty: bool
    created: str
    status: str
    time: float | None  # None: the case did not time in this run
    low: float | None  # interval band; None with fewer than two rounds
    high: float | None
    rounds: int


@dataclass(frozen=True)
class Series:
    """One case on one GPU, oldest run first; ``steps`` index into ``runs``."""

    case_id: str
    gpu: str
    runs: tuple[Run, ...]
    steps: tuple[Step, ...]
    gone: bool  # absent from the GPU's latest run (renamed, removed, or it failed to run)
    truncated: bool  # older runs exist than the first shown
    skipped: int  # unreadable rows left out
    made_by: tuple[str, ...] = ()  # per step: which commit made it, or "bisection pending"
    culprits: tuple[str, ...] = ()  # per step: the commit that made it ("" if not known)

    @property
    def latest(self) -> Run | None:
        return next((r for r in reversed(self.runs) if r.time is not None), None)

    @property
    def last_step(self) -> Step | None:
        return self.steps[-1] if self.steps else None


@lru_cache(maxsize=256)
def _t_quantile(q: float, df: int) -> float:
    return float(sps.t.ppf(q, df))


def run_interval(
    round_medians: Sequence[float], confidence: float = CONFIDENCE
) -> tuple[float, float] | None:
    """A ``confidence`` t interval of the geometric mean of the round medians (None
    for fewer than two rounds or a non-positive value)."""
    logs = np.log(np.asarray(round_medians, dtype=float)) if len(round_medians) else None
    if logs is None or logs.size < 2 or not np.all(np.isfinite(logs)):
        return None
    half = _t_quantile(0.5 + confidence / 2, logs.size - 1) * float(
        np.std(logs, ddof=1) / math.sqrt(logs.size)
    )
    mean = float(np.mean(logs))
    return math.exp(mean - half), math.exp(mean + half)


def _run(index: int, p: HistoryPoint) -> Run:
    time = p.time
    band = run_interval(p.round_medians) if time is not None else None
    return Run(
        index=index,
        commit=p.commit,
        dirty=p.commit_dirty,
        created=p.created,
        status=p.status,
        time=time,
        low=band[0] if band else None,
        high=band[1] if band else None,
        rounds=len(p.round_medians),
    )


def series_of(trends: Sequence[Trend]) -> tuple[Series, ...]:
    """The site's series, one per trend; a case is ``gone`` on a GPU when its last run
    there is older than that GPU's latest run of any case."""
    latest: dict[str, str] = {}
    for t in trends:
        if t.points:
            last = t.points[-1].created
            latest[t.gpu_slug] = max(latest.get(t.gpu_slug, last), last)
    out = []
    for t in trends:
        if not t.points:
            continue
        out.append(
            Series(
                case_id=t.case_id,
                gpu=t.gpu_slug,
                runs=tuple(_run(i, p) for i, p in enumerate(t.points)),
                steps=t.steps,
                gone=t.points[-1].created < latest[t.gpu_slug],
                truncated=t.truncated,
                skipped=len(t.skipped),
                made_by=tuple(t.attribution(s) for s in t.steps),
                culprits=tuple((m.first_bad if m is not None else "") for m in t.made_by),
            )
        )
    return tuple(out)


# ------------------------------------------------------------------------ text


def page_name(case_id: str) -> str:
    """A case page's file name: readable, and unique through a hash of the id."""
    slug = re.sub(r"[^A-Za-z0-9]+", "-", case_id).strip("-").lower()[:80] or "case"
    return f"{slug}-{hashlib.sha256(case_id.encode('utf-8')).hexdigest()[:8]}.html"


def commit_url(repo_url: str, commit: str) -> str:
    """The commit's page on the forge ("" when there is no web URL or no commit id)."""
    if not repo_url or not _HEX.fullmatch(commit) or not is_web_url(repo_url):
        return ""
    return f"{repo_url.rstrip('/')}/commit/{commit}"


def _short(commit: str) -> str:
    return commit[:10] or "?"


def _pct(ratio: float) -> str:
    return f"{(ratio - 1) * 100:+.1f}%"


def step_text(series: Series, step: Step) -> str:
    r = series.runs[step.index]
    return (
        f"step at {_short(r.commit)} ({r.created[:16]}): {step.kind} {_pct(step.ratio)}, "
        f"{fmt_time(step.before)} → {fmt_time(step.after)} "
        f"({step.ratio:.3f}×, p={step.p_value:.1e})" + _made_by(series, step)
    )


def _made_by(series: Series, step: Step) -> str:
    i = series.steps.index(step)
    return f"; {series.made_by[i]}" if i < len(series.made_by) else ""


def run_text(r: Run) -> str:
    head = f"{_short(r.commit)}{' (dirty)' if r.dirty else ''} {r.created[:19]}"
    if r.time is None:
        return f"{head}: {r.status}"
    band = (
        f", {CONFIDENCE:.0%} interval {fmt_time(r.low)} – {fmt_time(r.high)}"
        if r.low is not None and r.high is not None
        else ""
    )
    return f"{head}: {fmt_time(r.time)}{band}, {r.rounds} round(s)"


def _bin_text(runs: Sequence[Run]) -> str:
    if len(runs) == 1:
        return run_text(runs[0])
    times = sorted(r.time for r in runs if r.time is not None)
    first, last = runs[0], runs[-1]
    head = (
        f"{len(runs)} runs, {_short(first.commit)} ({first.created[:10]}) to "
        f"{_short(last.commit)} ({last.created[:10]})"
    )
    if not times:
        return f"{head}: none timed"
    failed = len(runs) - len(times)
    return (
        f"{head}: median {fmt_time(times[len(times) // 2])}, "
        f"min {fmt_time(times[0])}, max {fmt_time(times[-1])}"
        + (f", {failed} not timed" if failed else "")
    )


# ------------------------------------------------------------------------ plots


def _n(x: float) -> str:
    text = f"{x:.1f}"
    return text[:-2] if text.endswith(".0") else text


def _lin(lo: float, hi: float, a: float, b: float) -> tuple[float, float]:
    """(offset, slope) mapping [lo, hi] onto [a, b] (the middle when lo == hi)."""
    if hi == lo:
        return (a + b) / 2, 0.0
    slope = (b - a) / (hi - lo)
    return a - lo * slope, slope


def _paths(points: Sequence[tuple[float, float] | None]) -> str:
    """An SVG path through the points, broken where a point is None."""
    out: list[str] = []
    pen_up = True
    for pt in points:
        if pt is None:
            pen_up = True
            continue
        out.append(("M" if pen_up else "L") + f"{_n(pt[0])},{_n(pt[1])}")
        pen_up = False
    return "".join(out)


def _band_path(runs: Sequence[Run], fx: float, sx: float, fy: float, sy: float) -> str:
    """Closed polygons of the interval band over each stretch of runs that have one
    (a lone run: a bar 4 px wide)."""
    out = []
    for has, group in itertools.groupby(runs, key=lambda r: r.low is not None):
        stretch = [
            (fx + sx * r.index, fy + sy * (r.high or 0.0), fy + sy * (r.low or 0.0)) for r in group
        ]
        if not has:
            continue
        if len(stretch) == 1:
            x, up, down = stretch[0]
            stretch = [(x - 2, up, down), (x + 2, up, down)]
        upper = [f"{_n(x)},{_n(up)}" for x, up, _ in stretch]
        lower = [f"{_n(x)},{_n(down)}" for x, _, down in reversed(stretch)]
        out.append("M" + "L".join(upper + lower) + "Z")
    return "".join(out)


def history_plot(
    series: Series, *, repo_url: str = "", width: float = 960, height: float = 300
) -> str:
    """The case's time over its runs on one GPU (oldest left), as inline SVG."""
    runs = series.runs
    n = len(runs)
    values = [v for r in runs for v in (r.time, r.low, r.high) if v is not None]
    values += [v for s in series.steps for v in (s.before, s.after)]
    if not values:
        values = [1e-3]
    scale, unit = svg.time_unit(float(np.median(values)))
    lo, hi = min(values) * scale, max(values) * scale
    pad = (hi - lo) * 0.08 or abs(lo) * 0.05 or 1.0
    lo, hi = lo - pad, hi + pad
    left, right, top, bottom = 70.0, 20.0, 24.0, 64.0
    plot_bottom = height - bottom
    fx, sx = _lin(0, max(n - 1, 0), left + 12, width - right - 12)
    fy, sy = _lin(lo / scale, hi / scale, plot_bottom, top)  # seconds -> pixels

    def px(i: float) -> float:
        return fx + sx * i

    def py(seconds: float) -> float:
        return fy + sy * seconds

    body: list[str] = []
    for t in svg.nice_ticks(lo, hi, 5):
        y = py(t / scale)
        if top - 0.5 <= y <= plot_bottom + 0.5:
            body.append(
                f'<line x1="{_n(left)}" y1="{_n(y)}" x2="{_n(width - right)}" y2="{_n(y)}" '
                f'stroke="#e6e6e6"/><text x="{_n(left - 6)}" y="{_n(y + 4)}" '
                f'text-anchor="end">{escape(svg.fmt_tick(t))}</text>'
            )
    body.append(
        f'<line x1="{_n(left)}" y1="{_n(plot_bottom)}" x2="{_n(width - right)}" '
        f'y2="{_n(plot_bottom)}" stroke="#444"/>'
        f'<text x="6" y="{_n(top - 9)}" fill="#555">{unit} per call</text>'
    )
    band = _band_path(runs, fx, sx, fy, sy)
    if band:
        body.append(
            f'<path class="band" d="{band}" fill="#1e88e5" fill-opacity="0.16" stroke="none"/>'
        )
    edges = [0, *(s.index for s in series.steps), n] if series.steps else []
    for a, b in itertools.pairwise(edges):
        times = sorted(v for r in runs[a:b] if (v := r.time) is not None)
        if times and b > a:
            level = py(times[len(times) // 2])
            body.append(
                f'<line class="level" x1="{_n(px(a))}" y1="{_n(level)}" x2="{_n(px(b - 1))}" '
                f'y2="{_n(level)}" stroke="#78909c" stroke-width="2" stroke-dasharray="6 3"/>'
            )
    line = _paths([None if r.time is None else (px(r.index), py(r.time)) for r in runs])
    if line:
        body.append(
            f'<path class="line" d="{line}" fill="none" stroke="#1e88e5" stroke-width="1.5"/>'
        )
    for s in series.steps:
        if not 0 < s.index < n:
            continue
        x = (px(s.index - 1) + px(s.index)) / 2
        color = svg.VERDICT_COLORS["regression" if s.ratio > 1 else "improvement"]
        run = runs[s.index]
        label = (
            f'<text x="{_n(x + 3)}" y="{_n(top + 10)}" fill="{color}" font-weight="600">'
            f"{escape(_pct(s.ratio))} {escape(_short(run.commit)[:7])}</text>"
        )
        url = commit_url(repo_url, run.commit)
        if url:
            label = f'<a href="{escape(url)}">{label}</a>'
        body.append(
            f'<g class="step" data-commit="{escape(run.commit)}" data-index="{s.index}">'
            f"<title>{escape(step_text(series, s))}</title>"
            f'<line x1="{_n(x)}" y1="{_n(top)}" x2="{_n(x)}" y2="{_n(plot_bottom)}" '
            f'stroke="{color}" stroke-width="1.5" stroke-dasharray="4 3"/>{label}</g>'
        )
    # Hover targets: one per run up to MAX_TARGETS, else runs binned into columns.
    bins = max(1, min(n, MAX_TARGETS))
    cuts = np.linspace(0, n, bins + 1).round().astype(int)
    col = (width - left - right) / bins
    dots = n <= MAX_TARGETS // 2
    for a, b in itertools.pairwise(cuts.tolist()):
        chunk = runs[a:b]
        if not chunk:
            continue
        tip = escape(_bin_text(chunk))
        if dots and len(chunk) == 1 and chunk[0].time is not None:
            r = chunk[0]
            body.append(
                f'<circle class="run" cx="{_n(px(r.index))}" cy="{_n(py(r.time or 0.0))}" '
                f'r="3.2" fill="#1e88e5"><title>{tip}</title></circle>'
            )
            continue
        if dots and len(chunk) == 1:  # a run in which the case did not time
            x = px(chunk[0].index)
            body.append(
                f'<path class="run failed" d="M{_n(x - 4)},{_n(plot_bottom - 8)}l8,8m0,-8l-8,8" '
                f'stroke="#c62828" stroke-width="2"><title>{tip}</title></path>'
            )
            continue
        x0 = px(a) - (sx / 2 if n > 1 else col / 2)
        w = max(px(b - 1) - px(a) + (sx if n > 1 else col), 1.0)
        body.append(
            f'<rect class="hit" x="{_n(x0)}" y="{_n(top)}" width="{_n(w)}" '
            f'height="{_n(plot_bottom - top)}"><title>{tip}</title></rect>'
        )
    every = max(1, math.ceil(n / 12))
    for r in runs:
        if r.index % every and r.index != n - 1:
            continue
        x, y = px(r.index), plot_bottom + 12
        body.append(
            f'<text x="{_n(x)}" y="{_n(y)}" text-anchor="end" font-size="9" '
            f'transform="rotate(-35 {_n(x)} {_n(y)})">{escape(_short(r.commit)[:8])}</text>'
        )
    label = f"{series.case_id} on {series.gpu}: {n} runs, {len(series.steps)} step(s)"
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {_n(width)} {_n(height)}" '
        f'width="{_n(width)}" height="{_n(height)}" role="img" aria-label="{escape(label)}" '
        f'class="plot history" {svg.FONT} font-size="11">' + "".join(body) + "</svg>"
    )


def sparkline(series: Series, *, width: float = 132, height: float = 30) -> str:
    """The last ``SPARK_RUNS`` runs as a small line, steps as ticks, the last run a dot."""
    start = max(0, len(series.runs) - SPARK_RUNS)
    runs = series.runs[start:]
    times = [r.time for r in runs if r.time is not None]
    if not times:
        return ""
    lo, hi = min(times), max(times)
    # At least +-3% of the middle: flat noise looks flat, a step of a few percent shows.
    mid, half = (lo + hi) / 2, max((hi - lo) * 0.55, (lo + hi) * 0.03 / 2)
    lo, hi, pad = mid - half, mid + half, 0.0
    fx, sx = _lin(start, max(start + len(runs) - 1, start), 3, width - 4)
    fy, sy = _lin(lo - pad, hi + pad, height - 3, 3)
    body = []
    for s in series.steps:
        if s.index > start:
            x = fx + sx * (s.index - 0.5)
            color = svg.VERDICT_COLORS["regression" if s.ratio > 1 else "improvement"]
            body.append(
                f'<line class="step" x1="{_n(x)}" y1="0" x2="{_n(x)}" y2="{_n(height)}" '
                f'stroke="{color}" stroke-width="1.2"/>'
            )
    line = _paths([None if r.time is None else (fx + sx * r.index, fy + sy * r.time) for r in runs])
    body.append(f'<path d="{line}" fill="none" stroke="#1e88e5" stroke-width="1.3"/>')
    last = series.latest
    if last is not None and last.time is not None and last.index >= start:
        body.append(
            f'<circle cx="{_n(fx + sx * last.index)}" cy="{_n(fy + sy * last.time)}" r="2.2" '
            'fill="#1e88e5"/>'
        )
    tip = f"last {len(runs)} run(s): {fmt_time(min(times))} to {fmt_time(max(times))}" + (
        f"; {len(series.steps)} step(s)" if series.steps else ""
    )
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {_n(width)} {_n(height)}" '
        f'width="{_n(width)}" height="{_n(height)}" class="spark" role="img" '
        f'aria-label="{escape(tip)}"><title>{escape(tip)}</title>' + "".join(body) + "</svg>"
    )


# ----------------------------------------------------------------------- pages


@dataclass(frozen=True)
class Cell:
    """One case on one GPU in the index."""

    latest: str
    latest_title: str
    step: str  # the last step's change, e.g. "+4.2%"; "" when none
    step_css: str
    step_title: str
    step_url: str
    step_commit: str
    spark: str  # SVG markup
    gone: bool
    anchor: str


@dataclass(frozen=True)
class IndexRow:
    case_id: str
    page: str
    cells: tuple[Cell | None, ...]  # in the order of the site's GPUs


@dataclass(frozen=True)
class StepRow:
    commit: str
    url: str
    created: str
    kind: str
    change: str
    before: str
    after: str
    p_value: str
    made_by: str = ""  # "made by C", the commits left, or "bisection pending"
    made_by_url: str = ""  # the commit that made it, where the repository is known


@dataclass(frozen=True)
class GpuSection:
    gpu: str
    anchor: str
    plot: str
    summary: str
    notes: tuple[str, ...]
    steps: tuple[StepRow, ...]
    recent: tuple[tuple[str, str, str, str, str, str], ...]  # commit, url, date, time, band, rounds


def _anchor(gpu: str) -> str:
    return "gpu-" + re.sub(r"[^A-Za-z0-9]+", "-", gpu).strip("-").lower()


def _cell(series: Series, repo_url: str) -> Cell:
    last = series.latest
    step = series.last_step
    step_url = ""
    step_title = ""
    if step is not None:
        step_url = commit_url(repo_url, series.runs[step.index].commit)
        step_title = step_text(series, step)
        if last is not None and last.time is not None:
            step_title += f"; latest {_pct(last.time / step.after)} from the level after it"
    return Cell(
        latest=fmt_time(last.time if last else None),
        latest_title=run_text(last) if last else "never timed",
        step=_pct(step.ratio) if step else "",
        step_css=("slower" if step.ratio > 1 else "faster") if step else "",
        step_title=step_title,
        step_url=step_url,
        step_commit=_short(series.runs[step.index].commit)[:7] if step else "",
        spark=sparkline(series),
        gone=series.gone,
        anchor=_anchor(series.gpu),
    )


def _section(series: Series, repo_url: str) -> GpuSection:
    runs = series.runs
    timed = [r for r in runs if r.time is not None]
    last = series.latest
    summary = (
        f"{len(runs)} run(s) from {runs[0].created[:10]} to {runs[-1].created[:10]}"
        + (f", latest {fmt_time(last.time)} at {_short(last.commit)}" if last else "")
        + f", {len(series.steps)} step change(s)"
    )
    notes = []
    if series.gone:
        notes.append(
            f"not in the latest run on {series.gpu}: last measured at "
            f"{_short(runs[-1].commit)} ({runs[-1].created[:10]})"
        )
    if len(timed) < len(runs):
        notes.append(f"{len(runs) - len(timed)} run(s) in which the case did not time (red ×)")
    if series.truncated:
        notes.append("older runs exist: only the last ones are shown")
    if series.skipped:
        notes.append(f"{series.skipped} unreadable row(s) of the history left out")
    steps = tuple(
        StepRow(
            commit=_short(runs[s.index].commit),
            url=commit_url(repo_url, runs[s.index].commit),
            created=runs[s.index].created[:16],
            kind=s.kind,
            change=_pct(s.ratio),
            before=fmt_time(s.before),
            after=fmt_time(s.after),
            p_value=f"{s.p_value:.1e}" if s.p_value >= 1e-12 else "< 1e-12",
            made_by=series.made_by[i] if i < len(series.made_by) else "",
            made_by_url=commit_url(repo_url, series.culprits[i])
            if i < len(series.culprits) and series.culprits[i]
            else "",
        )
        for i, s in reversed(list(enumerate(series.steps)))
    )
    recent = tuple(
        (
            _short(r.commit) + ("+" if r.dirty else ""),
            commit_url(repo_url, r.commit),
            r.created[:16],
            fmt_time(r.time) if r.time is not None else r.status,
            f"{fmt_time(r.low)} – {fmt_time(r.high)}" if r.low and r.high else "—",
            str(r.rounds),
        )
        for r in reversed(runs[-RECENT_RUNS:])
    )
    return GpuSection(
        gpu=series.gpu,
        anchor=_anchor(series.gpu),
        plot=history_plot(series, repo_url=repo_url),
        summary=summary,
        notes=tuple(notes),
        steps=steps,
        recent=recent,
    )


def build_site(
    trends: Sequence[Trend],
    *,
    repo_url: str = "",
    title: str = "Performance history",
    generated: str = "",
    source: str = "",
) -> dict[str, str]:
    """Every file of the site, ``{path relative to the site's root: text}``.

    ``repo_url``: e.g. ``https://github.com/owner/repo`` (commits link there; "" for
    no links); ``generated``: the build's date; ``source``: what it was built from."""
    all_series = series_of(trends)
    gpus = sorted({s.gpu for s in all_series})
    by_case: dict[str, dict[str, Series]] = {}
    for s in all_series:
        by_case.setdefault(s.case_id, {})[s.gpu] = s
    env = environment()
    files: dict[str, str] = {}
    rows = []
    for case_id in sorted(by_case):
        page = "cases/" + page_name(case_id)
        per_gpu = by_case[case_id]
        rows.append(
            IndexRow(
                case_id,
                page,
                tuple(_cell(per_gpu[g], repo_url) if g in per_gpu else None for g in gpus),
            )
        )
        files[page] = env.get_template("site_case.html.j2").render(
            title=title,
            case_id=case_id,
            sections=[_section(per_gpu[g], repo_url) for g in gpus if g in per_gpu],
            generated=generated,
            source=source,
            confidence=f"{CONFIDENCE:.0%}",
        )
    runs = {g: max((len(s.runs) for s in all_series if s.gpu == g), default=0) for g in gpus}
    files["index.html"] = env.get_template("site_index.html.j2").render(
        title=title,
        gpus=gpus,
        runs=runs,
        rows=rows,
        generated=generated,
        source=source,
        gone=sum(1 for r in rows for c in r.cells if c is not None and c.gone),
    )
    return files


def site_pages(files: Mapping[str, str]) -> list[str]:
    """The case pages of a built site, sorted."""
    return sorted(p for p in files if p.startswith("cases/"))
