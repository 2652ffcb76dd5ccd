"""Turn results and comparisons into text: terminal tables, Markdown, JSON.

Pure functions from data to strings; the CLI decides where they go.
"""

from __future__ import annotations

from typing import Any

from guard.compare import CaseComparison, Comparison, Status
from guard.results import OK, RunResult
from guard.stats import Verdict
from guard.suite import flops

VERDICT_ICON = {
    Verdict.REGRESSION: "🔴 regression",
    Verdict.IMPROVEMENT: "🟢 improvement",
    Verdict.UNCHANGED: "⚪ unchanged",
    Verdict.INCONCLUSIVE: "🟡 inconclusive",
}


def fmt_time(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3f} ms"
    return f"{seconds * 1e6:.1f} µs"


def fmt_ratio(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}x"


def fmt_ci(c: CaseComparison) -> str:
    if c.interval is None:
        return "—"
    return f"[{c.interval.low:.3f}, {c.interval.high:.3f}]"


def verdict_text(c: CaseComparison, icons: bool = False) -> str:
    if c.status is Status.COMPARED and c.verdict is not None:
        text = VERDICT_ICON[c.verdict] if icons else c.verdict.value
        return text if c.gate else f"{text} (not gated)"
    if c.status is Status.WRONG:
        return "❌ WRONG RESULTS" if icons else "WRONG RESULTS"
    if c.status is Status.ERROR:
        return "💥 error" if icons else "error"
    return c.status.value


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
                f"±{c.min_effect * 100:g}%",
                verdict_text(c),
            ]
        )
    return rows


COMPARISON_HEADER = ["case", "baseline", "candidate", "ratio", "CI", "band", "verdict"]


def _md_table(header: list[str], rows: list[list[str]]) -> str:
    def esc(cell: str) -> str:
        return cell.replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(esc(x) for x in row) + " |" for row in rows]
    return "\n".join(lines)


def _moved(c: CaseComparison) -> bool:
    return (
        c.fails
        or c.infra_failure
        or c.status in (Status.WRONG, Status.ERROR)
        or (c.verdict in (Verdict.REGRESSION, Verdict.IMPROVEMENT, Verdict.INCONCLUSIVE))
    )


def comparison_markdown(
    comparison: Comparison, *, title: str = "Performance guard", report_url: str = ""
) -> str:
    """Verdict first, then the cases that moved, the rest folded away."""
    out = [f"## {title}", "", f"**{comparison.headline}**", ""]
    env = comparison.candidate.environment
    base_commit = comparison.baseline.environment.commit[:10] or "?"
    out.append(
        f"GPU: {env.gpu_name} · torch {env.torch} · triton {env.triton or '—'} · "
        f"baseline: `{comparison.baseline.label}` ({base_commit})"
        f" · per-case confidence {comparison.confidence:.4f} (family α={comparison.alpha:g})"
    )
    if report_url:
        out += ["", f"[Full report]({report_url})"]
    moved = [c for c in comparison.cases if _moved(c)]
    rest = [c for c in comparison.cases if not _moved(c)]
    row_of = dict(
        zip([c.case_id for c in comparison.cases], comparison_rows(comparison), strict=True)
    )
    for c in comparison.cases:
        row_of[c.case_id][-1] = verdict_text(c, icons=True)
    out.append("")
    if moved:
        out += [_md_table(COMPARISON_HEADER, [row_of[c.case_id] for c in moved]), ""]
    else:
        out += ["No case moved beyond its threshold.", ""]
    problems = [
        c for c in comparison.cases if c.reason and c.status in (Status.WRONG, Status.ERROR)
    ]
    for c in problems:
        out.append(f"- `{c.case_id}`: {c.reason}")
    if problems:
        out.append("")
    if rest:
        out += [
            f"<details><summary>{len(rest)} other case(s)</summary>",
            "",
            _md_table(COMPARISON_HEADER, [row_of[c.case_id] for c in rest]),
            "",
            "</details>",
            "",
        ]
    if comparison.environment_diff:
        out += [
            "<details><summary>Environment differs from the baseline's</summary>",
            "",
            _md_table(
                ["field", "baseline", "candidate"], [list(d) for d in comparison.environment_diff]
            ),
            "",
            "</details>",
            "",
        ]
    for note in comparison.notes:
        out.append(f"> {note}")
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


RUN_HEADER = ["case", "status", "rel err", "median", "TFLOPS", "rounds"]


def run_markdown(run: RunResult, no_verdict_reason: str = "") -> str:
    env = run.environment
    out = ["## Performance guard", ""]
    if no_verdict_reason:
        out += [f"**NO VERDICT: {no_verdict_reason}**", ""]
    out += [f"Device: {env.gpu_name} · torch {env.torch} · triton {env.triton or '—'}", ""]
    out += [_md_table(RUN_HEADER, run_rows(run)), ""]
    out += [f"> {n}" for n in run.notes]
    return "\n".join(out).rstrip() + "\n"


def comparison_json(comparison: Comparison) -> dict[str, Any]:
    return {
        "headline": comparison.headline,
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
            }
            for c in comparison.cases
        ],
    }


def annotations(comparison: Comparison) -> list[str]:
    """GitHub workflow commands (``::error``) for each failing case."""
    out = []
    for c in comparison.cases:
        if c.status is Status.WRONG:
            out.append(f"::error title=Wrong results: {c.case_id}::{_gh_escape(c.reason)}")
        elif c.fails:
            msg = (
                f"{c.case_id} is {c.interval.ratio:.3f}x the baseline, CI {fmt_ci(c)}"
                if c.interval
                else c.case_id
            )
            out.append(f"::error title=Performance regression: {c.case_id}::{_gh_escape(msg)}")
        elif c.infra_failure:
            out.append(f"::error title=Kernel failed to run: {c.case_id}::{_gh_escape(c.reason)}")
    return out


def _gh_escape(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
