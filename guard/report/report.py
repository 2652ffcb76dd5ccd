"""The HTML report: one self-contained file, and the history table.

``html_report(run, comparison, trends=...)`` renders ``templates/report.html.j2``:
inline CSS and inline SVG (``guard.report.svg``), no script and no network, so the file
opens from a CI artifact as it is. Pure functions from data to strings: the CLI
decides where they go.

Per case: the baseline and candidate per-call samples (one lane per round), the
ratio and its interval against the threshold band, the verdict, the correctness
errors against their bounds, and the case's history when there is one. Per workload:
our kernels (the gated ones) against every other kernel measured in the same run.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import jinja2

from guard.base import stats
from guard.base.text import fmt_ratio, fmt_time
from guard.decide.compare import CaseComparison, Comparison, Status, run_verdict
from guard.decide.outcome import CaseProfile
from guard.report import svg
from guard.report.render import verdict_text
from guard.store.history import Trend
from guard.store.results import OK, WRONG, CaseResult, Correctness, Environment, RunResult
from guard.store.suite import Case, flops

TEMPLATES = Path(__file__).resolve().parent / "templates"


# ------------------------------------------------------------- kernel vs SDPA


@dataclass(frozen=True)
class KernelRow:
    """One kernel on one workload. ``vs_ours``: this kernel's median over each of our
    kernels' medians, in the order of ``Workload.ours`` (above 1: ours is faster)."""

    kernel: str
    ours: bool
    status: str
    median: float | None
    host_median: float | None
    tflops: float | None
    vs_ours: tuple[float | None, ...]


@dataclass(frozen=True)
class Workload:
    name: str
    case: Case  # the first case of this workload (shape, dtype, causal)
    ours: tuple[str, ...]  # the gated kernels
    rows: tuple[KernelRow, ...]


def _median(rounds: tuple[tuple[float, ...], ...]) -> float | None:
    """The case's time, as everywhere (``stats.case_time``)."""
    return stats.case_time(rounds)


def kernel_table(run: RunResult) -> tuple[Workload, ...]:
    """Every workload of the run with each kernel measured on it, ours first."""
    by_name: dict[str, list[CaseResult]] = {}
    for c in run.cases:
        by_name.setdefault(c.case.name, []).append(c)
    out = []
    for name, cases in by_name.items():
        ours = tuple(c.case.kernel for c in cases if c.case.gate)
        medians = {c.case.kernel: c.median if c.status == OK else None for c in cases}
        rows = []
        for c in sorted(cases, key=lambda c: (not c.case.gate, cases.index(c))):
            med = medians[c.case.kernel]
            work = flops(c.case.shape, c.case.causal)
            rows.append(
                KernelRow(
                    kernel=c.case.kernel,
                    ours=c.case.gate,
                    status=c.status,
                    median=med,
                    host_median=_median(c.host_rounds) if c.status == OK else None,
                    tflops=work / med / 1e12 if med else None,
                    vs_ours=tuple(med / m if med and (m := medians[k]) else None for k in ours),
                )
            )
        out.append(Workload(name, cases[0].case, ours, tuple(rows)))
    return tuple(out)


# ------------------------------------------------------------------ case views


@dataclass(frozen=True)
class CorrectnessRow:
    label: str
    candidate: str
    baseline: str
    flag: bool = False  # over its bound


@dataclass(frozen=True)
class CaseView:
    """What the template shows for one case (strings and markup, nothing to compute)."""

    anchor: str
    id: str
    kernel: str
    name: str
    case: Case
    gate: bool
    status: str
    verdict: str
    css: str  # regression, improvement, unchanged, inconclusive, wrong, error, other
    reason: str
    baseline_median: str
    candidate_median: str
    ratio: str
    interval: str
    band: str
    host_ratio: str
    rounds: str
    method: str
    ratio_plot: str  # SVG markup (guard.report.svg escapes what it draws)
    distribution_plot: str
    correctness: tuple[CorrectnessRow, ...]
    correctness_message: str
    worker_output: str
    history_plot: str
    history_steps: tuple[str, ...]
    history_note: str


def _anchor(case_id: str, index: int) -> str:
    return f"case-{index}-" + re.sub(r"[^A-Za-z0-9]+", "-", case_id).strip("-").lower()


def _sci(value: float | None) -> str:
    return "—" if value is None else f"{value:.3e}"


