"""Nsight Compute on a confirmed regression: one launch of one case, base and head.

When a gated case is confirmed as a regression on a GPU and ``ncu`` is on the runner,
``profile_case`` profiles that case once in each tree and returns the two profiles side by
side (``ProfileComparison``), for the job summary (``profile_markdown``) and the HTML
report (``profile_rows``). It answers "what changed inside the kernel?" (more registers,
lower occupancy, a new dominant stall), not "how much slower?": that is the timing's job,
and ncu's replay of a single launch with unlocked clocks is no timing.

What runs, per tree::

    ncu --nvtx --nvtx-include "guard-profile/" --clock-control none
        --launch-count 10 --metrics <METRICS + STALL_METRICS> --csv --page raw
        --target-processes all
        python -m guard.measure.profile_target --kernels-root TREE --case-json '<case>' --seed N

``guard.measure.profile_target`` warms the kernel up and makes one call inside the NVTX push/pop
range ``guard-profile`` (the trailing ``/`` in the filter selects a push/pop range; without
it ncu matches start/end ranges only and profiles nothing). ``--clock-control none``
leaves the GPU clocks as they are (ncu's default locks them to base), so the profiled
launch runs under the clocks the timing saw and nothing is left changed for the next job.

Cost: at most ``budget_s`` of wall time for both ncu runs together; the base run gets half,
the head run what is left. Each run leads its own process group, SIGKILLed (ncu, python,
whatever the kernel started) when its time is up or the guard leaves by an exception.

Never raises for the expected failures: ``skipped_reason`` says why instead (ncu not on
PATH, counters not readable by this user, budget spent, ncu or the case failed, nothing
profiled).

The metric names were checked against ``ncu --query-metrics --chip gh100`` of Nsight
Compute 2025.3.1 and an ncu run of a PyTorch SDPA call on an H100 (``--page raw --csv``):
``sm__pipe_tensor_op_hmma_cycles_active`` counts HGMMA (wgmma) too on sm_90 (its
description: "HMMA/HFMA2.MMA/HGMMA/QGMMA ops"; 61% on cuDNN's wgmma flash kernel);
there is no ``..._gmma_cycles_active`` pipe metric on gh100. Stalls are the
``smsp__warp_issue_stalled_<reason>_per_warp_active.pct`` family (share of active warps
stalled for that reason per cycle, in %); ``gmma`` exists on Hopper only, and ncu leaves
out of its CSV a requested metric the chip lacks (seen for the gmma pipe metric), which
shows here as "—".
"""

from __future__ import annotations

import csv
import json
import math
import re
import shutil
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from guard.base.errors import cut
from guard.base.text import md_code, md_table, md_text
from guard.measure.proc import GroupRun, child_env, run_group, strays_text
from guard.measure.profile_target import ERROR_PREFIX, NVTX_RANGE
from guard.store.suite import Case

MAX_KERNELS = 10  # profiled launches per call at most (--launch-count): ~14 replay passes each
OUTPUT_LIMIT = 8 << 20  # bytes of ncu's stdout read back (the CSV comes last)
STDERR_LIMIT = 64 << 10  # bytes of the child's stderr kept for the error line
MAX_NAME_CHARS = 4096  # a kernel's name is cut here (demangled templates can run long)
TOP_STALLS = 3
COUNTERS_HINT = (
    "the GPU's performance counters are not readable by this user (ERR_NVGPUCTRPERM): "
    "the runner needs `options nvidia NVreg_RestrictProfilingToAdminUsers=0` in "
    "/etc/modprobe.d (then a reboot), or to run the guard as root"
)


@dataclass(frozen=True)
class Metric:
    """One ncu metric shown in the table. ``kind`` decides units and the change column:
    ``time`` (ns; change as a ratio), ``pct`` (%; change in percentage points),
    ``count`` (change as a difference)."""

    name: str
    label: str
    kind: str


