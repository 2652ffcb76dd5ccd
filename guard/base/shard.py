"""Splitting a suite into shards balanced by time: pure, no I/O, deterministic.

A shard is a share of the suite's cases that one GPU (one process, or one CI runner)
measures in full: both arms of each of its cases, interleaved round by round, so a
pair never crosses GPUs. Shards are numbered from 1: ``--shard 1/4`` ... ``--shard 4/4``.

The split is greedy longest-processing-time first (Graham's LPT: within 4/3 of the
best makespan): the cases sorted by their expected cost, the costliest first, ties by
case id, each given to the shard with the least work so far (ties: the lowest index).
The same suite and the same weights give the same split on every machine, so each
runner of a CI matrix, and each GPU's process, computes its own share alone.

A case's cost is what one arm of it takes per round: ``samples_per_round`` samples,
each a replay of at least ``sample_target_s`` (a slower call is one sample), plus a
fixed part per case (its warm-up), times the rounds. The per-call time is the case's
time in this GPU's baseline. A case the baseline lacks is estimated from its work (for
attention, its FLOPs) at the seconds per unit of work of the known cases (their median),
or at ``DEFAULT_S_PER_WORK`` when none is known: the full suite's lengths run from 128
to 16384, so a split by count leaves one shard much longer than another. A case of no
known work gets the mean of the known costs.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

MAX_SHARDS = 64  # shards of one suite (GPUs of a host times runners of a kind)
# Seconds per FLOP with no case known: about 330 TFLOPS, an H100's attention forward.
DEFAULT_S_PER_WORK = 3e-15


@dataclass(frozen=True)
class ShardSpec:
    """Shard ``index`` (1-based) of ``count``."""

    index: int
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def parse_shard(text: str) -> ShardSpec:
    """``I/N`` with 1 <= I <= N <= MAX_SHARDS; ValueError saying what is wrong."""
    match = re.fullmatch(r"\s*([0-9]{1,4})\s*/\s*([0-9]{1,4})\s*", text or "")
    if not match:
        raise ValueError(f"{text!r} is not of the form I/N (shards count from 1, e.g. 1/4)")
    index, count = int(match.group(1)), int(match.group(2))
    if not 1 <= count <= MAX_SHARDS:
        raise ValueError(f"{text!r}: the shard count must lie in [1, {MAX_SHARDS}]")
    if not 1 <= index <= count:
        raise ValueError(f"{text!r}: shards count from 1, so I must lie in [1, {count}]")
    return ShardSpec(index, count)


def parse_gpus(text: str, available: int | None) -> tuple[str, ...]:
    """The GPUs of ``--gpus``: ``N`` (the first N), ``all``, or a list ``0,2,...``; as
    the ``CUDA_VISIBLE_DEVICES`` values of each worker. ``available``: the GPUs this
    host has (None: unknown, e.g. a CPU run, where only ``N`` is accepted).
    ValueError saying what is wrong."""
    value = (text or "").strip()
    if value == "all":
        if not available:
            raise ValueError("'all': no GPU found on this host")
        return tuple(str(i) for i in range(available))
    if re.fullmatch(r"[0-9]{1,3}", value):
        n = int(value)
        if not 1 <= n <= MAX_SHARDS:
            raise ValueError(f"{value!r}: give between 1 and {MAX_SHARDS} GPUs")
        if available is not None and n > available:
            raise ValueError(f"{value!r}: this host has {available} GPU(s)")
        return tuple(str(i) for i in range(n))
    if re.fullmatch(r"[0-9]{1,3}(,[0-9]{1,3})*", value):
        ids = value.split(",")
        if len(set(ids)) != len(ids):
            raise ValueError(f"{value!r}: a GPU is named twice")
        if len(ids) > MAX_SHARDS:
            raise ValueError(f"{value!r}: at most {MAX_SHARDS} GPUs")
        if available is None:
            raise ValueError(f"{value!r}: GPU indices need a GPU host; give a count")
        high = [i for i in ids if int(i) >= available]
        if high:
            raise ValueError(f"{value!r}: this host has GPUs 0..{available - 1}, not {high[0]}")
        return tuple(str(int(i)) for i in ids)
    raise ValueError(f"{value!r} is not N, 'all' or a list of GPU indices like 0,2")


def visible_gpus(indices: Sequence[str], visible: str | None) -> tuple[str, ...]:
    """``indices`` (counted among the GPUs this process sees) as the values a child's
    ``CUDA_VISIBLE_DEVICES`` must take: a runner confined to GPUs ``2,3`` that asks
    for 2 GPUs gets ``2`` and ``3``, not the host's ``0`` and ``1`` (another runner's).
    ``visible``: this process's ``CUDA_VISIBLE_DEVICES`` (None or empty: every GPU)."""
    if not visible or not visible.strip():
        return tuple(indices)
    seen = [v.strip() for v in visible.split(",") if v.strip()]
    out = []
    for index in indices:
        i = int(index)
        if i >= len(seen):
            raise ValueError(
                f"GPU {i} is not among CUDA_VISIBLE_DEVICES={visible!r} ({len(seen)} GPU(s))"
            )
        out.append(seen[i])
    return tuple(out)