def _correctness_rows(
    cand: Correctness | None, base: Correctness | None
) -> tuple[CorrectnessRow, ...]:
    if cand is None and base is None:
        return ()

    def get(c: Correctness | None, attr: str) -> float | None:
        return None if c is None else getattr(c, attr)

    def over(c: Correctness | None, err: str, bound: str) -> bool:
        e, b = get(c, err), get(c, bound)
        return e is not None and b is not None and e > b

    def passed(c: Correctness | None) -> str:
        return "—" if c is None else ("pass" if c.passed else "FAIL")

    return (
        CorrectnessRow("result", passed(cand), passed(base), cand is not None and not cand.passed),
        CorrectnessRow(
            "relative norm error",
            _sci(get(cand, "rel_norm_err")),
            _sci(get(base, "rel_norm_err")),
            over(cand, "rel_norm_err", "rel_norm_bound"),
        ),
        CorrectnessRow(
            "bound (relative norm)",
            _sci(get(cand, "rel_norm_bound")),
            _sci(get(base, "rel_norm_bound")),
        ),
        CorrectnessRow(
            "max abs error",
            _sci(get(cand, "max_abs_err")),
            _sci(get(base, "max_abs_err")),
            over(cand, "max_abs_err", "max_abs_bound"),
        ),
        CorrectnessRow(
            "bound (max abs)", _sci(get(cand, "max_abs_bound")), _sci(get(base, "max_abs_bound"))
        ),
        CorrectnessRow(
            "torch SDPA, same dtype (yardstick)",
            _sci(get(cand, "yardstick_rel_norm_err")),
            _sci(get(base, "yardstick_rel_norm_err")),
        ),
        CorrectnessRow(
            "input seed",
            "—" if cand is None else str(cand.seed),
            "—" if base is None else str(base.seed),
        ),
    )


def _css(cc: CaseComparison | None, result: CaseResult) -> str:
    if cc is not None and cc.status is Status.COMPARED and cc.verdict is not None:
        return cc.verdict.value if cc.gate else "control"  # controls are never coloured
    status = cc.status.value if cc is not None else result.status
    if status in (Status.WRONG.value, WRONG):
        return "wrong"
    if status in (Status.ERROR.value, "crashed", "timeout", "build_failed"):
        return "error"
    return "ok" if status == OK else "other"


