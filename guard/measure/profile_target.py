"""``python -m guard.measure.profile_target``: one case's kernel, one call marked for Nsight
Compute.

The child that ``guard.measure.profile`` starts under ``ncu``. It imports this guard's code and the
kernels of ``--kernels-root`` (that tree first on ``sys.path``, as ``guard.measure.worker`` does
for an arm), makes the case's inputs (``guard.measure.measure.make_inputs``, seeded), warms the
kernel up (compilation, autotuning, cached plans), then makes exactly one call inside the
NVTX push/pop range ``guard-profile``; ``ncu --nvtx --nvtx-include "guard-profile/"``
profiles the kernels that call launches and nothing else.

ncu prints its CSV on the stdout it shares with this process, so everything this process
(and the kernel) prints goes to stderr. On failure it prints one line
``guard.measure.profile_target: <what went wrong>`` to stderr and exits 2.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

NVTX_RANGE = "guard-profile"
ERROR_PREFIX = "guard.measure.profile_target: "
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


class TargetError(Exception):
    """Why the case cannot be profiled here (one line, for the parent's report)."""


def _die_with_parent() -> None:
    """SIGKILL this process when its parent (ncu) dies; Linux only, best effort."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def run(kernels_root: str, case_json: str, seed: int, warmup: int) -> None:
    """Load the case's kernel from ``kernels_root``, warm it up, call it once in the range."""
    # This guard's modules first, while only this guard's tree is on sys.path; the
    # ``guard`` package is already imported (``-m``), so a ``guard/`` in the tree
    # cannot replace them.
    from guard.measure.measure import make_inputs
    from guard.store.suite import Case

    root = Path(kernels_root).resolve()
    if not (root / "kernels" / "__init__.py").is_file():
        raise TargetError(f"{root} has no kernels/ package")
    if "kernels" in sys.modules:
        raise TargetError("kernels was imported before --kernels-root was put on sys.path")
    sys.path.insert(0, str(root))  # its kernels, this guard

    try:
        case = Case.from_json(json.loads(case_json))
    except (ValueError, KeyError, TypeError) as exc:
        raise TargetError(f"bad --case-json ({type(exc).__name__}: {exc})") from None

    import torch

    import kernels
    from guard.measure.proc import local_kernels_root

    loaded_from = Path(local_kernels_root())
    if loaded_from != root:
        raise TargetError(f"kernels came from {loaded_from}, not {root}")
    if not torch.cuda.is_available():
        raise TargetError("torch sees no CUDA GPU")
    torch.backends.cuda.matmul.allow_tf32 = False  # as guard.measure.worker sets them for timing
    torch.backends.cudnn.allow_tf32 = False
    try:
        spec = kernels.get(case.kernel)
    except KeyError as exc:
        raise TargetError(str(exc).strip("'\"")) from None
    reason = spec.probe("cuda")
    if reason:
        raise TargetError(f"{case.kernel} cannot run here: {reason}")
    fn = spec.loader()
    q, k, v = make_inputs(case, seed, "cuda")
    for _ in range(warmup):
        fn(q, k, v, causal=case.causal)
    torch.cuda.synchronize()
    # The one profiled call. The range must cover the launches; synchronizing inside it
    # also keeps anything the call defers (a lazy second launch) in the range.
    torch.cuda.nvtx.range_push(NVTX_RANGE)  # type: ignore[no-untyped-call]  # unannotated in torch
    try:
        fn(q, k, v, causal=case.causal)
        torch.cuda.synchronize()
    finally:
        torch.cuda.nvtx.range_pop()  # type: ignore[no-untyped-call]  # unannotated in torch
    torch.cuda.synchronize()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m guard.measure.profile_target",
        description="Call one case's kernel once inside the NVTX range "
        f"'{NVTX_RANGE}' (after warm-up), for ncu --nvtx-include '{NVTX_RANGE}/'.",
    )
    parser.add_argument("--kernels-root", required=True, help="a tree whose kernels/ to import")
    parser.add_argument("--case-json", required=True, help="the case, as Case.to_json()")
    parser.add_argument("--seed", type=int, default=0, help="seed of the inputs")
    parser.add_argument("--warmup", type=int, default=3, help="calls before the profiled one")
    args = parser.parse_args(argv)
    _die_with_parent()
    os.dup2(2, 1)  # ncu's CSV owns stdout: whatever we or the kernel print goes to stderr
    sys.stdout = sys.stderr
    try:
        run(args.kernels_root, args.case_json, args.seed, max(1, args.warmup))
    except TargetError as exc:
        print(f"{ERROR_PREFIX}{exc}", file=sys.stderr, flush=True)
        return 2
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [""])[0]
        print(f"{ERROR_PREFIX}{type(exc).__name__}: {first}", file=sys.stderr, flush=True)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
