"""The PR comment's Markdown (and the job summary's verdict), from check outcomes.

The entry point is ``python -m guard.github.comment``; see its docstring. This module
runs with the standard library alone (the comment workflow installs nothing): every
string from an outcome file is escaped as data."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from guard.base.files import read_text
from guard.base.text import clip, is_web_url, md_code, md_link, md_table, md_text
from guard.decide.outcome import MAX_TEXT, CheckVerdict, Outcome, OutcomeFileError

MARKER = "<!-- perf-guard -->"


MAX_FILE_BYTES = 1_000_000


MAX_FILES = 16  # --meta files (one per GPU; the comment workflow allows as many)


# GitHub's limit is 65,536 characters; UTF-8 bytes bound every way of counting them
# (code points, UTF-16 units), and the margin leaves room for the workflow's marker.
MAX_COMMENT_BYTES = 60_000


MAX_URL = 400  # a run's URL is ~70 characters; a longer one is shown as text, clipped


_ICON = {
    CheckVerdict.PASS: "✅",
    CheckVerdict.REGRESSION: "🔴",
    CheckVerdict.WRONG_RESULTS: "❌",
    CheckVerdict.NO_VERDICT: "⚪",
    CheckVerdict.BAD_INPUT: "⚠️",
    CheckVerdict.INFRASTRUCTURE: "💥",
}


_T = TypeVar("_T")


@dataclass(frozen=True)
class Detail:
    """How much of each outcome the comment shows."""

    rows: int  # moved cases in the table (failing ones come first)
    items: int  # entries of each list: resource notes, policy/baseline changes, notes
    profiles: int  # Nsight Compute tables
    clip: int  # characters of any one string from the file
    commits: bool  # the commits tested and judging


# From everything to the verdicts alone; the first that fits is used.
DETAILS = (
    Detail(rows=30, items=40, profiles=8, clip=MAX_TEXT, commits=True),
    Detail(rows=30, items=10, profiles=2, clip=500, commits=True),
    Detail(rows=30, items=5, profiles=0, clip=200, commits=True),
    Detail(rows=15, items=3, profiles=0, clip=120, commits=True),
    Detail(rows=8, items=0, profiles=0, clip=100, commits=True),
    Detail(rows=3, items=0, profiles=0, clip=80, commits=False),
    Detail(rows=0, items=0, profiles=0, clip=60, commits=False),
)


def _listed(
    summary: str, entries: Sequence[_T], line: Callable[[_T], str], most: int
) -> Iterator[str]:
    """A folded list of the first ``most`` entries (rendered by ``line``), or only
    their count when none is shown."""
    if not entries:
        return
    if most <= 0:
        yield f"{summary}: {len(entries)} (see the run)"
        yield ""
        return
    yield f"<details><summary>{summary}</summary>"
    yield ""
    yield from (line(e) for e in entries[:most])
    if len(entries) > most:
        yield f"- ... and {len(entries) - most} more (see the run)"
    yield from ("", "</details>", "")


def _gpu_section(outcome: Outcome, d: Detail) -> Iterator[str]:
    def text(value: str) -> str:
        return md_text(clip(value, d.clip))

    def code(value: str) -> str:
        return md_code(clip(value, d.clip))

    gpu = text(outcome.gpu) if outcome.gpu.strip() else "unnamed GPU"
    if outcome.shard is not None:  # one shard alone: `guard merge` joins them
        gpu += f" (shard {outcome.shard.index}/{outcome.shard.count} only)"
    yield (
        f"### {_ICON[outcome.verdict]} {gpu}: {md_text(outcome.verdict.words)} "
        f"(exit {int(outcome.exit_code)})"
    )
    yield ""
    yield text(outcome.headline)
    yield ""
    if d.commits:
        commits = []
        if outcome.tested_commit:
            commits.append(f"tested {md_code(outcome.tested_commit[:12])}")
        if outcome.judge_commit:
            commits.append(f"judged by the base commit {md_code(outcome.judge_commit[:12])}")
        if commits:
            yield from (" · ".join(commits), "")
    moved = outcome.moved  # failing cases first
    if moved:
        shown = moved[: d.rows]
        if shown:
            rows = [
                [
                    clip(c.case_id, d.clip),
                    c.verdict_text + (" (fails)" if c.fails else ""),
                    c.ratio_text,
                    clip(c.reason, d.clip),
                ]
                for c in shown
            ]
            yield from (md_table(["case", "verdict", "ratio [CI]", "why"], rows), "")
        left = len(moved) - len(shown)
        failing = sum(1 for c in moved[len(shown) :] if c.fails)
        if left:
            which = f", {failing} of them failing" if failing else ""
            more = "... and " if shown else ""
            yield f"{more}{left} more case(s) that moved{which} (see the run)"
            yield ""
    changed = [(c.case_id, n) for c in outcome.cases for n in c.notes]
    yield from _listed(
        "Compiler resources that changed (notes, not verdicts)",
        changed,
        lambda cn: f"- {code(cn[0])}: {text(cn[1])}",
        d.items,
    )
    identical = sum(1 for c in outcome.cases if c.verdict.value == "identical")
    if identical:
        yield f"{identical} case(s) unchanged: identical kernel in base and head, not timed."
        yield ""
    yield from _listed(
        "This PR changes the policy (takes effect after merge; this check used the base commit's)",
        outcome.policy_changes,
        lambda change: f"- {text(change)}",
        d.items,
    )
    yield from _listed(
        "This PR changes baseline files (take effect after merge)",
        outcome.baseline_changes,
        lambda path: f"- {code(path)}",
        d.items,
    )
    for prof in outcome.profiles[: d.profiles]:
        rows = [[clip(cell, d.clip) for cell in row] for row in prof.rows]
        yield f"<details><summary>Nsight Compute: {text(prof.case_id)}, base beside head</summary>"
        yield from ("", md_table(["metric", "base", "head", "change"], rows), "", "</details>", "")
    if len(outcome.profiles) > d.profiles:
        yield f"Nsight Compute: {len(outcome.profiles) - d.profiles} more profile(s) (see the run)"
        yield ""
    notes = outcome.notes
    yield from (f"> {text(note)}" for note in notes[: d.items])
    if len(notes) > d.items:
        more = "... and " if d.items else ""
        yield f"> {more}{len(notes) - d.items} more note(s) (see the run)"
    if notes:
        yield ""


def _run_link(url: str) -> str:
    label = "The run, its reports and results"
    if not is_web_url(url):  # shown as text (md_link), clipped
        return md_link(label, clip(url, 120))
    if len(url) > MAX_URL:
        return f"{md_text(label)}: not linked (its URL is over {MAX_URL} characters)"
    return md_link(label, url)


def _size(line: str) -> int:
    return len(line.encode("utf-8", "replace")) + 1  # and its newline


def _render(outcomes: Sequence[Outcome], d: Detail, budget: int) -> str | None:
    """The comment at detail ``d``, or None as soon as it outgrows ``budget`` bytes
    (the sections are generated lazily, so a huge outcome is not rendered in full)."""
    order = sorted(outcomes, key=lambda o: (-int(o.exit_code == 1), o.gpu))
    urls = sorted({o.run_url for o in outcomes if o.run_url})
    footer = [_run_link(url) for url in urls]
    out = [MARKER, "## perf-guard", ""]
    used = sum(_size(line) for line in (*out, *footer))
    for outcome in order:
        for line in _gpu_section(outcome, d):
            used += _size(line)
            if used > budget:
                return None
            out.append(line)
    return "\n".join([*out, *footer]).rstrip() + "\n"


def markdown(outcomes: Sequence[Outcome], budget: int = MAX_COMMENT_BYTES) -> str:
    """The whole comment for one PR: one section per GPU, worst first, as much of
    each as fits in ``budget`` bytes (``DETAILS``, most first)."""
    for d in DETAILS[:-1]:
        body = _render(outcomes, d, budget)
        if body is not None:
            return body
    # The verdicts alone: a few hundred bytes per GPU, within the budget for MAX_FILES.
    return _render(outcomes, DETAILS[-1], sys.maxsize) or ""


def read(path: Path, limit: int = MAX_FILE_BYTES) -> Outcome:
    """One outcome file; OutcomeFileError naming the file and the field at fault.
    ``limit``: its most bytes (a shard's file, which carries evidence, may be larger)."""
    try:
        text = read_text(path, limit)
    except (OSError, UnicodeDecodeError) as exc:  # FileRefused: a FIFO, device, too big
        raise OutcomeFileError(f"{path}: cannot read it ({exc})") from None
    try:
        return Outcome.from_json(json.loads(text), str(path))
    except RecursionError:
        raise OutcomeFileError(f"{path}: nested too deeply") from None
    except OutcomeFileError:
        raise
    except ValueError as exc:
        raise OutcomeFileError(f"{path}: not JSON ({exc})") from None
