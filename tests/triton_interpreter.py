"""The Triton interpreter for the kernel tests on a machine without a GPU.

Imported by a test module before anything imports triton: triton.jit picks compiled or
interpreted kernels when it decorates them, triton.language's own helpers included. If
another module imported triton first, the interpreter cannot be switched on any more,
and ``runnable`` skips the module instead.
"""

from __future__ import annotations

import os
import sys

import pytest
import torch

INTERPRETER_USABLE = os.environ.get("TRITON_INTERPRET") == "1" or "triton" not in sys.modules
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def runnable(interpreted: bool) -> pytest.MarkDecorator:
    """The module's skip mark: no GPU, and the kernels not interpreted (``interpreted``:
    ``kernels.flash_launch.INTERPRET``)."""
    return pytest.mark.skipif(
        DEVICE == "cpu" and not (interpreted and INTERPRETER_USABLE),
        reason="no CUDA GPU, and the Triton interpreter is off or was switched on after "
        "triton was imported: run with TRITON_INTERPRET=1 in the environment",
    )
