"""Shards of one check joined into one verdict at the family false-alarm rate.

A sharded check (``--shard I/N`` on N runners, or ``--gpus`` on N GPUs of a host)
measures each case's pair on one GPU. Deciding each shard at its own alpha would
raise the family false-alarm rate N-fold, so a shard's outcome file carries its
evidence (``evidence``): both arms' results with one number per round, the round
median, which is all the statistics read (``stats.case_time`` and the interval are
functions of the round medians). ``merge`` checks that the shards belong together,
puts their cases back in the suite's order and decides the union with
``compare.compare_runs``, the function an unsharded check calls: the family size is
the union's, and the same data give the same verdicts.

A shard that is missing, or that failed before it measured (no evidence), is an
infrastructure failure (``InfraError``, exit 3): never a pass. Shards of another base,
head, suite, GPU or shard count are refused (``BadInput``, exit 2, naming the field).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from guard.base import stats
from guard.base.errors import BadInput, InfraError, shown
from guard.decide.compare import PHASES_NOTE, Comparison, compare_runs
from guard.decide.outcome import MAX_PROFILES, CaseProfile, CheckVerdict, Outcome, ShardInfo
from guard.store import results
from guard.store.results import CaseResult, RoundInfo, RunResult
from guard.store.suite import TimingPlan, timing_plan

EVIDENCE_VERSION = 1  # the layout of ``ShardInfo.evidence`` (inside outcome schema 3)


def _per_round(rounds: tuple[tuple[float, ...], ...]) -> tuple[tuple[float, ...], ...]:
    """One number per round, the round's median (what the statistics use)."""
    import numpy as np

    return tuple((float(np.median(r)),) for r in rounds if len(r) > 0)


def reduced(run: RunResult) -> RunResult:
    """``run`` as a shard carries it: round medians, no compiler records or logs."""

    def case(c: CaseResult) -> CaseResult:
        rounds = _per_round(c.rounds)
        return replace(
            c,
            rounds=rounds,
            host_rounds=_per_round(c.host_rounds),
            # Each round's GPU stays beside its round (dropped if an empty round went).
            round_gpus=c.round_gpus if len(rounds) == len(c.rounds) else (),
            resources=(),
            worker_output="",
            calls_per_sample=(),
        )

    cases = tuple(case(c) for c in run.cases)
    rounds = tuple(replace(r, gpu_state={}) for r in run.rounds)
    return replace(run, cases=cases, rounds=rounds)


def evidence(
    comparison: Comparison,
    positions: Mapping[str, int],
    *,
    paired: bool,
    use_fingerprints: bool,
) -> dict[str, Any]:
    """What ``merge`` needs of one shard's comparison. ``positions``: each case's
    index in the whole suite (the union is decided in the suite's order); ``paired``
    and ``use_fingerprints``: as the shard's comparison was decided."""
    return {
        "version": EVIDENCE_VERSION,
        "paired": paired,
        "use_fingerprints": use_fingerprints,
        "alpha": comparison.alpha,
        "plan": dataclasses.asdict(comparison.plan),
        "positions": {c.case_id: positions.get(c.case_id, 0) for c in comparison.cases},
        "suite_cases": len(positions),  # the whole suite's: the union must hold them all
        "baseline": results.to_json(reduced(comparison.baseline)),
        "candidate": results.to_json(reduced(comparison.candidate)),
    }


@dataclass(frozen=True)
class _Shard:
    info: ShardInfo
    outcome: Outcome
    where: str
    baseline: RunResult
    candidate: RunResult
    plan: TimingPlan
    alpha: float
    paired: bool
    use_fingerprints: bool
    positions: dict[str, int]
    suite_cases: int


