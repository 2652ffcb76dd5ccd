"""Nsight Compute: the Gluon Hopper kernel against the portable Triton kernel, per shape.

    PYTHONPATH=. python3 benchmarks/ncu_gluon.py --out DIR [--budget-s 50]

Uses the guard's own profiler (``guard.measure.profile.profile_case``): one launch of
``triton_flash`` on each shape below, "base" in a copy of ``kernels/`` whose Gluon
dispatch table is empty (the portable Triton kernel), "head" in this tree (Gluon where
``FASTER`` sends it). Prints the guard's Markdown table per shape and writes it to
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
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    parts = []
    with tempfile.TemporaryDirectory() as tmp:
        base = portable_tree(Path(tmp))
        for b, h, s, d, causal, dtype in SHAPES:
            shape = Shape(b, h, s, d)
            name = f"{shape.label()}-{'causal' if causal else 'full'}-{dtype}"
            case = Case(name, "triton_flash", shape, dtype, causal, Threshold.parse("median:2%"),
                        True)  # fmt: skip
            pc = profile_case(case, base, ROOT, budget_s=args.budget_s)
            text = f"### {name}: base = portable Triton, head = Gluon dispatch\n\n"
            text += profile_markdown(pc)
            print(text, flush=True)
            parts.append(text)
    (args.out / "ncu-gluon.md").write_text("\n\n".join(parts) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