METRICS: tuple[Metric, ...] = (
    Metric("gpu__time_duration.sum", "duration", "time"),
    Metric("sm__throughput.avg.pct_of_peak_sustained_elapsed", "SM throughput", "pct"),
    Metric(
        "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
        "memory throughput",
        "pct",
    ),
    Metric("dram__throughput.avg.pct_of_peak_sustained_elapsed", "DRAM throughput", "pct"),
    Metric("sm__warps_active.avg.pct_of_peak_sustained_active", "achieved occupancy", "pct"),
    Metric(
        "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
        "tensor pipe active",
        "pct",
    ),
    Metric("sm__inst_issued.avg.pct_of_peak_sustained_active", "issue slots busy", "pct"),
    Metric("lts__t_sector_hit_rate.pct", "L2 hit rate", "pct"),
    Metric("launch__registers_per_thread", "registers per thread", "count"),
)
DURATION = METRICS[0].name

STALL_REASONS: tuple[str, ...] = (
    "long_scoreboard",  # waiting on global/local memory (L1TEX)
    "short_scoreboard",  # waiting on shared memory / MIO
    "barrier",  # __syncthreads / bar.sync
    "wait",  # fixed-latency dependency
    "mio_throttle",
    "math_pipe_throttle",
    "not_selected",
    "lg_throttle",
    "no_instruction",
    "dispatch_stall",
    "membar",
    "gmma",  # Hopper: waiting on a warpgroup MMA (wgmma.wait_group)
)


def stall_metric(reason: str) -> str:
    return f"smsp__warp_issue_stalled_{reason}_per_warp_active.pct"


STALL_METRICS = {stall_metric(r): r for r in STALL_REASONS}
ALL_METRICS: tuple[str, ...] = (*(m.name for m in METRICS), *STALL_METRICS)


@dataclass(frozen=True)
class KernelProfile:
    """One arm's profiled call: the kernel shown (the longest launch of the call), its
    metrics by ncu name (base units: ns, %, registers; a metric ncu did not report is
    absent), its top stall reasons (reason, % of active warps) largest first, and every
    kernel the call launched as (short name, duration in ns), in launch order."""

    kernel_name: str
    metrics: Mapping[str, float]
    stalls: tuple[tuple[str, float], ...]
    kernels: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True)
class ProfileComparison:
    """``profile_case``'s answer: both profiles, or why there are none."""

    case_id: str
    base: KernelProfile | None
    head: KernelProfile | None
    skipped_reason: str = ""

    @property
    def skipped(self) -> bool:
        return bool(self.skipped_reason)


# ------------------------------------------------------------------------ parsing

_TIME_UNITS = {
    "ns": 1.0, "nsecond": 1.0, "us": 1e3, "usecond": 1e3, "µs": 1e3,
    "ms": 1e6, "msecond": 1e6, "s": 1e9, "second": 1e9,
}  # fmt: skip
_NUMBER = re.compile(r"[-+]?(\d{1,3}(,\d{3})+|\d+)(\.\d*)?([eE][-+]?\d+)?")


@dataclass(frozen=True)
class RawKernel:
    """One row of ``ncu --csv --page raw``: a kernel launch and its numeric metrics."""

    name: str
    values: Mapping[str, float] = field(default_factory=dict)


def parse_number(text: str) -> float | None:
    """A metric cell as a float: thousands separators dropped; "n/a", "", text: None."""
    text = text.strip()
    if not _NUMBER.fullmatch(text):
        return None
    value = float(text.replace(",", ""))
    return value if math.isfinite(value) else None


def parse_raw_csv(text: str) -> list[RawKernel]:
    """The kernel rows of ``ncu --csv --page raw`` output, in launch order.

    The output holds ncu's own ``==PROF==``/``==WARNING==`` lines and whatever the
    profiled program printed before the CSV; the CSV is a header row (starting
    ``"ID","Process ID"``), a units row, and one row per profiled kernel. The last
    header in the text starts the table. Cells are unit-scaled to base units for time
    (ns), thousands separators are dropped, and "n/a" or text cells are left out.
    Names are cut at ``MAX_NAME_CHARS``; no text makes it raise.
    """
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith('"ID",')]
    if not starts:
        return []
    rows = _csv_rows(lines[starts[-1] :])
    if not rows:
        return []
    header = rows[0]
    try:
        name_col = header.index("Kernel Name")
    except ValueError:
        return []
    units = rows[1] if len(rows) > 1 and rows[1][:1] == [""] else [""] * len(header)
    scale = [_TIME_UNITS.get(u.strip(), 1.0) for u in units] + [1.0] * len(header)
    out = []
    for row in rows[1:]:
        if len(row) != len(header) or not row[0].strip().isdigit():
            continue  # the units row, a stray line
        values = {}
        for col, (metric, cell) in enumerate(zip(header, row, strict=True)):
            if "__" not in metric or col == name_col:
                continue
            number = parse_number(cell)
            if number is not None:
                values[metric] = number * scale[col]
        out.append(RawKernel(row[name_col][:MAX_NAME_CHARS], values))
    return out


