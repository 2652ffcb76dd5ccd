"""The check's outcome: one typed value, built once, rendered everywhere.

The core builds an ``Outcome`` from what it measured (``Comparison.outcome``); the
terminal table, the Markdown summary, the HTML report, ``--json``, ``$GITHUB_OUTPUT``,
the workflow annotations and the PR comment all render from it. On disk it is the
file ``meta.json`` of a PR check (schema below), which the comment workflow reads
with the default branch's ``guard.github.comment``.

Standard library only: the comment workflow runs this module without installing the
project's dependencies.

Format changes (``OUTCOME_SCHEMA_VERSION``):
  1 (2026-11): ``meta.json`` of the first PR check (verdict words, moved cases as dicts).
  2 (2026-11): the typed outcome: every case's verdict and reason, policy changes,
     the commit tested and the commit that judged. Version 1 files are refused (they
     were written by a check that no longer exists, and a comment is cheap to redo).
     Later additions that a reader of version 2 may lack or ignore, so still version 2:
     each case's ``bound``, ``limit`` and ``bound_level`` (the number its verdict rests
     on: absent, the verdict is shown without it).
  3 (2026-11): ``shard``: a shard's place in a sharded check (``--shard I/N``: its
     index, the shard count, the base, head and suite it measured, its cases) and the
     evidence ``guard merge`` decides again from at the family level (each arm's
     results with one number per round, the round medians the statistics use). Null
     for a whole check. Version 2 files are read as version 3 without a shard.

What a check writes, this module reads back: ``to_json`` cuts every string to
``MAX_TEXT`` characters (saying so) and every list to its limit, so that a kernel's
long exception message cannot make ``meta.json`` unreadable for the comment.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from guard.base.errors import ExitCode  # standard library only, like this module
from guard.base.shard import MAX_SHARDS  # likewise
from guard.base.text import fmt_ratio  # likewise

OUTCOME_SCHEMA_VERSION = 3
READS_VERSIONS = (2, 3)  # 2: no shard record (format changes above)
MAX_CASES = 200  # rows an outcome file may hold (suites/full.yaml has 160 cases)
MAX_TEXT = 2000  # characters of any one string read from an outcome file
MAX_PROFILES = 8  # Nsight Compute profiles an outcome file may hold
MAX_PROFILE_ROWS = 64  # rows of one profile


class CheckVerdict(str, enum.Enum):
    """What the whole check concluded; each maps to exactly one exit code."""

    PASS = "pass"
    REGRESSION = "regression"
    WRONG_RESULTS = "wrong-results"
    NO_VERDICT = "no-verdict"  # nothing gated was measured, or no baseline here
    BAD_INPUT = "bad-input"
    INFRASTRUCTURE = "infrastructure"

    @property
    def exit_code(self) -> ExitCode:
        return _EXIT[self]

    @property
    def words(self) -> str:
        return _WORDS[self]

    @property
    def label(self) -> str:
        """The word a headline starts with (``LABEL: why``)."""
        return _LABEL[self]

    @property
    def tone(self) -> str:
        """The headline's colour class in a report: pass, fail, error or neutral."""
        return _TONE[self]

    def headline(self, why: str) -> str:
        """The one headline of a check with this verdict: ``LABEL: why``. Every entry
        point (guard compare/check/run/report, guard.ci, the PR comment) shows this."""
        return f"{self.label}: {why}"


_LABEL = {
    CheckVerdict.PASS: "PASS",
    CheckVerdict.REGRESSION: "FAIL",
    CheckVerdict.WRONG_RESULTS: "FAIL",
    CheckVerdict.NO_VERDICT: "NO VERDICT",
    CheckVerdict.BAD_INPUT: "BAD INPUT",
    CheckVerdict.INFRASTRUCTURE: "ERROR",
}
_TONE = {
    CheckVerdict.PASS: "pass",
    CheckVerdict.REGRESSION: "fail",
    CheckVerdict.WRONG_RESULTS: "fail",
    CheckVerdict.NO_VERDICT: "neutral",
    CheckVerdict.BAD_INPUT: "neutral",
    CheckVerdict.INFRASTRUCTURE: "error",
}
_EXIT = {
    CheckVerdict.PASS: ExitCode.PASS,
    CheckVerdict.REGRESSION: ExitCode.FAIL,
    CheckVerdict.WRONG_RESULTS: ExitCode.FAIL,
    CheckVerdict.NO_VERDICT: ExitCode.BAD_INPUT,
    CheckVerdict.BAD_INPUT: ExitCode.BAD_INPUT,
    CheckVerdict.INFRASTRUCTURE: ExitCode.INFRA,
}
_WORDS = {
    CheckVerdict.PASS: "no significant regression",
    CheckVerdict.REGRESSION: "significant performance regression",
    CheckVerdict.WRONG_RESULTS: "wrong results",
    CheckVerdict.NO_VERDICT: "no verdict",
    CheckVerdict.BAD_INPUT: "bad input or configuration",
    CheckVerdict.INFRASTRUCTURE: "infrastructure failure (no GPU, build failure, crash, timeout)",
}