def case_costs(
    case_ids: Sequence[str],
    per_call_s: Mapping[str, float | None],
    *,
    rounds: int,
    samples_per_round: int,
    sample_target_s: float,
    fixed_s: float = 0.0,
    work: Mapping[str, float] | None = None,
) -> dict[str, float]:
    """Expected seconds of one arm of each case over ``rounds`` rounds (module doc). A
    case without a known positive per-call time is estimated from its ``work`` (its
    FLOPs) at the median seconds per unit of work of every case ``per_call_s`` and
    ``work`` both know (in ``case_ids`` or not), or at
    ``DEFAULT_S_PER_WORK``; one without work either gets the mean of the costs so far
    (1.0 each when none is known: then the split is by count)."""
    work = work or {}

    def positive(x: float | None) -> float:
        """``x`` when a positive finite number, else 0."""
        return x if x is not None and 0.0 < x < float("inf") else 0.0

    def cost(t: float) -> float:
        return rounds * (samples_per_round * max(t, sample_target_s) + fixed_s)

    measured = {cid: t for cid, t0 in per_call_s.items() if (t := positive(t0))}
    # The rate from every measured case, in this suite or not (a baseline of the
    # default suite prices the full one).
    rates = sorted(t / w for cid, t in measured.items() if (w := positive(work.get(cid))))
    rate = rates[len(rates) // 2] if rates else DEFAULT_S_PER_WORK
    times = {cid: measured[cid] for cid in case_ids if cid in measured}
    for cid in case_ids:
        if cid not in times and (w := positive(work.get(cid))):
            times[cid] = w * rate
    known = {cid: cost(t) for cid, t in times.items()}
    fill = sum(known.values()) / len(known) if known else 1.0
    return {cid: known.get(cid, fill) for cid in case_ids}


def balance(
    case_ids: Sequence[str], costs: Mapping[str, float], count: int
) -> tuple[tuple[str, ...], ...]:
    """``count`` shards of ``case_ids`` (LPT; module doc), each in the order of
    ``case_ids``. A shard may be empty when there are fewer cases than shards."""
    if count < 1:
        raise ValueError("count must be at least 1")
    if len(set(case_ids)) != len(case_ids):
        raise ValueError("case ids must be unique")
    loads = [0.0] * count
    owner: dict[str, int] = {}
    for cid in sorted(case_ids, key=lambda c: (-costs.get(c, 0.0), c)):
        target = min(range(count), key=lambda i: (loads[i], i))
        owner[cid] = target
        loads[target] += costs.get(cid, 0.0)
    return tuple(tuple(c for c in case_ids if owner[c] == i) for i in range(count))


def shard_of(
    case_ids: Sequence[str], costs: Mapping[str, float], spec: ShardSpec
) -> tuple[str, ...]:
    """The cases of shard ``spec``."""
    return balance(case_ids, costs, spec.count)[spec.index - 1]


def makespan(costs: Mapping[str, float], shards: Sequence[Sequence[str]]) -> float:
    """The expected time of the slowest shard (what a sharded run waits for)."""
    return max((sum(costs[c] for c in s) for s in shards), default=0.0)