def _csv_rows(lines: Sequence[str]) -> list[list[str]]:
    """The rows of CSV lines, a row csv refuses left out. A kernel's name can be longer
    than csv's field limit (128 KB): the limit is raised to the most ncu's output read
    back can hold while parsing (and put back after), so that such a row is kept."""
    old = csv.field_size_limit()
    csv.field_size_limit(max(old, OUTPUT_LIMIT))
    try:
        rows, reader = [], csv.reader(lines)
        while True:
            try:
                rows.append(next(reader))
            except StopIteration:
                return rows
            except csv.Error:
                continue  # the reader goes on with the next line
    finally:
        csv.field_size_limit(old)


def short_kernel_name(name: str, limit: int = 80) -> str:
    """A demangled kernel name without ``void``, template arguments and parameters:
    ``void at::native::foo<float, 4>(int, T2)`` -> ``at::native::foo``."""
    text = name.strip().removeprefix("void ")
    text = text.replace("(anonymous namespace)", "\0").replace("<unnamed>", "\0")
    depth, out = 0, []
    for ch in text:
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(0, depth - 1)
        elif ch == "(" and depth == 0:
            break  # the parameter list
        elif depth == 0:
            out.append(ch)
    short = "".join(out).replace("\0", "(anonymous)").strip() or name.strip()
    return short if len(short) <= limit else short[: limit - 1] + "…"


def kernel_profile(rows: Sequence[RawKernel]) -> KernelProfile | None:
    """The profile of one call from its kernels: the longest launch's metrics (the first
    launch when no duration was reported), its top stalls, and every launch's duration."""
    if not rows:
        return None
    main = max(rows, key=lambda r: r.values.get(DURATION, -1.0))
    metrics = {m.name: main.values[m.name] for m in METRICS if m.name in main.values}
    stalls = sorted(
        ((reason, main.values[name]) for name, reason in STALL_METRICS.items()
         if main.values.get(name, 0.0) > 0),
        key=lambda s: (-s[1], s[0]),
    )  # fmt: skip
    return KernelProfile(
        kernel_name=short_kernel_name(main.name),
        metrics=metrics,
        stalls=tuple(stalls[:TOP_STALLS]),
        kernels=tuple((short_kernel_name(r.name), r.values.get(DURATION, math.nan)) for r in rows),
    )


# ------------------------------------------------------------------------ running


def ncu_command(ncu: str, case: Case, tree: str | Path, seed: int) -> list[str]:
    """The ncu command line that profiles ``case`` in ``tree`` (one call, after warm-up)."""
    return [
        ncu,
        "--nvtx",
        "--nvtx-include",
        f"{NVTX_RANGE}/",  # "/": a push/pop range (torch.cuda.nvtx.range_push)
        "--clock-control",
        "none",
        "--launch-count",
        str(MAX_KERNELS),
        "--metrics",
        ",".join(ALL_METRICS),
        "--csv",
        "--page",
        "raw",
        "--target-processes",
        "all",
        sys.executable,
        "-m",
        "guard.measure.profile_target",
        "--kernels-root",
        str(Path(tree).resolve()),
        "--case-json",
        json.dumps(case.to_json(), sort_keys=True),
        "--seed",
        str(seed),
    ]