class CaseVerdict(str, enum.Enum):
    """What the guard concluded about one case (the one status enum of a case's end)."""

    REGRESSION = "regression"
    IMPROVEMENT = "improvement"
    UNCHANGED = "unchanged"
    IDENTICAL = "identical"  # same kernel in base and head: not timed
    INCONCLUSIVE = "inconclusive"
    WRONG = "wrong"  # wrong results
    ERROR = "error"  # crashed, timed out, failed to build
    UNAVAILABLE = "unavailable"  # cannot run here
    NEW = "new"  # nothing to compare with
    NOT_COMPARABLE = "not-comparable"
    TOO_FEW_ROUNDS = "too-few-rounds"
    CONTROL = "control"  # a not-gated reference kernel: context, never a verdict

    @property
    def moved(self) -> bool:
        """Worth a reader's attention in a summary."""
        return self in _MOVED

    @property
    def fails(self) -> bool:
        """A regression fails a gated case (wrong results fail any case: ``compare``)."""
        return self is CaseVerdict.REGRESSION


_MOVED = {
    CaseVerdict.REGRESSION,
    CaseVerdict.IMPROVEMENT,
    CaseVerdict.INCONCLUSIVE,
    CaseVerdict.WRONG,
    CaseVerdict.ERROR,
}


def shown_as_moved(verdict: CaseVerdict, gate: bool, fails: bool) -> bool:
    """Whether a case belongs in a summary's table of cases that moved (the rest is
    folded away): failing ones, wrong or crashed ones gated or not, and gated ones
    whose verdict moved. One rule for the job summary, the HTML report and the PR
    comment."""
    errors = (CaseVerdict.WRONG, CaseVerdict.ERROR)
    return fails or verdict in errors or (gate and verdict.moved)


# How a case's verdict reads where it is not its enum value.
CASE_WORDS = {
    CaseVerdict.IDENTICAL: "unchanged (identical kernel)",
    CaseVerdict.WRONG: "WRONG RESULTS",
    CaseVerdict.CONTROL: "control (not gated)",
}
# The comparison each decided verdict rests on: (how the value bounds the ratio, how it
# stands against the limit).
_BASIS_SIGNS = {
    CaseVerdict.REGRESSION: ("≥", "> {limit}"),
    CaseVerdict.IMPROVEMENT: ("≤", "< {limit}"),
    CaseVerdict.UNCHANGED: ("≤", "< {limit}"),
    CaseVerdict.INCONCLUSIVE: ("≤", "≥ {limit}"),
}


def verdict_text(
    verdict: CaseVerdict,
    bound: float | None = None,
    limit: float | None = None,
    bound_level: float | None = None,
) -> str:
    """A case's verdict with the number it rests on, e.g. "unchanged: ≤ 1.012x (95%
    bound) < 1.02" or "regression: ≥ 1.031x > 1.005" (``guard.base.stats.judge`` decides:
    ``bound`` is the interval's end, or the one-sided bound at ``bound_level``, that
    was compared with ``limit``). The one text of a verdict: the terminal table, the
    Markdown, the HTML report and the PR comment all show it."""
    words = CASE_WORDS.get(verdict, verdict.value)
    signs = _BASIS_SIGNS.get(verdict)
    if signs is None or limit is None:
        return words
    shown_limit = f"{limit:.4g}"
    if bound is None:  # a capped interval: too wide to compare with anything
        return f"{words}: interval too wide to compare with {shown_limit}"
    level = "" if bound_level is None else f" ({bound_level * 100:.4g}% bound)"
    side, against = signs
    return f"{words}: {side} {bound:.3f}x{level} {against.format(limit=shown_limit)}"


class OutcomeFileError(ValueError):
    """An outcome file is not one this version reads; the message names the field."""


