"""Nsight Compute: at which SASS instructions each attention kernel's warps wait.

    PYTHONPATH=. python3 benchmarks/ncu_stalls.py --out DIR --shape 1,16,8192,128,causal,bfloat16
        --arms fa3 cuda_flash

Profiles one call of each arm after warm-up (``ncu_pipes.py``'s target: the arms of
``side_by_side.py``) with ncu's warp-state sampling per instruction (the SourceCounters
section), then exports each launch's SASS with its samples (``--page source``). Per
launch it reports the samples by opcode (``HGMMA``, ``BAR`` for the named barriers,
``SYNCS`` for the mbarrier waits of the K/V ring, ``WARPGROUP`` for the wgmma waits,
``MUFU``...), the same within its step loop (the smallest loop that holds half the
samples: all and those of a stalled warp, with the instruction count), and the
instructions with the most, so that two kernels with the same step can be compared
where their cycles differ: in the step, at the turns, the ring, the tile ends.
Writes DIR/ncu-stalls.md, the report (DIR/stalls.ncu-rep) and the source page's CSV
(DIR/ncu-stalls-sass.csv). A profiled call's order in the target's log
(DIR/ncu-stalls.log) is its launches' order. DIR/ncu-stalls-loops.jsonl.gz holds each
step loop's instructions, one row each: ``kernel`` (the arm, or ``launch N`` where the
launches do not pair with the calls), ``shape`` (B, H, S, D, causal, dtype), ``offset``
(bytes from the kernel's first instruction), ``sass``, ``samples``, ``not_issued`` (of
a stalled warp) and ``executed`` (warp instructions).
"""

from __future__ import annotations

import argparse
import ast
import csv
import gzip
import io
import json
import re
import shutil
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from ncu_gluon import parse_shape  # noqa: E402  (benchmarks/ is not a package)
from ncu_pipes import profile_command, profiled_calls  # noqa: E402

SAMPLES = "Warp Stall Sampling (All Samples)"
NOT_ISSUED = "Warp Stall Sampling (Not-issued Samples)"  # the warp stalled there
TOP = 25


def opcode(source: str) -> str:
    """The opcode's first part of one SASS line ("@!P0 SYNCS.ARRIVE..." -> "SYNCS")."""
    words = source.split()
    if words and words[0].startswith("@"):
        words = words[1:]
    return words[0].split(".")[0] if words else "?"


@dataclass(frozen=True)
class Launch:
    """One profiled kernel launch of ncu's source page: its name and SASS rows."""

    kernel: str
    rows: list[dict[str, str]]


def launches_of(text: str) -> list[Launch]:
    """ncu --page source --csv: per launch a "Kernel Name" line, a header row and one row
    per instruction (ncu's own log lines are skipped)."""
    found: list[tuple[str, list[str]]] = []
    kernel = "?"
    for line in text.splitlines():
        if line.startswith('"Kernel Name"'):
            kernel = next(csv.reader([line]))[1]
        elif line.startswith('"Address"'):
            found.append((kernel, [line]))
        elif found and line.startswith('"'):
            found[-1][1].append(line)
    return [Launch(k, list(csv.DictReader(io.StringIO("\n".join(lines))))) for k, lines in found]


def samples(row: dict[str, str], column: str = SAMPLES) -> int:
    return int(float(row.get(column, "0").replace(",", "") or "0"))


def summary(rows: list[dict[str, str]]) -> tuple[int, Counter[str], list[tuple[int, str, str]]]:
    """Total samples, samples by opcode, and the instructions with the most."""
    by_op: Counter[str] = Counter()
    per_instruction = []
    for row in rows:
        n = samples(row)
        source = " ".join(row.get("Source", "").split())
        by_op[opcode(source)] += n
        per_instruction.append((n, row.get("Address", "?"), source))
    per_instruction.sort(key=lambda x: -x[0])
    return sum(by_op.values()), by_op, per_instruction[:TOP]


def hot_loop(rows: list[dict[str, str]]) -> list[dict[str, str]]:
    """The rows of the smallest loop (a branch back to an earlier address) that holds at
    least half the launch's samples: an attention kernel's step, where one dominates;
    empty where no loop does."""
    total = sum(samples(row) for row in rows)
    address = [int(row["Address"], 16) for row in rows]
    best: list[dict[str, str]] = []
    for row, end in zip(rows, address, strict=True):
        branch = re.search(r"\bBRA\s+0x([0-9a-fA-F]+)", row.get("Source", ""))
        if branch is None or int(branch[1], 16) >= end:
            continue
        start = int(branch[1], 16)
        body = [r for r, a in zip(rows, address, strict=True) if start <= a <= end]
        if 2 * sum(samples(r) for r in body) >= total and (not best or len(body) < len(best)):
            best = body
    return best


