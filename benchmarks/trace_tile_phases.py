"""Where a key tile's time goes in the persistent Gluon kernel, per consumer warpgroup.

Builds the traced copy of ``kernels/gluon_flash_fwd.py`` that ``trace_persistent.py``
builds, and in its key-tile loop reads the SM's cycle counter (its ``_clock``) between
the steps of each key tile after the first: waiting for the scheduler barrier's turn
(ping-pong), waiting for K and V and issuing Q·K^T and P·V, waiting for Q·K^T, the
softmax, and waiting for P·V with O's rescale and P's conversion. Each warpgroup adds
its row block's sums to its CTA's words once the row block's loop ends (one relaxed
atomic a step). Prints, per shape and warpgroup, the cycles a key tile spends in each
step (median over the CTAs) beside the cycles of a whole key tile. The stamps can move
the compiler's schedule: compare the whole row block's time with trace_persistent.py's.

    PYTHONPATH=. python3 benchmarks/trace_tile_phases.py --out DIR   # sm_90 GPU
    ... --case 4,16,16,2048,64,bfloat16,ws-persistent-pingpong

When the kernel's code no longer has one of the snippets below, it stops with the one it
missed (tests/test_gluon_split.py checks that they still apply).
"""

from __future__ import annotations

import json
import statistics
import sys
from types import ModuleType
from typing import Any

from benchmarks import trace_persistent as tp

PHASE_WORDS = 96  # a CTA's trace words from here: 8 per warpgroup, (steps..., key tiles)
STEPS = ("turn", "issue", "Q·K^T wait", "softmax", "P·V wait + rescale")

_SUMS = "".join(
    f'    gl.atomic_add(ph_ptr + {k}, a{k}, sem="relaxed", scope="cta")\n'
    for k in range(len(STEPS))
)

# (snippet, replacement), applied after trace_persistent's: the persistent consumer hands
# the key-tile loop its phase words (this warpgroup's, in its CTA's part ``tr`` of the
# trace buffer) in the Warpgroup bundle's trace field, which trace_persistent's copy adds;
# the stamps; the sums.
SUBSTITUTIONS = [
    ("    it = 0\n    # Whole row blocks in one loop",
     f"    wg = Warpgroup(wg.sched, WG, wg.PINGPONG, tr + {PHASE_WORDS} + 8 * WG)\n"
     "    it = 0\n    # Whole row blocks in one loop"),
    ("    for j in range(1, n_tiles):\n        s = (it0 + j) % STAGES\n"
     "        sp = (it0 + j - 1) % STAGES\n        if PINGPONG:\n",
     "    ph_ptr = wg.trace\n"
     "    a0 = _clock() * 0\n    a1 = a0\n    a2 = a0\n    a3 = a0\n    a4 = a0\n"
     "    for j in range(1, n_tiles):\n        s = (it0 + j) % STAGES\n"
     "        sp = (it0 + j - 1) % STAGES\n        c0 = _clock()\n        if PINGPONG:\n"),
    ("        mbarrier.wait(k_ready.index(s), ((it0 + j) // STAGES) & 1)\n"
     "        qk = warpgroup_mma(q, k_smem.index(s)",
     "        c1 = _clock()\n"
     "        mbarrier.wait(k_ready.index(s), ((it0 + j) // STAGES) & 1)\n"
     "        qk = warpgroup_mma(q, k_smem.index(s)"),
    ("            mbarrier.arrive(sched.index(1 - WG))\n"
     "        # wgmma groups retire in order: one outstanding = Q·K_j^T done, P·V in flight.\n"
     "        qk = warpgroup_mma_wait(1, deps=(qk,))\n"
     "        mbarrier.arrive(k_empty.index(s))\n",
     "            mbarrier.arrive(sched.index(1 - WG))\n        c2 = _clock()\n"
     "        qk = warpgroup_mma_wait(1, deps=(qk,))\n"
     "        mbarrier.arrive(k_empty.index(s))\n        c3 = _clock()\n"),
    ("        acc, p16 = warpgroup_mma_wait(0, deps=(acc, p16))\n"
     "        mbarrier.arrive(v_empty.index(sp))\n",
     "        c4 = _clock()\n"
     "        acc, p16 = warpgroup_mma_wait(0, deps=(acc, p16))\n"
     "        mbarrier.arrive(v_empty.index(sp))\n"),
    ("        m_i = m_new\n    return acc, p16, m_i, l_i\n",
     "        m_i = m_new\n        c5 = _clock()\n"
     "        a0 += c1 - c0\n        a1 += c2 - c1\n        a2 += c3 - c2\n"
     "        a3 += c4 - c3\n        a4 += c5 - c4\n"
     + _SUMS
     + f"    gl.atomic_add(ph_ptr + {len(STEPS)}, n_tiles - 1 + a0 * 0, sem=\"relaxed\","
     " scope=\"cta\")\n"
     "    return acc, p16, m_i, l_i\n"),
]  # fmt: skip


