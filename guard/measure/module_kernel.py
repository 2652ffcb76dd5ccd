"""A suite's ``pkg.module:function`` kernels: another project's attention functions.

A suite may name a kernel by where it lives in the tree under test
(``toy_attention.ops:attention``) instead of by an entry of that tree's
``kernels/registry.py``. The function has the registry kernels' signature,
``fn(q, k, v, *, causal, scale) -> out`` over (batch, heads, seq, head_dim) tensors,
and ``out=`` too when the suite's ``kernel_options`` say ``accepts_out: true``.

The module is imported in the worker from the arm's own tree (``WorkerJob.kernels_root``,
first on ``sys.path``), as ``kernels`` is; a module that resolves anywhere else (the
guard's own tree, an installed package of that name) is refused, so that an arm never
measures another tree's code under its name. A module that fails to import fails its
cases as a build failure, never the worker. The kernel's source (its hash, and without a
GPU its fingerprint) is the module's top-level package folder, or the module's file
when it is a module of its own.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from guard.base.files import inside
from guard.store.suite import KernelOptions


class NotInTree(ImportError):
    """The module resolved outside the arm's tree (or has no file)."""


@dataclass(frozen=True)
class ModuleKernel:
    """A ``module:function`` kernel of one arm's tree, with the interface the worker
    uses for a registry entry (``probe``, ``loader``, ``source_hash``, ``accepts_out``)."""

    name: str  # "pkg.module:function"
    root: str  # the arm's tree
    options: KernelOptions = field(default_factory=KernelOptions)

    @property
    def accepts_out(self) -> bool:
        return self.options.accepts_out

    @property
    def module_name(self) -> str:
        return self.name.split(":", 1)[0]

    @property
    def attribute(self) -> str:
        return self.name.split(":", 1)[1]

    def probe(self, device: str) -> str | None:
        """Why it cannot run on ``device`` here (the suite's ``devices``; a GPU torch
        sees), None when it can. Imports nothing of the tree."""
        why = self.options.unavailable_reason(device)
        if why:
            return why
        if device == "cuda":
            import torch

            if not torch.cuda.is_available():
                return "torch sees no CUDA GPU"
        return None

    def module(self) -> Any:
        """The module, imported from ``root`` and checked to lie there (NotInTree)."""
        root = Path(self.root).resolve()
        if str(root) not in sys.path:
            sys.path.insert(0, str(root))
        module = importlib.import_module(self.module_name)
        where = getattr(module, "__file__", None)
        if not where or not inside(Path(where), root):
            came = where or "a namespace package"
            raise NotInTree(f"{self.module_name} was imported from {came}, not from {root}")
        return module

    def loader(self) -> Callable[..., Any]:
        """The function; ImportError, AttributeError or TypeError say why not."""
        fn = getattr(self.module(), self.attribute, None)
        if fn is None:
            raise AttributeError(f"{self.module_name} has no attribute {self.attribute!r}")
        if not callable(fn):
            raise TypeError(f"{self.name} is not callable ({type(fn).__name__})")
        result: Callable[..., Any] = fn
        return result

    def source(self) -> Path:
        """The kernel's source: its top-level package folder, or its module's file."""
        root = Path(self.root).resolve()
        top = root / self.module_name.split(".", 1)[0]
        if top.is_dir() and not top.is_symlink():
            return top
        return Path(str(self.module().__file__))

    def source_hash(self) -> str:
        """Hash of ``source()`` (part of the comparability record)."""
        from guard.measure.fingerprint import tree_hash

        return tree_hash(self.source())[:16]
