"""Nsight Compute: a kernel of this tree against another, per shape.

    PYTHONPATH=. python3 benchmarks/ncu_gluon.py --out DIR [--budget-s 50]
    PYTHONPATH=. python3 benchmarks/ncu_gluon.py --out DIR --base sdpa --head cuda_flash \
        --shape 4,16,2048,64,full,bfloat16

Uses the guard's own profiler (``guard.measure.profile.profile_case``): one launch per
arm on each shape. By default "base" is ``triton_flash`` in a copy of ``kernels/``
whose Gluon dispatch table is empty (the portable Triton kernel) and "head" the same
name in this tree (Gluon where ``FASTER`` sends it); ``--base NAME`` runs registry name
NAME in this tree instead (e.g. ``sdpa``, cuDNN on Hopper) and ``--head`` names the
head's kernel. Prints the guard's Markdown table per shape and writes it to
DIR/ncu-gluon.md. A GPU with ncu and readable counters is needed; otherwise each shape
says why it was skipped.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# (batch, heads, seq, head_dim, causal, dtype): the headline shape and the
# hd-64 shape where the Gluon kernel is behind cuDNN.
SHAPES = [(4, 32, 4096, 128, False, "float16"), (8, 32, 1024, 64, True, "bfloat16")]


def portable_tree(into: Path) -> Path:
    """A copy of kernels/ whose Gluon dispatch table is empty."""
    shutil.copytree(ROOT / "kernels", into / "kernels")
    path = into / "kernels" / "gluon_flash_fwd.py"
    text, n = re.subn(
        r"^FASTER: dict\[.*?^\}$", "FASTER: dict = {}", path.read_text(), flags=re.M | re.S
    )
    if n != 1:
        raise SystemExit(f"{path}: FASTER table not found")
    path.write_text(text)
    return into


def main(argv: list[str] | None = None) -> int:
    from guard.base.stats import Threshold
    from guard.measure.profile import profile_case, profile_markdown
    from guard.store.suite import Case, Shape

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--budget-s", type=float, default=50.0, help="per shape, both arms")
    parser.add_argument("--base", default=None, help="registry name of the base arm (this tree)")
    parser.add_argument("--head", default="triton_flash", help="registry name of the head arm")
    parser.add_argument(
        "--shape",
        action="append",
        default=None,
        help="B,H,S,D,full|causal,dtype (repeatable; default: the two built-in shapes)",
    )
    args = parser.parse_args(argv)
    shapes = SHAPES
    if args.shape:
        shapes = []
        for text in args.shape:
            b, h, s, d, mode, dtype = text.split(",")
            if mode not in ("full", "causal"):
                parser.error(f"--shape {text}: the fifth field must be full or causal")
            shapes.append((int(b), int(h), int(s), int(d), mode == "causal", dtype))
    args.out.mkdir(parents=True, exist_ok=True)
    parts = []
    with tempfile.TemporaryDirectory() as tmp:
        base = ROOT if args.base else portable_tree(Path(tmp))
        base_label = args.base or "portable Triton"
        head_label = args.head if args.base else "Gluon dispatch"
        for b, h, s, d, causal, dtype in shapes:
            shape = Shape(b, h, s, d)
            name = f"{shape.label()}-{'causal' if causal else 'full'}-{dtype}"
            threshold = Threshold.parse("median:2%")
            case = Case(name, args.base or args.head, shape, dtype, causal, threshold, True)
            head_case = Case(name, args.head, shape, dtype, causal, threshold, True)
            pc = profile_case(case, base, ROOT, budget_s=args.budget_s, head_case=head_case)
            text = f"### {name}: base = {base_label}, head = {head_label}\n\n"
            text += profile_markdown(pc)
            print(text, flush=True)
            parts.append(text)
    (args.out / "ncu-gluon.md").write_text("\n\n".join(parts) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
