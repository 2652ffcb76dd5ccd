"""Nsight Compute: two kernels of this tree on the same shapes, one launch each.

    PYTHONPATH=. python3 benchmarks/ncu_gluon.py --out DIR [--budget-s 50]
    PYTHONPATH=. python3 benchmarks/ncu_gluon.py --out DIR --base sdpa --head cuda_flash \
        --shape 4,16,2048,64,full,bfloat16

Uses the guard's own profiler (``guard.measure.profile.profile_case``): the base arm
runs registry name ``--base`` (default ``triton_flash``: the portable Triton kernel,
never Gluon), the head arm ``--head`` (default ``flash_attention``: the entry point,
Gluon where ``kernels.flash_plan.FASTER`` sends it); e.g. ``--base sdpa`` for cuDNN on
Hopper. Prints the guard's Markdown table per shape and writes it to DIR/ncu-gluon.md.
A GPU with ncu and readable counters is needed; otherwise each shape says why it was
skipped.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# (batch, heads, seq, head_dim, causal, dtype): the headline shape and the
# hd-64 shape where the Gluon kernel is behind cuDNN.
SHAPES = [(4, 32, 4096, 128, False, "float16"), (8, 32, 1024, 64, True, "bfloat16")]


def parse_shape(text: str) -> tuple[int, int, int, int, bool, str]:
    """ "B,H,S,D,full|causal,dtype" -> (B, H, S, D, causal, dtype)."""
    fields = text.split(",")
    if len(fields) != 6 or fields[4] not in ("full", "causal"):
        raise argparse.ArgumentTypeError(f"{text!r}: want B,H,S,D,full|causal,dtype")
    b, h, s, d = (int(x) for x in fields[:4])
    return b, h, s, d, fields[4] == "causal", fields[5]


def main(argv: list[str] | None = None) -> int:
    from guard.base.stats import Threshold
    from guard.measure.profile import profile_case, profile_markdown
    from guard.store.suite import Case, Shape

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--budget-s", type=float, default=50.0, help="per shape, both arms")
    parser.add_argument("--base", default="triton_flash", help="registry name of the base arm")
    parser.add_argument("--head", default="flash_attention", help="registry name of the head arm")
    parser.add_argument(
        "--shape",
        type=parse_shape,
        action="append",
        default=None,
        help="B,H,S,D,full|causal,dtype (repeatable; default: the two built-in shapes)",
    )
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    threshold = Threshold.parse("median:2%")
    parts = []
    for b, h, s, d, causal, dtype in args.shape or SHAPES:
        shape = Shape(b, h, s, d)
        name = f"{shape.label()}-{'causal' if causal else 'full'}-{dtype}"
        base = Case(name, args.base, shape, dtype, causal, threshold, True)
        head = Case(name, args.head, shape, dtype, causal, threshold, True)
        pc = profile_case(base, ROOT, ROOT, budget_s=args.budget_s, head_case=head)
        text = f"### {name}: base = {args.base}, head = {args.head}\n\n" + profile_markdown(pc)
        print(text, flush=True)
        parts.append(text)
    (args.out / "ncu-gluon.md").write_text("\n\n".join(parts) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