def _history(trend: Trend | None) -> tuple[str, tuple[str, ...], str]:
    if trend is None or not trend.points:
        return "", (), ""
    pts = trend.points
    labels = [p.commit[:8] + ("+" if p.commit_dirty else "") or "?" for p in pts]
    titles = [
        f"{p.commit[:10] or '?'}{' (dirty)' if p.commit_dirty else ''} {p.created[:19]}: "
        + (fmt_time(p.time) if p.time is not None else p.status)
        + (f", {len(p.round_medians)} rounds" if p.round_medians else "")
        for p in pts
    ]
    edges = [0, *(s.index for s in trend.steps), len(pts)]
    segments = []
    for a, b in itertools.pairwise(edges):
        meds = sorted(t for p in pts[a:b] if (t := p.time) is not None)
        if meds:
            segments.append((a, b, meds[len(meds) // 2]))
    steps = [
        (
            s.index,
            f"{(s.ratio - 1) * 100:+.1f}%: {fmt_time(s.before)} → {fmt_time(s.after)}",
            s.ratio > 1,
        )
        for s in trend.steps
    ]
    plot = svg.trend_svg(
        labels, [p.time for p in pts], titles=titles, steps=steps, segments=segments
    )
    texts = tuple(
        f"{pts[s.index].commit[:10] or '?'} ({pts[s.index].created[:10]}): {s.kind}, "
        f"{fmt_time(s.before)} → {fmt_time(s.after)} ({s.ratio:.3f}×, p={s.p_value:.1e})"
        for s in trend.steps
    )
    note = f"{len(pts)} run(s) on {trend.gpu_slug}"
    if trend.skipped:
        note += f"; {len(trend.skipped)} unreadable row(s) left out"
    others = [g for g in trend.gpu_slugs if g != trend.gpu_slug]
    if others:
        note += f"; also measured on {', '.join(others)} (not shown)"
    return plot, texts, note


def _case_view(
    index: int,
    cand: CaseResult,
    cc: CaseComparison | None,
    base: CaseResult | None,
    confidence: float | None,
    trend: Trend | None,
) -> CaseView:
    arms = []
    if base is not None and base.rounds:
        arms.append(("baseline", base.rounds))
    if cand.rounds:
        arms.append(("candidate", cand.rounds))
    ratio_plot = ""
    if cc is not None and cc.interval is not None:
        iv = cc.interval
        ratio_plot = svg.ratio_svg(
            iv.ratio,
            iv.low,
            iv.high,
            cc.min_effect,
            verdict=cc.verdict.value if cc.verdict else "",
            confidence=confidence,
        )
    history_plot, history_steps, history_note = _history(trend)
    if cc is not None:
        verdict = verdict_text(cc)
        status = cc.status.value
        reason = cc.reason
    else:
        verdict = "not gated" if not cand.case.gate and cand.status == OK else cand.status
        status = cand.status
        reason = cand.reason
    min_effect = cand.case.threshold.min_effect
    return CaseView(
        anchor=_anchor(cand.id, index),
        id=cand.id,
        kernel=cand.case.kernel,
        name=cand.case.name,
        case=cand.case,
        gate=cand.case.gate,
        status=status,
        verdict=verdict,
        css=_css(cc, cand),
        reason=reason,
        baseline_median=fmt_time(base.median if base else None),
        candidate_median=fmt_time(cand.median),
        ratio=fmt_ratio(cc.ratio if cc else None),
        interval=(
            f"[{cc.interval.low:.3f}, {cc.interval.high:.3f}]" if cc and cc.interval else "—"
        ),
        band=f"[{1 - min_effect:.3f}, {1 + min_effect:.3f}]",
        host_ratio=fmt_ratio(cc.host_ratio if cc else None),
        rounds=f"{len(base.rounds) if base else 0} / {len(cand.rounds)}"
        if base is not None
        else str(len(cand.rounds)),
        method=cand.method or "—",
        ratio_plot=ratio_plot,
        distribution_plot=svg.distribution_svg(arms),
        correctness=_correctness_rows(cand.correctness, base.correctness if base else None),
        correctness_message=cand.correctness.message if cand.correctness else "",
        worker_output=cand.worker_output,
        history_plot=history_plot,
        history_steps=history_steps,
        history_note=history_note,
    )


# --------------------------------------------------------------- environment


ENV_FIELDS = tuple(f.name for f in dataclasses.fields(Environment))


def environment_rows(
    ours: Environment, baseline: Environment | None
) -> list[tuple[str, str, str, bool]]:
    """(field, this run, baseline, differs) for every environment field."""
    rows = []
    for name in ENV_FIELDS:
        a = getattr(ours, name)
        b = getattr(baseline, name) if baseline is not None else None
        rows.append(
            (
                name,
                "—" if a in ("", None) else str(a),
                "" if baseline is None else ("—" if b in ("", None) else str(b)),
                baseline is not None and a != b,
            )
        )
    return rows


def run_headline(run: RunResult) -> tuple[str, str]:
    """A run with no baseline: its verdict's headline (``compare.run_verdict``, the one
    guard check and guard run exit with) and colour."""
    verdict, why = run_verdict(run)
    # Timed: passed its check and has timing rounds (a check-only run times nothing).
    timed = sum(1 for c in run.cases if c.status == OK and c.rounds)
    why += f"; RUN ONLY (no baseline): {timed} of {len(run.cases)} case(s) timed"
    return verdict.headline(why), verdict.tone


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    """The Jinja environment of every page under ``templates/`` (report and site)."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["time"] = fmt_time
    env.filters["ratio"] = fmt_ratio
    return env


def html_report(
    run: RunResult,
    comparison: Comparison | None = None,
    *,
    trends: Mapping[str, Trend] | None = None,
    title: str = "Performance guard report",
    profiles: Sequence[CaseProfile] = (),
) -> str:
    """The whole report as one HTML document. ``run`` is the candidate; without a
    comparison the report shows the run alone. ``profiles``: Nsight Compute, base
    beside head, of regressed cases (``guard.ci``)."""
    trends = trends or {}
    by_id = {c.case_id: c for c in comparison.cases} if comparison else {}
    views = []
    for i, cand in enumerate(run.cases):
        cc = by_id.get(cand.id)
        base = comparison.baseline.case(cand.id) if comparison else None
        views.append(
            _case_view(
                i,
                cand,
                cc,
                base,
                comparison.confidence if comparison else None,
                trends.get(cand.id),
            )
        )
    if comparison is not None:
        headline, headline_css = comparison.headline, comparison.verdict.tone
        notes = list(comparison.notes)
    else:
        headline, headline_css = run_headline(run)
        notes = list(run.notes)
        throttled = sum(1 for r in run.rounds if r.throttled)
        if throttled:
            notes.append(f"{throttled} round(s) ran while the GPU was throttled")
    baseline = comparison.baseline if comparison else None
    return (
        environment()
        .get_template("report.html.j2")
        .render(
            title=title,
            run=run,
            comparison=comparison,
            baseline=baseline,
            headline=headline,
            headline_css=headline_css,
            notes=notes,
            cases=views,
            workloads=kernel_table(run),
            environment=environment_rows(
                run.environment, baseline.environment if baseline else None
            ),
            environment_diff=list(comparison.environment_diff) if comparison else [],
            has_history=bool(trends),
            profiles=list(profiles),
            resource_changes=[
                (c.case_id, change)
                for c in (comparison.cases if comparison else ())
                for change in c.resource_changes
            ],
        )
    )


# --------------------------------------------------------------------- history