def _read(outcome: Outcome, where: str) -> _Shard:
    info = outcome.shard
    if info is None:
        raise BadInput(f"{where}: shard: not a shard's outcome (no shard record)")
    ev = info.evidence
    if ev is None:
        raise InfraError(f"{where}: shard {info.label} measured nothing: {outcome.headline}")
    if ev.get("version") != EVIDENCE_VERSION:
        raise BadInput(
            f"{where}: shard.evidence.version: {shown(ev.get('version'))} is not "
            f"{EVIDENCE_VERSION}, the version this guard reads"
        )
    try:
        raw_plan = ev.get("plan")
        if not isinstance(raw_plan, Mapping):
            raise BadInput(f"{where}: shard.evidence.plan: not a timing plan")
        # The bounds a suite's timing plan is held to, alpha among them.
        plan = timing_plan(dict(raw_plan), where, "shard.evidence.plan")
        alpha = ev.get("alpha")
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)):
            raise BadInput(f"{where}: shard.evidence.alpha: not a number")
        try:
            stats.check_alpha(float(alpha))
        except ValueError as exc:
            raise BadInput(f"{where}: shard.evidence.alpha: {exc}") from None
        positions = ev.get("positions")
        if not isinstance(positions, Mapping) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in positions.values()
        ):
            raise BadInput(f"{where}: shard.evidence.positions: not case -> index")
        total = ev.get("suite_cases")  # required: without it a missing share cannot show
        if not isinstance(total, int) or isinstance(total, bool) or total < 1:
            raise BadInput(f"{where}: shard.evidence.suite_cases: not a positive integer")
        base = results.from_json(ev.get("baseline"), f"{where}: shard.evidence.baseline")
        cand = results.from_json(ev.get("candidate"), f"{where}: shard.evidence.candidate")
    except TypeError as exc:
        raise BadInput(f"{where}: shard.evidence: {exc}") from None
    return _Shard(
        info,
        outcome,
        where,
        base,
        cand,
        plan,
        float(alpha),
        bool(ev.get("paired", True)),
        bool(ev.get("use_fingerprints", True)),
        dict(positions),
        total,
    )


@dataclass(frozen=True)
class Merged:
    """The union of the shards, decided once; the context every shard shares."""

    comparison: Comparison
    context: Outcome  # the first shard's outcome (commits, PR, GPU, policy changes)
    shards: int
    profiles: tuple[CaseProfile, ...] = ()  # every shard's, in shard order


def check_together(outcomes: Sequence[tuple[Outcome, str]]) -> list[ShardInfo]:
    """The shard records of ``outcomes`` (outcome, file name) when they are the shards
    of one check: BadInput naming the field that differs, or a shard given twice;
    InfraError naming the shards that are missing."""
    if not outcomes:
        raise BadInput("guard merge: no outcome files given")
    infos = []
    for outcome, where in outcomes:
        if outcome.shard is None:
            raise BadInput(f"{where}: shard: not a shard's outcome (no shard record)")
        infos.append(outcome.shard)
    for info, (outcome, where) in zip(infos, outcomes, strict=True):
        if info.evidence is None:  # it failed before it measured
            why = f"{where}: shard {info.label} measured nothing: {outcome.headline}"
            if outcome.verdict is CheckVerdict.BAD_INPUT:
                raise BadInput(why)
            raise InfraError(why)
    first, first_where = infos[0], outcomes[0][1]
    for info, (_, where) in zip(infos[1:], outcomes[1:], strict=True):
        for key in ("count", "base", "head", "suite_name", "suite_hash"):
            ours, theirs = getattr(info, key), getattr(first, key)
            if ours != theirs:
                raise BadInput(
                    f"{where}: shard.{key}: {shown(ours)} differs from {shown(theirs)} "
                    f"of {first_where}; these are not shards of one check"
                )
    seen: dict[int, str] = {}
    for info, (_, where) in zip(infos, outcomes, strict=True):
        if info.index in seen:
            raise BadInput(f"{where}: shard.index: shard {info.label} is also {seen[info.index]}")
        seen[info.index] = where
    missing = [i for i in range(1, first.count + 1) if i not in seen]
    if missing:
        names = ", ".join(f"{i}/{first.count}" for i in missing)
        raise InfraError(
            f"shard(s) {names} missing: the check is incomplete (a runner that never "
            "reported is an infrastructure failure, not a pass)"
        )
    return infos