@dataclass(frozen=True)
class CaseOutcome:
    """One case's line: its verdict, the ratio and interval when timed, and why."""

    case_id: str
    gate: bool
    verdict: CaseVerdict
    fails: bool = False
    ratio: float | None = None  # candidate / baseline of the case's time
    low: float | None = None
    high: float | None = None
    baseline_s: float | None = None  # the case's time (``stats.case_time``)
    candidate_s: float | None = None
    reason: str = ""
    notes: tuple[str, ...] = ()  # e.g. compiler resources that changed
    # What the verdict rests on (``guard.base.stats.Basis``): the interval's end or the
    # one-sided bound (at ``bound_level``) that was compared with ``limit``.
    bound: float | None = None
    limit: float | None = None
    bound_level: float | None = None

    @property
    def verdict_text(self) -> str:
        """The verdict with the number it rests on (``verdict_text``)."""
        return verdict_text(self.verdict, self.bound, self.limit, self.bound_level)

    @property
    def ratio_text(self) -> str:
        """ "1.054x [1.044, 1.064]", "1.054x" without an interval, "—" untimed."""
        ratio = fmt_ratio(self.ratio)
        if self.ratio is None or self.low is None or self.high is None:
            return ratio
        return f"{ratio} [{self.low:.3f}, {self.high:.3f}]"

    def to_json(self) -> dict[str, Any]:
        return {
            "id": cut(self.case_id),
            "gate": self.gate,
            "verdict": self.verdict.value,
            "fails": self.fails,
            "ratio": _finite(self.ratio),
            "low": _finite(self.low),
            "high": _finite(self.high),
            "baseline_s": _finite(self.baseline_s),
            "candidate_s": _finite(self.candidate_s),
            "reason": cut(self.reason),
            "notes": _cut_all(self.notes),
            "bound": _finite(self.bound),
            "limit": _finite(self.limit),
            "bound_level": _finite(self.bound_level),
        }

    @classmethod
    def from_json(cls, data: Any, where: str) -> CaseOutcome:
        rec = _mapping(data, where)
        try:
            verdict = CaseVerdict(_text(rec, "verdict", where))
        except ValueError:
            raise OutcomeFileError(f"{where}.verdict: unknown verdict") from None
        return cls(
            case_id=_text(rec, "id", where),
            gate=_bool(rec, "gate", where),
            verdict=verdict,
            fails=_bool(rec, "fails", where),
            ratio=_number(rec, "ratio", where),
            low=_number(rec, "low", where),
            high=_number(rec, "high", where),
            baseline_s=_number(rec, "baseline_s", where),
            candidate_s=_number(rec, "candidate_s", where),
            reason=_text(rec, "reason", where, default=""),
            notes=tuple(_texts(rec, "notes", where)),
            bound=_number(rec, "bound", where),
            limit=_number(rec, "limit", where),
            bound_level=_number(rec, "bound_level", where),
        )


@dataclass(frozen=True)
class CaseProfile:
    """Nsight Compute, base beside head, for one regressed case (``guard.measure.profile``):
    rows of (metric, base, head, change) as plain text, escaped where rendered."""

    case_id: str
    rows: tuple[tuple[str, str, str, str], ...]

    def to_json(self) -> dict[str, Any]:
        rows = [_cut_all(r) for r in self.rows[:MAX_PROFILE_ROWS]]
        return {"id": cut(self.case_id), "rows": rows}

    @classmethod
    def from_json(cls, data: Any, where: str) -> CaseProfile:
        rec = _mapping(data, where)
        rows = rec.get("rows", [])
        if not isinstance(rows, list) or len(rows) > MAX_PROFILE_ROWS:
            raise OutcomeFileError(f"{where}.rows: not a list of at most {MAX_PROFILE_ROWS} rows")
        parsed = []
        for i, row in enumerate(rows):
            if not isinstance(row, list) or len(row) != 4:
                raise OutcomeFileError(f"{where}.rows[{i}]: not 4 strings")
            cells = _texts({"row": row}, "row", f"{where}.rows[{i}]")
            parsed.append((cells[0], cells[1], cells[2], cells[3]))
        return cls(_text(rec, "id", where), tuple(parsed))