def _error_line(run: GroupRun) -> str:
    """The first line that says why ncu (or the profiled case) failed."""
    lines = [line.strip() for line in (run.stdout + "\n" + run.stderr).splitlines()]
    for line in lines:  # the case's own error says more than ncu's "returned an error code"
        if line.startswith(ERROR_PREFIX):
            return line
    for line in lines:
        if line.startswith("==ERROR=="):
            return line.removeprefix("==ERROR==").strip()
    if any("No kernels were profiled" in line for line in lines):
        return f"no kernel was launched inside the NVTX range '{NVTX_RANGE}'"
    last = [line for line in run.stderr.splitlines() if line.strip()]
    if last:
        return last[-1].strip()
    return f"exit code {run.returncode} and no profiled kernel"


class _Skip(Exception):
    pass


# An arm's extra environment (its caches) and command prefix (its sandbox).
Confined = tuple[tuple[tuple[str, str], ...], tuple[str, ...]]


def _profile_arm(
    ncu: str,
    case: Case,
    tree: str | Path,
    seed: int,
    timeout_s: float,
    arm: str,
    budget_s: float,
    confined: Confined = ((), ()),
) -> KernelProfile:
    if timeout_s <= 0:
        raise _Skip(f"profiling budget spent before the {arm} run ({budget_s:g} s for both)")
    extra, wrapper = confined
    env = {**child_env(compiled=True), **dict(extra)}
    try:
        run = run_group(
            [*wrapper, *ncu_command(ncu, case, tree, seed)], timeout_s, env,
            stdout_limit=OUTPUT_LIMIT, stderr_limit=STDERR_LIMIT,
        )  # fmt: skip
    except OSError as exc:
        raise _Skip(f"cannot start ncu ({exc})") from None
    if run.returncode is None:
        raise _Skip(
            f"profiling budget spent: ncu on {arm} ran past {timeout_s:.3g} s "
            f"({budget_s:g} s for both arms) and was killed"
        )
    if run.strays:  # killed by run_group; a profile of such a run is not trusted
        raise _Skip(f"ncu on {arm} left {strays_text(run.strays)} running: killed")
    if "ERR_NVGPUCTRPERM" in run.stdout or "ERR_NVGPUCTRPERM" in run.stderr:
        raise _Skip(COUNTERS_HINT)
    profile = kernel_profile(parse_raw_csv(run.stdout))
    if profile is None:
        raise _Skip(f"ncu failed on {arm}: {cut(_error_line(run))}")
    return profile


def profile_case(
    case: Case,
    base_tree: str | Path,
    head_tree: str | Path,
    *,
    budget_s: float = 60.0,
    ncu: str | None = None,
    seed: int = 0,
    head_case: Case | None = None,
    confined: tuple[Confined, Confined] = (((), ()), ((), ())),
) -> ProfileComparison:
    """Profile one launch of ``case`` in ``base_tree`` and in ``head_tree`` under ncu.

    ``head_case``: the head arm runs this case instead (two kernels on one shape, e.g.
    SDPA as the base and a kernel of this tree as the head); the answer keeps ``case``'s id.
    ``confined``: each arm's variables and command prefix (its caches, its sandbox).

    ``ncu``: the executable; None looks for ``ncu`` on PATH. ``budget_s`` caps the wall
    time of both runs together (base: half of it; head: what is left). Never raises for
    a missing ncu, unreadable counters, a spent budget or a failing run: the answer's
    ``skipped_reason`` says why, and its profiles are None.
    """
    exe = ncu or shutil.which("ncu")
    if not exe:
        return ProfileComparison(case.id, None, None, "ncu (Nsight Compute) is not on PATH")
    start = time.monotonic()
    try:
        base = _profile_arm(exe, case, base_tree, seed, budget_s / 2, "base", budget_s, confined[0])
        left = budget_s - (time.monotonic() - start)
        head = _profile_arm(
            exe, head_case or case, head_tree, seed, left, "head", budget_s, confined[1]
        )
    except _Skip as skip:
        return ProfileComparison(case.id, None, None, str(skip))
    return ProfileComparison(case.id, base, head)


# ------------------------------------------------------------------------ rendering

PROFILE_HEADER = ["metric", "base", "head", "change"]