def loop_table(body: list[dict[str, str]], total: int) -> list[str]:
    """A loop's samples by opcode: all of them and those of a stalled warp."""
    by_op: Counter[str] = Counter()
    stalled: Counter[str] = Counter()
    for row in body:
        op = opcode(row.get("Source", ""))
        by_op[op] += samples(row)
        stalled[op] += samples(row, NOT_ISSUED)
    first, last = body[0]["Address"], body[-1]["Address"]
    in_loop = sum(by_op.values())
    out = [f"\nThe step loop {first}-{last}: {len(body)} instructions, {in_loop} samples "
           f"({100 * in_loop / total:.1f}%), {sum(stalled.values())} of a stalled warp\n",
           "| opcode | samples | stalled | instructions |\n|---|---:|---:|---:|"]  # fmt: skip
    count = Counter(opcode(row.get("Source", "")) for row in body)
    for op, n in by_op.most_common(16):
        out.append(f"| {op} | {n} | {stalled[op]} | {count[op]} |")
    return out


def markdown(launches: list[Launch]) -> str:
    """Per launch with samples (a fill kernel FA3 launches first has none): its samples by
    opcode and its hottest instructions."""
    out = []
    for i, launch in enumerate(launches):
        total, by_op, top = summary(launch.rows)
        if total == 0:
            continue
        out.append(f"## launch {i}: {launch.kernel[:90]}\n")
        out.append(f"{total} samples, {len(launch.rows)} instructions\n")
        out.append("| opcode | samples | % |\n|---|---:|---:|")
        for op, n in by_op.most_common(14):
            out.append(f"| {op} | {n} | {100 * n / total:.1f} |")
        body = hot_loop(launch.rows)
        if body:
            out.extend(loop_table(body, total))
        out.append("\n| address | samples | % | instruction |\n|---|---:|---:|---|")
        for n, address, source in top:
            out.append(f"| {address} | {n} | {100 * n / total:.1f} | `{source[:70]}` |")
        out.append("")
    return "\n".join(out)


def step_loop_rows(launches: list[Launch], calls: list[str]) -> list[dict[str, object]]:
    """Every step loop's instructions, labelled with the profiled call they belong to.

    ``calls`` are the target's profiled calls ("NAME (shape)", ``profiled_calls``). torch's own
    launches (FA3's wrapper fills its output first) are not calls. Where the rest do not
    pair with the calls one to one, a launch is named by its index.
    """
    kernels = [launch for launch in launches if not launch.kernel.startswith("void at::native")]
    parsed = [call.split(" ", 1) for call in calls]
    paired = len(kernels) == len(parsed)
    out: list[dict[str, object]] = []
    for i, launch in enumerate(kernels):
        name, shape = parsed[i] if paired else (f"launch {launches.index(launch)}", "")
        body = hot_loop(launch.rows)
        start = int(launch.rows[0]["Address"], 16) if launch.rows else 0
        for row in body:
            out.append({
                "kernel": name,
                "shape": list(ast.literal_eval(shape)) if shape else None,
                "offset": int(row["Address"], 16) - start,
                "sass": " ".join(row.get("Source", "").split()),
                "samples": samples(row),
                "not_issued": samples(row, NOT_ISSUED),
                "executed": samples(row, "Instructions Executed"),
            })  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--shape", type=parse_shape, action="append", required=True)
    parser.add_argument("--arms", nargs="+", required=True, help="side_by_side.py's arms")
    args = parser.parse_args(argv)
    ncu = shutil.which("ncu")
    if ncu is None:
        print("ncu not on PATH: nothing profiled", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    report = args.out / "stalls"
    sections = ["--section", "SourceCounters", "--section", "WarpStateStats"]
    cmd = profile_command(ncu, [*sections, "--import-source", "no", "-f", "-o", str(report)],
                          args.shape, args.arms)  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=500)
    (args.out / "ncu-stalls.log").write_text(proc.stdout + proc.stderr)
    export = subprocess.run(
        [ncu, "-i", f"{report}.ncu-rep", "--page", "source", "--csv", "--print-source", "sass"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    (args.out / "ncu-stalls-sass.csv").write_text(export.stdout)
    launches = launches_of(export.stdout)
    text = markdown(launches)
    if not text:
        text = "no samples:\n" + proc.stdout[-2000:] + proc.stderr[-2000:] + export.stderr[-2000:]
    (args.out / "ncu-stalls.md").write_text(text + "\n")
    rows = step_loop_rows(launches, profiled_calls(proc.stdout))
    with gzip.open(args.out / "ncu-stalls-loops.jsonl.gz", "wt") as loops:
        loops.writelines(json.dumps(row) + "\n" for row in rows)
    print(text[:10000])
    return 0 if launches else 1


if __name__ == "__main__":
    sys.exit(main())
