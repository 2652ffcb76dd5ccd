"""Print the kernels-vs-SDPA Markdown table of a guard results or baseline file.

  python benchmarks/perf_table.py baselines/nvidia-h100-80gb-hbm3.json

Times are the guard's device time per call (median of CUDA-graph replays over all
rounds); ratio = ours / SDPA default (below 1: ours is faster).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from guard.store import results
from guard.store.suite import flops

OURS = ("flash_attention", "triton_flash", "gluon_flash", "cuda_flash")
SDPA = ("sdpa", "sdpa_cudnn", "sdpa_flash", "sdpa_efficient")


def _host(case) -> float | None:
    """Median host-inclusive time per eager call (what a Python caller pays)."""
    values = sorted(x for r in (case.host_rounds if case else ()) for x in r)
    return values[len(values) // 2] if values else None


def table(path: str) -> str:
    run = results.load(path)
    env = run.environment
    by = {(c.case.name, c.case.kernel): c for c in run.cases}
    names = list(dict.fromkeys(c.case.name for c in run.cases))
    head = [
        "shape (B,H,S,D)",
        "causal",
        *[f"{k} µs" for k in OURS + SDPA],
        *[f"{k}/sdpa" for k in OURS],
        *[f"{k} TFLOPS" for k in OURS],
        "sdpa TFLOPS",
        "host µs per eager call (triton_flash / sdpa)",
    ]
    lines = [
        f"{env.gpu_name} · driver {env.driver} · torch {env.torch} · triton {env.triton} · "
        f"{run.created[:10]} · commit {env.commit[:10]} · `{path}`",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for name in names:
        first = next(c for (n, _), c in by.items() if n == name)
        shape, causal = first.case.shape, first.case.causal
        med = {k: (by[(name, k)].median if (name, k) in by else None) for k in OURS + SDPA}
        fl = flops(shape, causal)
        cells = [str(shape.as_tuple()), "yes" if causal else "no"]
        cells += [f"{med[k] * 1e6:.1f}" if med[k] else "—" for k in OURS + SDPA]
        cells += [f"{med[k] / med['sdpa']:.2f}x" if med[k] and med["sdpa"] else "—" for k in OURS]
        cells += [f"{fl / med[k] / 1e12:.0f}" if med[k] else "—" for k in (*OURS, "sdpa")]
        host = [_host(by.get((name, k))) for k in ("triton_flash", "sdpa")]
        cells.append(" / ".join(f"{h * 1e6:.1f}" if h else "—" for h in host))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    for p in sys.argv[1:]:
        print(table(p))
        print()
