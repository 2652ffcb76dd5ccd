"""Turn results and comparisons into text: terminal tables, Markdown, JSON.

Pure functions from data to strings; the CLI decides where they go. Everything from a
file, a suite or a kernel is escaped as data (``guard.base.text`` says how).
"""

# No ``from __future__ import annotations`` here: it binds the name ``annotations``,
# which this module defines (``annotations`` below, the GitHub workflow commands). Every
# annotation in it is valid at run time on Python 3.10.
from typing import Any

from guard.base.text import (
    fmt_ratio,
    fmt_time,
    gh_command,
    md_code,
    md_table,
    md_text,
    md_url,
)
from guard.decide.compare import CaseComparison, Comparison, Status
from guard.decide.outcome import CaseVerdict, CheckVerdict, Outcome, shown_as_moved
from guard.store.history import Trend
from guard.store.results import OK, RunResult
from guard.store.suite import flops


def fmt_ci(c: CaseComparison) -> str:
    if c.interval is None:
        return "—"
    return f"[{c.interval.low:.3f}, {c.interval.high:.3f}]"


def verdict_text(c: CaseComparison, icons: bool = False) -> str:
    """The case's verdict with the number it rests on (``CaseOutcome.verdict_text``,
    the one text every renderer shows; ``icons``: with a colour mark). A not-gated
    case is a control: its ratio is shown, never a verdict's colour (the machine
    moving must not paint torch's own kernels red)."""
    outcome = c.outcome()
    words = outcome.verdict_text
    if not icons:
        return words
    verdict = outcome.verdict
    return f"{CASE_ICONS[verdict]} {words}" if verdict in CASE_ICONS else words


CASE_ICONS = {
    CaseVerdict.REGRESSION: "🔴",
    CaseVerdict.IMPROVEMENT: "🟢",
    CaseVerdict.UNCHANGED: "⚪",
    CaseVerdict.IDENTICAL: "⚪",
    CaseVerdict.INCONCLUSIVE: "🟡",
    CaseVerdict.WRONG: "❌",
    CaseVerdict.ERROR: "💥",
}


def comparison_rows(comparison: Comparison) -> list[list[str]]:
    rows = []
    for c in comparison.cases:
        rows.append(
            [
                c.case_id,
                fmt_time(c.baseline_median),
                fmt_time(c.candidate_median),
                fmt_ratio(c.ratio),
                fmt_ci(c),
                f"{c.min_effect * 100:g}%",
                verdict_text(c),
            ]
        )
    return rows


# "baseline"/"candidate": the case's time (``stats.case_time`` under its threshold), so
# candidate / baseline is the ratio beside them; "threshold": the minimum effect of
# interest ("unchanged" rules out a slowdown this large).
COMPARISON_HEADER = ["case", "baseline", "candidate", "ratio", "CI", "threshold", "verdict"]


def comparison_header(comparison: Comparison) -> list[str]:
    """``COMPARISON_HEADER`` with the interval's level named: the per-case confidence
    that keeps the whole check's false alarms at alpha (the verdict's own one-sided
    bound names its level in the verdict's text)."""
    level = f"{comparison.confidence * 100:.4g}% CI"
    return [level if h == "CI" else h for h in COMPARISON_HEADER]


def case_reasons(comparison: Comparison) -> list[tuple[str, str]]:
    """(case id, why) for each case that failed, errored, or whose baseline failed."""
    return [
        (c.case_id, c.reason)
        for c in comparison.cases
        if c.reason
        and (
            c.status in (Status.WRONG, Status.ERROR)
            or (c.status == Status.NEW and c.reason.startswith("only the baseline failed"))
        )
    ]


# ------------------------------------------------------------------ escaping


def _moved(c: CaseComparison) -> bool:
    return shown_as_moved(c.case_verdict, c.gate, c.fails)


def comparison_markdown(
    comparison: Comparison, *, title: str = "Performance guard", report_url: str = ""
) -> str:
    """Verdict first, then the cases that moved, the rest folded away."""
    out = [f"## {md_text(title)}", "", f"**{md_text(comparison.headline)}**", ""]
    env = comparison.candidate.environment
    base_commit = comparison.baseline.environment.commit[:10] or "?"
    out.append(
        f"GPU: {md_text(env.gpu_name)} · torch {md_text(env.torch)} · "
        f"triton {md_text(env.triton or '—')} · "
        f"baseline: {md_code(comparison.baseline.label)} ({md_text(base_commit)})"
        f" · per-case confidence {comparison.confidence:.4f} (family α={comparison.alpha:g})"
    )
    if report_url:
        out += ["", f"[Full report]({md_url(report_url)})"]
    moved = [c for c in comparison.cases if _moved(c)]
    rest = [c for c in comparison.cases if not _moved(c)]
    row_of = dict(
        zip([c.case_id for c in comparison.cases], comparison_rows(comparison), strict=True)
    )
    for c in comparison.cases:
        row_of[c.case_id][-1] = verdict_text(c, icons=True)
    out.append("")
    if moved:
        out += [md_table(comparison_header(comparison), [row_of[c.case_id] for c in moved]), ""]
    else:
        out += ["No case moved beyond its threshold.", ""]
    resource_notes = [(c.case_id, x) for c in comparison.cases for x in c.resource_changes]
    if resource_notes:
        out.append("Compiler resources that changed (a note, not a verdict):")
        out += [f"- {md_code(cid)}: {md_text(x)}" for cid, x in resource_notes[:40]]
        out.append("")
    problems = case_reasons(comparison)
    for case_id, why in problems:
        out.append(f"- {md_code(case_id)}: {md_text(why)}")
    if problems:
        out.append("")
    if rest:
        out += [
            f"<details><summary>{len(rest)} other case(s)</summary>",
            "",
            md_table(comparison_header(comparison), [row_of[c.case_id] for c in rest]),
            "",
            "</details>",
            "",
        ]
    if comparison.environment_diff:
        out += [
            "<details><summary>Environment differs from the baseline's</summary>",
            "",
            md_table(
                ["field", "baseline", "candidate"], [list(d) for d in comparison.environment_diff]
            ),
            "",
            "</details>",
            "",
        ]
    for note in comparison.notes:
        out.append(f"> {md_text(note)}")
    return "\n".join(out).rstrip() + "\n"