def format_value(kind: str, value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "—"
    if kind == "time":
        if value < 1e3:
            return f"{value:.0f} ns"
        if value < 1e6:
            return f"{value / 1e3:.1f} µs"
        return f"{value / 1e6:.3f} ms"
    if kind == "pct":
        return f"{value:.1f}%"
    return f"{value:.0f}"


def format_change(kind: str, base: float | None, head: float | None) -> str:
    if base is None or head is None or not (math.isfinite(base) and math.isfinite(head)):
        return "—"
    if kind == "time":
        return f"{(head / base - 1) * 100:+.1f}%" if base > 0 else "—"
    if kind == "pct":
        return f"{head - base:+.1f} pp"
    return f"{head - base:+.0f}"


def _stalls_text(profile: KernelProfile | None) -> str:
    if profile is None or not profile.stalls:
        return "—"
    return ", ".join(f"{reason.replace('_', ' ')} {value:.1f}%" for reason, value in profile.stalls)


def profile_rows(pc: ProfileComparison) -> list[list[str]]:
    """Rows under ``PROFILE_HEADER`` (metric, base, head, change), plain text for the
    HTML report to escape: the kernel, each metric, then the top stall reasons by rank.
    Skipped: one row ``["profile skipped", reason, "", ""]``."""
    if pc.skipped or pc.base is None or pc.head is None:
        return [["profile skipped", pc.skipped_reason or "no profile", "", ""]]
    base, head = pc.base, pc.head
    rows = [["kernel", base.kernel_name, head.kernel_name, ""]]
    for m in METRICS:
        b, h = base.metrics.get(m.name), head.metrics.get(m.name)
        rows.append([m.label, format_value(m.kind, b), format_value(m.kind, h),
                     format_change(m.kind, b, h)])  # fmt: skip
    for i in range(max(len(base.stalls), len(head.stalls))):
        cells = [
            f"{p.stalls[i][0].replace('_', ' ')} {p.stalls[i][1]:.1f}%"
            if i < len(p.stalls)
            else "—"
            for p in (base, head)
        ]
        rows.append([f"stall #{i + 1} (% of active warps)", *cells, ""])
    return rows


def _launches_note(arm: str, profile: KernelProfile, most: int = 4) -> str | None:
    """One line for a call that launched several kernels: how many, their total time,
    the longest few (the table shows the longest)."""
    if len(profile.kernels) <= 1:
        return None
    n = len(profile.kernels)
    total = sum(d for _, d in profile.kernels if math.isfinite(d))
    longest = sorted(profile.kernels, key=lambda k: -k[1] if math.isfinite(k[1]) else 0.0)
    listed = ", ".join(f"{md_code(name)} {format_value('time', d)}" for name, d in longest[:most])
    more = f" and {n - most} more" if n > most else ""
    capped = f" (ncu's limit of {MAX_KERNELS} launches: later ones not profiled)" if (
        n >= MAX_KERNELS
    ) else ""  # fmt: skip
    return (
        f"- {arm}: the call launched {n} kernels{capped}, {format_value('time', total)} "
        f"in all; longest: {listed}{more}. The table shows the longest."
    )


def profile_markdown(pc: ProfileComparison) -> str:
    """The comparison as Markdown: a metric | base | head | change table and the top
    stall reasons of each arm; one line when skipped. Every name is escaped."""
    title = f"**Nsight Compute** {md_code(pc.case_id)}"
    if pc.skipped or pc.base is None or pc.head is None:
        return f"{title}: skipped: {md_text(pc.skipped_reason or 'no profile')}\n"
    base, head = pc.base, pc.head
    rows = [r for r in profile_rows(pc) if not r[0].startswith("stall #")]
    lines = [
        f"{title}: one launch in each tree after warm-up, GPU clocks not locked "
        "(the shape of the profile, not a timing).",
        "",
        md_table(PROFILE_HEADER, rows),
        "",
        "Top stall reasons (% of active warps stalled per cycle):",
        f"- base: {md_text(_stalls_text(base))}",
        f"- head: {md_text(_stalls_text(head))}",
    ]
    notes = [n for n in (_launches_note("base", base), _launches_note("head", head)) if n]
    if notes:
        lines += ["", *notes]
    return "\n".join(lines) + "\n"