@dataclass(frozen=True)
class ShardInfo:
    """Where a shard's outcome belongs (``guard.base.shard``): shard ``index`` (from 1)
    of ``count``, the commits and the suite it measured, and its cases. ``evidence``:
    what ``guard.decide.merge`` needs to decide the union again (validated there, as
    results files are); None when the shard measured nothing (it failed)."""

    index: int
    count: int
    base: str
    head: str
    suite_name: str
    suite_hash: str
    case_ids: tuple[str, ...] = ()
    evidence: Mapping[str, Any] | None = None

    @property
    def label(self) -> str:
        return f"{self.index}/{self.count}"

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "count": self.count,
            "base": cut(self.base),
            "head": cut(self.head),
            "suite_name": cut(self.suite_name),
            "suite_hash": cut(self.suite_hash),
            "case_ids": [cut(c) for c in self.case_ids[:MAX_CASES]],
            "evidence": None if self.evidence is None else dict(self.evidence),
        }

    @classmethod
    def from_json(cls, data: Any, where: str) -> ShardInfo:
        rec = _mapping(data, where)
        index, count = rec.get("index"), rec.get("count")
        for key, value in (("index", index), ("count", count)):
            if (
                not isinstance(value, int)
                or isinstance(value, bool)
                or not 1 <= value <= MAX_SHARDS
            ):
                raise OutcomeFileError(f"{where}.{key}: not an integer from 1 to {MAX_SHARDS}")
        assert isinstance(index, int) and isinstance(count, int)
        if index > count:
            raise OutcomeFileError(f"{where}.index: {index} is beyond the count {count}")
        evidence = rec.get("evidence")
        if evidence is not None and not isinstance(evidence, Mapping):
            raise OutcomeFileError(f"{where}.evidence: not an object")
        return cls(
            index=index,
            count=count,
            base=_text(rec, "base", where),
            head=_text(rec, "head", where),
            suite_name=_text(rec, "suite_name", where),
            suite_hash=_text(rec, "suite_hash", where),
            case_ids=tuple(_texts(rec, "case_ids", where)),
            evidence=evidence,
        )


@dataclass(frozen=True)
class Outcome:
    """The whole check: verdict (and so exit code), headline, every case, and context."""

    verdict: CheckVerdict
    headline: str
    cases: tuple[CaseOutcome, ...] = ()
    notes: tuple[str, ...] = ()
    policy_changes: tuple[str, ...] = ()  # the PR's suite edits: take effect after merge
    baseline_changes: tuple[str, ...] = ()  # baseline files the PR edits
    gpu: str = ""
    tested_commit: str = ""  # the commit whose kernels were measured
    judge_commit: str = ""  # the commit whose guard, suite and baseline judged
    head_sha: str = ""  # the PR's head (the comment workflow matches on it)
    pr_number: int | None = None
    run_url: str = ""
    profiles: tuple[CaseProfile, ...] = ()  # ncu, base beside head, per regressed case
    shard: ShardInfo | None = None  # a shard of a sharded check (``guard merge`` joins them)

    @property
    def exit_code(self) -> ExitCode:
        return self.verdict.exit_code

    @property
    def moved(self) -> tuple[CaseOutcome, ...]:
        """The cases a reader should look at: failing ones first."""
        rows = [c for c in self.cases if shown_as_moved(c.verdict, c.gate, c.fails)]
        return tuple(sorted(rows, key=lambda c: (not c.fails, c.case_id)))

    def to_json(self) -> dict[str, Any]:
        """The outcome file's content, within every limit ``from_json`` applies."""
        cases, notes = self.cases, self.notes
        if len(cases) > MAX_CASES:  # keep the cases a reader must see, in their order
            moved_first = sorted(
                range(len(cases)),
                key=lambda i: not shown_as_moved(cases[i].verdict, cases[i].gate, cases[i].fails),
            )
            cases = tuple(cases[i] for i in sorted(moved_first[:MAX_CASES]))
            note = f"{len(self.cases) - len(cases)} case(s) left out of this file"
            notes = (note, *notes)
        return {
            "schema_version": OUTCOME_SCHEMA_VERSION,
            "verdict": self.verdict.value,
            "exit_code": int(self.exit_code),
            "headline": cut(self.headline),
            "cases": [c.to_json() for c in cases],
            "notes": _cut_all(notes),
            "policy_changes": _cut_all(self.policy_changes),
            "baseline_changes": _cut_all(self.baseline_changes),
            "gpu": cut(self.gpu),
            "tested_commit": cut(self.tested_commit),
            "judge_commit": cut(self.judge_commit),
            "head_sha": cut(self.head_sha),
            "pr_number": self.pr_number,
            "run_url": cut(self.run_url),
            "profiles": [p.to_json() for p in self.profiles[:MAX_PROFILES]],
            "shard": None if self.shard is None else self.shard.to_json(),
        }

    @classmethod
    def from_json(cls, data: Any, where: str = "outcome") -> Outcome:
        rec = _mapping(data, where)
        version = rec.get("schema_version")
        if not isinstance(version, int) or isinstance(version, bool):
            raise OutcomeFileError(f"{where}.schema_version: missing or not an integer")
        if version not in READS_VERSIONS:
            raise OutcomeFileError(
                f"{where}.schema_version: {version} is not one of "
                f"{', '.join(map(str, READS_VERSIONS))}, the versions this guard reads"
            )
        shard = rec.get("shard") if version >= 3 else None
        try:
            verdict = CheckVerdict(_text(rec, "verdict", where))
        except ValueError:
            raise OutcomeFileError(f"{where}.verdict: unknown verdict") from None
        cases = rec.get("cases", [])
        if not isinstance(cases, list) or len(cases) > MAX_CASES:
            raise OutcomeFileError(f"{where}.cases: not a list of at most {MAX_CASES}")
        pr = rec.get("pr_number")
        if pr is not None and (not isinstance(pr, int) or isinstance(pr, bool) or pr <= 0):
            raise OutcomeFileError(f"{where}.pr_number: not a positive integer")
        return cls(
            verdict=verdict,
            headline=_text(rec, "headline", where),
            cases=tuple(
                CaseOutcome.from_json(c, f"{where}.cases[{i}]") for i, c in enumerate(cases)
            ),
            notes=tuple(_texts(rec, "notes", where)),
            policy_changes=tuple(_texts(rec, "policy_changes", where)),
            baseline_changes=tuple(_texts(rec, "baseline_changes", where)),
            gpu=_text(rec, "gpu", where, default=""),
            tested_commit=_text(rec, "tested_commit", where, default=""),
            judge_commit=_text(rec, "judge_commit", where, default=""),
            head_sha=_text(rec, "head_sha", where, default=""),
            pr_number=pr,
            run_url=_text(rec, "run_url", where, default=""),
            profiles=tuple(
                CaseProfile.from_json(p, f"{where}.profiles[{i}]")
                for i, p in enumerate(_list(rec, "profiles", where, MAX_PROFILES))
            ),
            shard=None if shard is None else ShardInfo.from_json(shard, f"{where}.shard"),
        )