def run_rows(run: RunResult) -> list[list[str]]:
    rows = []
    for c in run.cases:
        corr = c.correctness
        err = "—" if corr is None or corr.rel_norm_err is None else f"{corr.rel_norm_err:.2e}"
        med = c.median
        tflops = "—"
        if med and c.case.shape.batch:
            tflops = f"{flops(c.case.shape, c.case.causal) / med / 1e12:.1f}"
        status = c.status if c.status == OK else f"{c.status}: {c.reason}"
        rows.append([c.id, status, err, fmt_time(med), tflops, str(len(c.rounds))])
    return rows


RUN_HEADER = ["case", "status", "rel err", "time", "TFLOPS", "rounds"]  # time: stats.case_time


def run_markdown(run: RunResult, no_verdict_reason: str = "", *, headline: str = "") -> str:
    """A run's table, headed by ``headline`` (the check's, ``CheckVerdict.headline``) or,
    given only why there is no verdict, by the no-verdict headline."""
    env = run.environment
    out = ["## Performance guard", ""]
    if no_verdict_reason and not headline:
        headline = CheckVerdict.NO_VERDICT.headline(no_verdict_reason)
    if headline:
        out += [f"**{md_text(headline)}**", ""]
    out += [
        f"Device: {md_text(env.gpu_name)} · torch {md_text(env.torch)} · "
        f"triton {md_text(env.triton or '—')}",
        "",
    ]
    out += [md_table(RUN_HEADER, run_rows(run)), ""]
    out += [f"> {md_text(n)}" for n in run.notes]
    return "\n".join(out).rstrip() + "\n"


def comparison_json(comparison: Comparison) -> dict[str, Any]:
    return {
        "headline": comparison.headline,
        "verdict": comparison.verdict.value,
        "exit_code": int(comparison.exit_code),
        "confidence": comparison.confidence,
        "alpha": comparison.alpha,
        "baseline": comparison.baseline.label,
        "candidate": comparison.candidate.label,
        "environment_diff": [list(d) for d in comparison.environment_diff],
        "notes": list(comparison.notes),
        "cases": [
            {
                "id": c.case_id,
                "kernel": c.kernel,
                "name": c.name,
                "gate": c.gate,
                "status": c.status.value,
                "verdict": c.verdict.value if c.verdict else None,
                "ratio": c.ratio,
                "ci": [c.interval.low, c.interval.high] if c.interval else None,
                "min_effect": c.min_effect,
                "baseline_median_s": c.baseline_median,
                "candidate_median_s": c.candidate_median,
                "host_ratio": c.host_ratio,
                "fails": c.fails,
                "reason": c.reason,
                "case_verdict": c.case_verdict.value,
                "bound": c.interval.bound if c.interval else None,
                "verdict_text": verdict_text(c),
                "basis": (
                    None
                    if (b := c.basis) is None
                    else {"value": b.value, "limit": b.limit, "level": b.level}
                ),
                "resource_changes": list(c.resource_changes),
            }
            for c in comparison.cases
        ],
    }


_ANNOTATION_TITLES = {
    CaseVerdict.WRONG: "Wrong results",
    CaseVerdict.ERROR: "Kernel failed to run",
    CaseVerdict.REGRESSION: "Performance regression",
}


def annotations(outcome: Outcome) -> list[str]:
    """GitHub workflow commands for the cases behind a check that did not pass: an
    ``::error`` for each failing regression, wrong result (gated or not: either fails
    the check) and gated kernel that failed to run; a ``::warning`` for a not-gated
    kernel that failed to run (shown, never the verdict). One rule for the PR check
    (``guard.ci``) and ``guard compare`` under GitHub Actions."""
    out = []
    for c in outcome.moved:
        title = _ANNOTATION_TITLES.get(c.verdict)
        if title is None:
            continue
        if c.verdict is CaseVerdict.REGRESSION:  # moved: so a gated, failing case
            msg = f"{c.case_id}: {c.ratio_text} of the baseline's time ({c.verdict_text})"
        else:
            msg = c.reason or c.verdict.value
        level = "warning" if c.verdict is CaseVerdict.ERROR and not c.gate else "error"
        out.append(gh_command(level, msg, title=f"{title}: {c.case_id}"))
    return out


HISTORY_HEADER = ["#", "commit", "date", "time", "rounds", "vs previous", "step"]


def history_rows(trend: Trend) -> list[list[str]]:
    """One row per run of the case, oldest first; the step column flags change points."""
    steps = {s.index: s for s in trend.steps}
    rows = []
    previous: float | None = None
    for i, p in enumerate(trend.points):
        change = "—"
        if p.time is not None and previous:
            change = f"{(p.time / previous - 1) * 100:+.1f}%"
        step = steps.get(i)
        flag = ""
        if step is not None:
            flag = f"STEP {step.kind} {step.ratio:.3f}× (p={step.p_value:.1e})"
        rows.append(
            [
                str(i + 1),
                (p.commit[:10] or "?") + (" (dirty)" if p.commit_dirty else ""),
                p.created[:19].replace("T", " "),
                fmt_time(p.time) if p.time is not None else p.status,
                str(len(p.round_medians)),
                change,
                flag,
            ]
        )
        if p.time is not None:
            previous = p.time
    return rows