def phased_source(source: str) -> str:
    """trace_persistent's traced text with the phase stamps; ValueError names a snippet
    missed (of either tool)."""
    return tp.substituted(
        tp.traced_source(source), SUBSTITUTIONS, "benchmarks/trace_tile_phases.py"
    )


def _phased_module() -> ModuleType:
    return tp.module_of(phased_source(tp.KERNEL.read_text()), "phased_gluon_flash_fwd")


def check_fits(shape: tuple[int, ...], ctas: int) -> None:
    """ValueError where a CTA's row-block stamps would reach the phase words."""
    tp.check_fits(shape, ctas)
    batch, heads_q, _, seq, _ = shape
    most = -(-(batch * heads_q * -(-seq // 128)) // ctas) + 2
    if 8 + 2 * most > PHASE_WORDS:
        raise ValueError(f"{shape}: up to {most} row blocks a CTA; the phases start at word "
                         f"{PHASE_WORDS}")  # fmt: skip


def per_tile(record: dict[str, Any]) -> dict[int, dict[str, float]]:
    """Per warpgroup: the median over the CTAs of each step's cycles a key tile (after
    each row block's first), and of their sum."""
    out: dict[int, dict[str, float]] = {}
    for wg in (0, 1):
        rows = []
        for cta in record["ctas"]:
            words = cta[PHASE_WORDS + 8 * wg : PHASE_WORDS + 8 * wg + len(STEPS) + 1]
            tiles = words[len(STEPS)]
            if tiles > 0:
                rows.append([w / tiles for w in words[: len(STEPS)]])
        if rows:
            medians = {step: statistics.median(r[k] for r in rows) for k, step in enumerate(STEPS)}
            medians["key tile"] = statistics.median(sum(r) for r in rows)
            out[wg] = medians
    return out


def summary(record: dict[str, Any]) -> str:
    # The record's line and its whole row blocks' time, from the timeline's summary.
    timeline = tp.summary(record).splitlines()
    lines = [timeline[0], *(line for line in timeline if "a whole row block" in line)]
    for wg, steps in per_tile(record).items():
        total = steps["key tile"]
        parts = ", ".join(f"{step} {steps[step]:.0f} ({steps[step] / total:.0%})" for step in STEPS)
        lines.append(f"  warpgroup {wg}: {total:.0f} cycles a key tile: {parts}")
    return "\n".join(lines)


CASES: list[tp.Case] = [
    ((4, 16, 16, 2048, 64), "bfloat16", "ws-persistent-pingpong"),
    ((4, 16, 16, 2048, 64), "bfloat16", "ws-persistent"),
    ((4, 32, 32, 4096, 128), "float16", "ws-persistent"),
]


def main(argv: list[str] | None = None) -> int:
    import torch

    parser = tp.case_parser(__doc__, len(CASES))
    args = parser.parse_args(argv)
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        print("trace_tile_phases.py: needs an sm_90 GPU (Hopper)", file=sys.stderr)
        return 2
    ctas = torch.cuda.get_device_properties(0).multi_processor_count
    for shape, _, _ in args.case or CASES:
        try:
            check_fits(shape, ctas)
        except ValueError as error:
            parser.error(f"--case {error}")
    args.out.mkdir(parents=True, exist_ok=True)
    phased = _phased_module()
    records = []
    for shape, dtype, variant in args.case or CASES:
        record = tp.trace(phased, shape, getattr(torch, dtype), variant, 0, args.calls)
        records.append(record)
        print(summary(record), flush=True)
        (args.out / "phases.json").write_text(json.dumps(records))
    return 0


if __name__ == "__main__":
    sys.exit(main())
