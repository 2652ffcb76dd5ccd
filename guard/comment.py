"""The PR comment (and the job summary's verdict): Markdown from check outcomes.

    python -m guard.comment --meta OUTCOME.json [--meta ...] --out COMMENT.md

Reads each GPU's ``meta.json`` (``guard.outcome``; an unknown schema version or a
malformed field is refused with exit 2 and the field named) and writes one comment:
the verdict per GPU first, the cases that moved, what the PR changes in the policy and
the baselines (taking effect after merge), and a link to the run. The comment workflow
runs this from the default branch with no dependencies installed: standard library
only, and every string from an outcome file is escaped as data.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from guard.outcome import CheckVerdict, Outcome, OutcomeFileError
from guard.text import md_code, md_table, md_text, md_url

MARKER = "<!-- perf-guard -->"
MAX_FILE_BYTES = 1_000_000
MAX_ROWS = 30  # moved cases shown per GPU

_ICON = {
    CheckVerdict.PASS: "✅",
    CheckVerdict.REGRESSION: "🔴",
    CheckVerdict.WRONG_RESULTS: "❌",
    CheckVerdict.NO_VERDICT: "⚪",
    CheckVerdict.BAD_INPUT: "⚠️",
    CheckVerdict.INFRASTRUCTURE: "💥",
}


def _gpu_section(outcome: Outcome) -> list[str]:
    gpu = outcome.gpu or "GPU"
    icon = _ICON[outcome.verdict]
    out = [
        f"### {icon} {md_text(gpu)}: {md_text(outcome.verdict.words)} "
        f"(exit {int(outcome.exit_code)})",
        "",
        md_text(outcome.headline),
        "",
    ]
    commits = []
    if outcome.tested_commit:
        commits.append(f"tested {md_code(outcome.tested_commit[:12])}")
    if outcome.judge_commit:
        commits.append(f"judged by the base commit {md_code(outcome.judge_commit[:12])}")
    if commits:
        out += [" · ".join(commits), ""]
    moved = outcome.moved
    if moved:
        rows = [
            [c.case_id, c.verdict_text + (" (fails)" if c.fails else ""), c.ratio_text, c.reason]
            for c in moved[:MAX_ROWS]
        ]
        out += [md_table(["case", "verdict", "ratio [CI]", "why"], rows), ""]
        if len(moved) > MAX_ROWS:
            out += [f"... and {len(moved) - MAX_ROWS} more (see the run)", ""]
    changed = [(c.case_id, n) for c in outcome.cases for n in c.notes]
    if changed:
        out += [
            "<details><summary>Compiler resources that changed (notes, not verdicts)</summary>",
            "",
            *[f"- {md_code(cid)}: {md_text(n)}" for cid, n in changed[:40]],
            "",
            "</details>",
            "",
        ]
    identical = sum(1 for c in outcome.cases if c.verdict.value == "identical")
    if identical:
        out += [f"{identical} case(s) unchanged: identical kernel in base and head, not timed.", ""]
    if outcome.policy_changes:
        out += [
            "<details><summary>This PR changes the policy (takes effect after merge; "
            "this check used the base commit's)</summary>",
            "",
            *[f"- {md_text(change)}" for change in outcome.policy_changes],
            "",
            "</details>",
            "",
        ]
    if outcome.baseline_changes:
        out += [
            "<details><summary>This PR changes baseline files (take effect after merge)"
            "</summary>",
            "",
            *[f"- {md_code(path)}" for path in outcome.baseline_changes],
            "",
            "</details>",
            "",
        ]
    for prof in outcome.profiles:
        out += [
            f"<details><summary>Nsight Compute: {md_text(prof.case_id)}, base beside head"
            "</summary>",
            "",
            md_table(["metric", "base", "head", "change"], [list(r) for r in prof.rows]),
            "",
            "</details>",
            "",
        ]
    for note in outcome.notes:
        out.append(f"> {md_text(note)}")
    if outcome.notes:
        out.append("")
    return out


def markdown(outcomes: Sequence[Outcome]) -> str:
    """The whole comment for one PR: one section per GPU, worst first."""
    order = sorted(outcomes, key=lambda o: (-int(o.exit_code == 1), o.gpu))
    out = [MARKER, "## perf-guard", ""]
    for outcome in order:
        out += _gpu_section(outcome)
    urls = sorted({o.run_url for o in outcomes if o.run_url})
    for url in urls:
        out.append(f"[The run, its reports and results]({md_url(url)})")
    return "\n".join(out).rstrip() + "\n"


def read(path: Path) -> Outcome:
    """One outcome file; OutcomeFileError naming the file and the field at fault."""
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            raise OutcomeFileError(f"{path}: larger than {MAX_FILE_BYTES} bytes")
        text = path.read_text("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise OutcomeFileError(f"{path}: cannot read it ({exc})") from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise OutcomeFileError(f"{path}: not JSON ({exc})") from None
    return Outcome.from_json(data, str(path))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m guard.comment", description=__doc__)
    parser.add_argument("--meta", type=Path, action="append", required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    try:
        outcomes = [read(path) for path in args.meta]
    except OutcomeFileError as exc:
        print(f"guard.comment: error: {exc}", file=sys.stderr)
        return 2
    args.out.write_text(markdown(outcomes), "utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
