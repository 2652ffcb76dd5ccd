"""Turn results and comparisons into text: terminal tables, Markdown, JSON.

Pure functions from data to strings; the CLI decides where they go.

Everything that comes from a file, a suite or a kernel (case names, exception
messages, GPU names, labels, notes) is data, never markup: Markdown goes through
``md_text`` (or ``md_code`` inside backticks), GitHub workflow commands through
``gh_command``. A case named ``<img src=x onerror=...>`` or ``a|b`` must not draw an
image or split a table cell; one holding a newline must not start a second
``::error`` command.
"""

from __future__ import annotations

import re
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


# ------------------------------------------------------------------ escaping

_MD_SPECIAL = re.compile(
    r"""
    [\\`*~|]                # escapes, code spans, emphasis, strikethrough, table cells
    | \](?=[(\[:])          # a link, image, reference or link definition needs "](", "][", "]:"
    | (?<![A-Za-z0-9])_ | _(?![A-Za-z0-9])   # "_" is emphasis unless inside a word
    """,
    re.VERBOSE,
)
_HTML = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}


def md_text(text: object) -> str:
    """``text`` as literal Markdown text on one line (GitHub-flavoured, table-safe).

    HTML's ``& < >`` become entities (no tag, no autolink), Markdown's punctuation is
    backslash-escaped where it could mean something (``\\ ` * ~ |``, a ``]`` that
    would close a link, an ``_`` at a word's edge), line breaks become spaces. Plain
    names such as ``triton_flash/b1-h8-s512-d64-full`` or ``test_attn[fp16]`` come out
    unchanged.
    """
    escaped = _MD_SPECIAL.sub(lambda m: "\\" + m.group(0), one_line(text))
    return re.sub(r"[&<>]", lambda m: _HTML[m.group(0)], escaped)


def md_code(text: object) -> str:
    """``text`` as an inline code span: literal (no Markdown, no HTML inside), on one
    line, with a backtick fence longer than any run of backticks it holds."""
    body = one_line(text)
    fence = "`" * (max((len(r) for r in re.findall(r"`+", body)), default=0) + 1)
    if body.startswith("`") or body.endswith("`") or (body[:1] == body[-1:] == " "):
        body = f" {body} "
    return f"{fence}{body}{fence}"


def md_block(text: str) -> str:
    """``text`` as a fenced code block that nothing inside it can close."""
    fence = "`" * max(3, max((len(r) for r in re.findall(r"`+", text)), default=0) + 1)
    return f"{fence}\n{text}\n{fence}"


def md_table(header: list[str], rows: list[list[str]]) -> str:
    """A Markdown table; every cell (header included) is text, escaped by ``md_text``."""
    lines = ["| " + " | ".join(md_text(h) for h in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(md_text(x) for x in row) + " |" for row in rows]
    return "\n".join(lines)


def one_line(text: object) -> str:
    """``text`` for a plain log line: line breaks become spaces, so that nothing read
    from a file or a kernel starts a line of its own (under GitHub Actions a line
    starting with ``::`` is a workflow command)."""
    return re.sub(r"[\r\n]+", " ", str(text))


def gh_escape(text: object, *, prop: bool = False) -> str:
    """A workflow command's message (``prop``: a property value such as ``title``),
    escaped as GitHub's toolkit does (``escapeData`` / ``escapeProperty``): a newline
    cannot end the command and start another one."""
    out = str(text).replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    if prop:
        out = out.replace(":", "%3A").replace(",", "%2C")
    return out


def gh_command(level: str, message: object, **props: object) -> str:
    """``::level k=v,...::message`` with every property and the message escaped."""
    head = ",".join(f"{k}={gh_escape(v, prop=True)}" for k, v in props.items() if v != "")
    return f"::{level}{' ' + head if head else ''}::{gh_escape(message)}"


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
        out += ["", f"[Full report]({_md_url(report_url)})"]
    moved = [c for c in comparison.cases if _moved(c)]
    rest = [c for c in comparison.cases if not _moved(c)]
    row_of = dict(
        zip([c.case_id for c in comparison.cases], comparison_rows(comparison), strict=True)
    )
    for c in comparison.cases:
        row_of[c.case_id][-1] = verdict_text(c, icons=True)
    out.append("")
    if moved:
        out += [md_table(COMPARISON_HEADER, [row_of[c.case_id] for c in moved]), ""]
    else:
        out += ["No case moved beyond its threshold.", ""]
    problems = [
        c for c in comparison.cases if c.reason and c.status in (Status.WRONG, Status.ERROR)
    ]
    for c in problems:
        out.append(f"- {md_code(c.case_id)}: {md_text(c.reason)}")
    if problems:
        out.append("")
    if rest:
        out += [
            f"<details><summary>{len(rest)} other case(s)</summary>",
            "",
            md_table(COMPARISON_HEADER, [row_of[c.case_id] for c in rest]),
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


def _md_url(url: str) -> str:
    """A link destination: as it is when plain, else inside ``<...>`` with whitespace
    and angle brackets percent-encoded, so that nothing in it can end the link."""
    if re.fullmatch(r"[^\s()<>\\]+", url):
        return url
    return "<" + re.sub(r"[\s<>\\]", lambda m: f"%{ord(m.group(0)):02X}", url) + ">"


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
        out += [f"**NO VERDICT: {md_text(no_verdict_reason)}**", ""]
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
            out.append(gh_command("error", c.reason, title=f"Wrong results: {c.case_id}"))
        elif c.fails:
            msg = (
                f"{c.case_id} is {c.interval.ratio:.3f}x the baseline, CI {fmt_ci(c)}"
                if c.interval
                else c.case_id
            )
            out.append(gh_command("error", msg, title=f"Performance regression: {c.case_id}"))
        elif c.infra_failure:
            out.append(gh_command("error", c.reason, title=f"Kernel failed to run: {c.case_id}"))
    return out
