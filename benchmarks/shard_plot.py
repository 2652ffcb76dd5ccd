"""The scaling plot of docs/CI.md from benchmarks/shard_proof.sh's summary JSON.

    python3 benchmarks/shard_plot.py gpu-out/shard-proof.json docs/data/shard-scaling.svg

One group of bars per measured suite (default, full), one bar per GPU count: the
check's wall time, with the speed-up over one GPU and the ideal (1/N) marked. Plain
SVG, standard library only (the GPU machine need not have matplotlib).
"""

from __future__ import annotations

import json
import sys
from html import escape
from pathlib import Path

GROUPS = (("a", "default suite (56 cases, 6 rounds)"), ("b", "full suite (timed subset)"))


def series(summary: dict[str, object]) -> list[tuple[str, list[tuple[int, float]]]]:
    """[(group label, [(gpus, wall seconds), ...]), ...] from the summary's records."""
    records = summary.get("records", [])
    assert isinstance(records, list)
    out = []
    for prefix, label in GROUPS:
        points = sorted(
            (int(r["gpus"]), float(r["wall_s"]))
            for r in records
            if str(r.get("phase", "")).startswith(f"{prefix}-")
            and "plant" not in r["phase"]
            and not r.get("cut")  # stopped by its time limit: not the check's wall time
        )
        if points:
            out.append((label, points))
    return out


def svg(groups: list[tuple[str, list[tuple[int, float]]]]) -> str:
    width, height, left, bottom, top = 640, 320, 60, 60, 30
    bars = sum(len(p) for _, p in groups) + len(groups)
    step = (width - left - 20) / max(bars, 1)
    peak = max((t for _, p in groups for _, t in p), default=1.0)
    scale = (height - bottom - top) / peak
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        'font-family="sans-serif" font-size="12">',
        f'<text x="{left}" y="18">perf-guard check wall time by GPU count (lower is better)</text>',
        f'<line x1="{left}" y1="{height - bottom}" x2="{width - 10}" y2="{height - bottom}" '
        'stroke="#333"/>',
    ]
    x = left + step / 2
    for label, points in groups:
        one = dict(points).get(1)
        x0 = x
        for gpus, wall in points:
            h = wall * scale
            y = height - bottom - h
            parts.append(
                f'<rect x="{x:.1f}" y="{y:.1f}" width="{step * 0.8:.1f}" height="{h:.1f}" '
                f'fill="{"#4477aa" if gpus == 1 else "#66ccee"}"/>'
            )
            speed = f" ({one / wall:.2f}x)" if one and gpus != 1 else ""
            parts.append(
                f'<text x="{x + step * 0.4:.1f}" y="{y - 4:.1f}" text-anchor="middle">'
                f"{wall:.0f} s{escape(speed)}</text>"
            )
            if one and gpus > 1:  # the ideal: 1/N of one GPU's time
                yi = height - bottom - one / gpus * scale
                parts.append(
                    f'<line x1="{x:.1f}" y1="{yi:.1f}" x2="{x + step * 0.8:.1f}" y2="{yi:.1f}" '
                    'stroke="#aa3377" stroke-dasharray="4 3"/>'
                )
            parts.append(
                f'<text x="{x + step * 0.4:.1f}" y="{height - bottom + 14}" '
                f'text-anchor="middle">{gpus} GPU{"s" if gpus > 1 else ""}</text>'
            )
            x += step
        parts.append(
            f'<text x="{(x0 + x) / 2:.1f}" y="{height - bottom + 32}" text-anchor="middle">'
            f"{escape(label)}</text>"
        )
        x += step
    parts.append(
        f'<text x="{left}" y="{height - 8}" fill="#aa3377">dashed: ideal (1/N of one GPU)</text>'
    )
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    summary = json.loads(Path(argv[0]).read_text())
    groups = series(summary)
    if not groups:
        print("shard_plot: no wall times in the summary", file=sys.stderr)
        return 2
    Path(argv[1]).write_text(svg(groups))
    print(f"shard_plot: wrote {argv[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