# ------------------------------------------------------------------ writing helpers


def cut(text: str, limit: int = MAX_TEXT) -> str:
    """``text`` within ``limit`` characters; where it was longer, its start and a note
    of how long it was (a kernel's exception message may run to pages)."""
    if len(text) <= limit:
        return text
    tail = f" … [cut: {len(text)} characters in all]"
    return text[: limit - len(tail)] + tail


def _cut_all(texts: tuple[str, ...] | list[str]) -> list[str]:
    """At most ``MAX_CASES`` strings, each within ``MAX_TEXT``."""
    kept = [cut(t) for t in texts[:MAX_CASES]]
    if len(texts) > MAX_CASES:
        kept[-1] = f"... and {len(texts) - MAX_CASES + 1} more left out"
    return kept


# ------------------------------------------------------------------ reading helpers


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _mapping(data: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        raise OutcomeFileError(f"{where}: not an object")
    return data


def _text(rec: Mapping[str, Any], key: str, where: str, default: str | None = None) -> str:
    value = rec.get(key, default)
    if not isinstance(value, str):
        raise OutcomeFileError(f"{where}.{key}: missing or not a string")
    if len(value) > MAX_TEXT:
        raise OutcomeFileError(f"{where}.{key}: longer than {MAX_TEXT} characters")
    return value


def _texts(rec: Mapping[str, Any], key: str, where: str) -> list[str]:
    values = rec.get(key, [])
    if not isinstance(values, list) or len(values) > MAX_CASES:
        raise OutcomeFileError(f"{where}.{key}: not a list of at most {MAX_CASES} strings")
    return [_text({key: v}, key, f"{where}[{i}]") for i, v in enumerate(values)]


def _list(rec: Mapping[str, Any], key: str, where: str, most: int) -> list[Any]:
    values = rec.get(key, [])
    if not isinstance(values, list) or len(values) > most:
        raise OutcomeFileError(f"{where}.{key}: not a list of at most {most}")
    return values


def _bool(rec: Mapping[str, Any], key: str, where: str) -> bool:
    value = rec.get(key, False)
    if not isinstance(value, bool):
        raise OutcomeFileError(f"{where}.{key}: not true or false")
    return value


def _number(rec: Mapping[str, Any], key: str, where: str) -> float | None:
    value = rec.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise OutcomeFileError(f"{where}.{key}: not a number")
    if not math.isfinite(value):
        raise OutcomeFileError(f"{where}.{key}: not finite")
    return float(value)