def merge(outcomes: Sequence[tuple[Outcome, str]]) -> Merged:
    """Decide the union of the shards' cases at the family level (module doc)."""
    check_together(outcomes)
    shards = sorted((_read(o, w) for o, w in outcomes), key=lambda s: s.info.index)
    first = shards[0]
    for s in shards[1:]:
        for key, ours, theirs in (
            ("evidence.candidate.environment.gpu_slug", s.candidate.environment.gpu_slug,
             first.candidate.environment.gpu_slug),
            ("evidence.plan", s.plan, first.plan),
            ("evidence.alpha", s.alpha, first.alpha),
            ("evidence.paired", s.paired, first.paired),
            ("evidence.use_fingerprints", s.use_fingerprints, first.use_fingerprints),
            ("evidence.suite_cases", s.suite_cases, first.suite_cases),
        ):  # fmt: skip
            if ours != theirs:
                raise BadInput(
                    f"{s.where}: shard.{key}: {shown(ours)} differs from {shown(theirs)} "
                    f"of {first.where}"
                )
    position: dict[str, int] = {}
    base_cases: list[CaseResult] = []
    cand_cases: list[CaseResult] = []
    for s in shards:
        for c in s.candidate.cases:
            if c.id in position:
                raise BadInput(f"{s.where}: shard.case_ids: {c.id} is in two shards")
            position[c.id] = s.positions.get(c.id, 0)
            cand_cases.append(c)
        base_cases.extend(s.baseline.cases)
    total = first.suite_cases
    if len(position) != total:  # the splits disagreed, or a share is missing
        raise InfraError(
            f"the shards hold {len(position)} of the suite's {total} cases: they split it "
            "differently (another baseline on some runner?); the check is incomplete"
        )
    order = {cid: (pos, cid) for cid, pos in position.items()}
    cand_cases.sort(key=lambda c: order[c.id])
    base_cases.sort(key=lambda c: order.get(c.id, (1 << 30, c.id)))
    rounds: list[RoundInfo] = [r for s in shards for r in s.candidate.rounds]
    base_rounds: list[RoundInfo] = [r for s in shards for r in s.baseline.rounds]
    baseline = replace(
        first.baseline,
        cases=tuple(base_cases),
        rounds=tuple(base_rounds),
        label=f"{first.info.base[:12]} ({len(shards)} shards)",
    )
    candidate = replace(
        first.candidate,
        cases=tuple(cand_cases),
        rounds=tuple(rounds),
        label=f"{first.info.head[:12]} ({len(shards)} shards)",
    )
    comparison = compare_runs(
        baseline,
        candidate,
        alpha=first.alpha,
        plan=first.plan,
        paired=first.paired,
        use_fingerprints=first.use_fingerprints,
    )
    # What each shard knew beside the timing: compiler-resource changes per case and
    # its notes (each once).
    resource_notes = {c.case_id: c.notes for s in shards for c in s.outcome.cases}
    cases = tuple(
        replace(c, resource_changes=tuple(resource_notes.get(c.case_id, ())))
        for c in comparison.cases
    )
    notes = list(comparison.notes)
    for s in shards:
        for note in s.outcome.notes:
            # Not a shard's own round phases: the union's cover every shard's rounds.
            skip = ("stored baseline", PHASES_NOTE)
            if note not in notes and not note.startswith(skip):
                notes.append(note)
    notes.append(
        f"{len(shards)} shards merged: {len(cand_cases)} cases decided together at the "
        f"family false-alarm rate {first.alpha:g}"
    )
    comparison = replace(comparison, cases=cases, notes=tuple(notes))
    profiles = tuple(p for s in shards for p in s.outcome.profiles)[:MAX_PROFILES]
    return Merged(comparison, first.outcome, len(shards), profiles)


def merged_outcome(merged: Merged) -> Outcome:
    """The merged check's outcome: the union's verdict, with the shards' context."""
    ctx = merged.context
    return merged.comparison.outcome(
        policy_changes=ctx.policy_changes,
        baseline_changes=ctx.baseline_changes,
        gpu=ctx.gpu,
        tested_commit=ctx.tested_commit,
        judge_commit=ctx.judge_commit,
        head_sha=ctx.head_sha,
        pr_number=ctx.pr_number,
        run_url=ctx.run_url,
        profiles=merged.profiles,
    )
