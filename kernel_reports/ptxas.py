"""Compiler resource reports (``ptxas -v``), with no GPU needed.

What every resource hook of the registry shares (``KernelSpec.resources``): a parser
for ``ptxas -v`` output, a ``ptxas`` run on PTX text cached on disk, and
``ResourcesUnavailable``, which a hook raises when it cannot compile here (no compiler,
unsupported shape) and whose message the guard records. The arch names a hook takes
and their shared memory per block are the kernels' own (``kernels/arch.py``); the
record a hook returns is the registry's ``ResourceRecord``.

Also the SASS readers both kernels' offline checks share (``find_cuobjdump``,
``exponentials_under_pv``). This module imports neither torch nor triton at import
time: the CUDA extension's hook uses it with nvcc alone. Triton's compile-only
machinery is in ``kernel_reports/triton_compile.py``.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict


class ResourcesUnavailable(RuntimeError):
    """A resource report cannot be made here; the message says why (no nvcc, ...)."""


@dataclass(frozen=True)
class PtxasEntry:
    """One entry function of a ``ptxas -v`` report."""

    symbol: str
    target: str  # what ptxas compiled for: "sm_90a", "sm_89"
    registers: int
    spill_store_bytes: int
    spill_load_bytes: int
    stack_bytes: int
    static_shared_bytes: int  # "bytes smem": static only; dynamic smem is the launcher's
    barriers: int


class _EntryFields(TypedDict):
    """The fields of a ``PtxasEntry`` known once its "Compiling entry function" is read."""

    symbol: str
    target: str
    spill_store_bytes: int
    spill_load_bytes: int
    stack_bytes: int
    static_shared_bytes: int
    barriers: int


class _OpenEntry(_EntryFields, total=False):
    """An entry being parsed: ``registers`` arrives with its "Used N registers" line."""

    registers: int


_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '([^']+)'")
_PROPERTIES = re.compile(r"Function properties for (\S+)")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_BARRIERS = re.compile(r"used (\d+) barriers")
_SMEM = re.compile(r"(\d+) bytes smem")


def parse_ptxas(text: str) -> list[PtxasEntry]:
    """The entry functions of ``ptxas -v`` (or ``nvcc -Xptxas -v``) output, in order.

    Each entry is opened by "Compiling entry function 'X' for 'sm_..'", followed by a
    "Function properties for X" block (stack frame, spills) and a "Used N registers"
    line. Properties of non-entry device functions (a separate block naming another
    function) are not attributed to the entry. An entry without a "Used" line is left
    out (ptxas failed on it).
    """
    entries: list[PtxasEntry] = []
    current: _OpenEntry | None = None
    properties_of: str | None = None

    def close() -> None:
        if current is not None and "registers" in current:
            entries.append(PtxasEntry(**current))

    for line in text.splitlines():
        if match := _ENTRY.search(line):
            close()
            current = {
                "symbol": match.group(1),
                "target": match.group(2),
                "spill_store_bytes": 0,
                "spill_load_bytes": 0,
                "stack_bytes": 0,
                "static_shared_bytes": 0,
                "barriers": 0,
            }
            properties_of = None
        elif match := _PROPERTIES.search(line):
            properties_of = match.group(1)
        elif (match := _FRAME.search(line)) and current is not None:
            if properties_of == current["symbol"]:
                current["stack_bytes"] = int(match.group(1))
                current["spill_store_bytes"] = int(match.group(2))
                current["spill_load_bytes"] = int(match.group(3))
        elif (match := _USED.search(line)) and current is not None:
            current["registers"] = int(match.group(1))
            if barriers := _BARRIERS.search(line):
                current["barriers"] = int(barriers.group(1))
            if smem := _SMEM.search(line):
                current["static_shared_bytes"] = int(smem.group(1))
    close()
    return entries


def cache_dir() -> Path:
    """``$ATTN_GUARD_CACHE/resources``, else ``~/.cache/attn-guard/resources``."""
    base = os.environ.get("ATTN_GUARD_CACHE")
    root = Path(base) if base else Path.home() / ".cache" / "attn-guard"
    return root / "resources"


def cached_text(key: str, make: Callable[[], str]) -> str:
    """The text stored under ``key`` in ``cache_dir()``, else ``make()``'s, stored.

    Written atomically (temp file + rename), so concurrent processes never read a
    partial report; a cache that cannot be written is skipped, not an error.
    """
    path = cache_dir() / f"{key}.txt"
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        pass
    text = make()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(
            "w", encoding="utf-8", dir=path.parent, delete=False, suffix=".tmp"
        ) as tmp:
            tmp.write(text)
        os.replace(tmp.name, path)
    except OSError:
        pass
    return text


@functools.cache
def tool_version(exe: str) -> str:
    """``V12.8.93`` from ``ptxas --version`` / ``nvcc --version``; "" when unreadable."""
    try:
        out = subprocess.run(
            [exe, "--version"], capture_output=True, text=True, timeout=60, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    match = re.search(r"\bV(\d+(?:\.\d+)+)", out)
    return match.group(1) if match else ""


def ptxas_report(
    ptx: str,
    gpu_name: str,
    ptxas: str,
    *,
    extra_flags: tuple[str, ...] = (),
    timeout: float = 300.0,
) -> str:
    """``ptxas -v`` output for ``ptx`` compiled for ``gpu_name`` (``"sm_90a"``).

    Cached on disk by the PTX, the flags and the ptxas version: a second report of an
    unchanged kernel costs no compile. RuntimeError carrying the log when ptxas fails.
    """
    cmd_flags = ("-v", *extra_flags, f"--gpu-name={gpu_name}")
    digest = hashlib.sha256()
    for part in (tool_version(ptxas), *cmd_flags, ptx):
        digest.update(part.encode())
        digest.update(b"\0")

    def run() -> str:
        with tempfile.TemporaryDirectory() as tmp:
            src = Path(tmp) / "kernel.ptx"
            src.write_text(ptx, encoding="utf-8")
            proc = subprocess.run(
                [ptxas, *cmd_flags, str(src), "-o", str(Path(tmp) / "kernel.cubin")],
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
        if proc.returncode != 0:
            raise RuntimeError(f"ptxas failed (rc {proc.returncode}):\n{proc.stderr[-4000:]}")
        return proc.stdout + proc.stderr

    return cached_text(f"ptxas-{digest.hexdigest()[:24]}", run)


def find_cuobjdump(nvcc: str | None = None) -> str | None:
    """A cuobjdump to read SASS with: ``$CUDA_HOME``'s, beside ``nvcc``, on PATH, else the
    one triton bundles; None when there is none."""
    candidates = [Path(os.environ.get("CUDA_HOME", "/nonexistent")) / "bin" / "cuobjdump"]
    if nvcc is not None:
        candidates.append(Path(nvcc).resolve().parent / "cuobjdump")
    if found := shutil.which("cuobjdump"):
        candidates.append(Path(found))
    try:
        import triton.backends.nvidia as nvidia_backend

        candidates.append(Path(nvidia_backend.__file__).parent / "bin" / "cuobjdump")
    except ImportError:
        pass
    return next((str(c) for c in candidates if c.is_file()), None)


def exponentials_under_pv(sass: str) -> int:
    """The most ``MUFU.EX2`` in a stretch of a kernel's SASS between a wait that leaves
    one wgmma group in flight (``WARPGROUP.DEPBAR.LE gsb0, 0x1``) and the next wait for
    all (``0x0``): a tile's softmax there runs under the P·V in flight, FA3's
    intra-warpgroup overlap as the GPU runs it (ptxas may move work across a wait
    whatever the source order says)."""
    stretches = re.findall(r"DEPBAR\.LE gsb0, 0x1 ;(.*?)DEPBAR\.LE gsb0, 0x0 ;", sass, flags=re.S)
    return max((stretch.count("MUFU.EX2") for stretch in stretches), default=0)
