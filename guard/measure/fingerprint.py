"""What a case runs on the GPU, as one digest: identical in base and head, no timing.

The fingerprint of a case is taken in the worker while the case's first (correctness)
call runs. It covers, in this order of preference:

- every Triton (and Gluon) kernel the call launched: its machine code (the cubin's
  sections but the debug ones: line tables and the embedded PTX text record paths and
  line numbers, which differ between two checkouts of one source), the compiled
  metadata that decides how it runs (warps, CTAs, stages, shared memory, register
  cap), and the grid of the launch. Machine code, not PTX: two sources whose PTX
  differs only in the order of independent instructions or in register numbers can
  compile to one binary, and a case whose binary did not change is not timed (timed,
  it would measure the clocks that the other cases' power draw sets: an unchanged
  kernel read 3% slower beside a sped-up one, docs/CALIBRATION.md). A kernel without
  a cubin counts by its PTX without source locations;
- every device kernel the call launched, as the CUDA profiler saw it: name, grid,
  block, shared memory and registers (torch's own kernels, an extra copy the launcher
  added, and the CUDA extension's kernels);
- the content of every compiled extension from outside the Python installation that
  the call loaded or launched a kernel of (the CUDA kernel's shared object), however it
  was loaded (``/proc/self/maps``); not triton's launch stubs, host code built per
  kernel signature (a constexpr added to a kernel gives another stub, the same binary).

All of it is taken by the guard's own code (the judge's, in a PR check), not asked of
the kernel's registry entry, which the PR controls. Without a GPU (no profiler, no
launches) the fingerprint falls back to a hash of the whole ``kernels/`` tree (a
``module:function`` kernel's: its package's folder), so any change there counts as a
change (a link by its target's text: it is never followed).
What it does not cover: host-side code in the Python launcher (argument checks,
allocation), which changes the host-inclusive time but not the device time the guard
gates on; the machine (driver, clocks), which is the same for
both arms of a paired run; and a kernel module that deliberately patches the guard's
code in the worker it runs in (that is code execution, kept out by the fork gate).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.machinery
import json
import os
import re
import site
import struct
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from guard.base import files

T = TypeVar("T")

_LOCATION_LINE = re.compile(r"^\s*\.(?:loc|file)\b.*$", re.MULTILINE)
_DEBUG_SECTION_START = re.compile(r"\s*\.section\s+\.debug_\w+\s*(\{)?")
_COMMENT = re.compile(r"//.*$", re.MULTILINE)
# Labels that only the (dropped) debug sections refer to: one per inlined call site, so
# moving code into a helper renumbers them though not one instruction changes.
_DEBUG_LABEL = re.compile(r"^\$L__tmp\d+:\s*$", re.MULTILINE)
# Compiled metadata that changes how a kernel runs (a missing one reads as None, so older
# or newer triton versions still compare): launch attributes (programmatic dependent
# launch, a cooperative grid) and the TMA descriptors' blocks and swizzles the host
# builds, beside the machine code.
_META_FIELDS = (
    "name", "num_warps", "num_ctas", "num_stages", "shared", "maxnreg", "cluster_dims",
    "launch_pdl", "launch_cooperative_grid", "tensordesc_meta",
)  # fmt: skip


def _drop_debug_sections(ptx: str) -> str:
    """``ptx`` without its ``.section .debug_* { ... }`` blocks: each from its opening
    line to the first later line that starts with ``}``. One pass over the lines (a
    regex over the text was quadratic in sections left unclosed); an unclosed one is
    kept as it is."""
    lines = ptx.split("\n")
    n = len(lines)
    next_close = [n] * (n + 1)  # the first line at or after k that starts with "}"
    for k in range(n - 1, -1, -1):
        next_close[k] = k if lines[k].lstrip().startswith("}") else next_close[k + 1]
    out: list[str] = []
    i = 0
    while i < n:
        start = _DEBUG_SECTION_START.match(lines[i])
        brace = i if start and start.group(1) else i + 1
        while not (start and start.group(1)) and brace < n and not lines[brace].strip():
            brace += 1
        opened = start is not None and (
            bool(start.group(1)) or (brace < n and lines[brace].strip().startswith("{"))
        )
        close = next_close[brace + 1] if opened and brace + 1 <= n else n
        if not opened or close >= n:
            out.append(lines[i])
            i += 1
            continue
        rest = lines[close].lstrip()[1:]
        if rest.strip():
            out.append(rest)
        i = close + 1
    return "\n".join(out)


def normalize_ptx(ptx: str) -> str:
    """PTX without source locations, debug sections and their labels, and comments."""
    text = _drop_debug_sections(ptx)
    text = _LOCATION_LINE.sub("", text)
    text = _DEBUG_LABEL.sub("", text)
    text = _COMMENT.sub("", text)
    return "\n".join(line.rstrip() for line in text.splitlines() if line.strip())


@dataclass(frozen=True)
class Launch:
    """One launch of a compiled Triton kernel: what ran, and on what grid."""

    code: str  # sha256 of the machine code (or normalized PTX) and run-relevant metadata
    grid: tuple[int, ...]
    name: str = ""  # the kernel's name, for a reader (its code digest covers it already)

    def to_json(self) -> dict[str, Any]:
        return {"code": self.code, "grid": list(self.grid)}


_ELF_HEADER = struct.Struct("<16sHHIQQQIHHHHHH")  # ELF64, little-endian
_ELF_SECTION = struct.Struct("<IIQQQQIIQQ")
_NOBITS = 8  # a section that takes no bytes in the file (.nv.shared: its size counts)
# Sections that only debuggers and profilers read: line tables, the PTX text, and the
# relocations into them.
_DEBUG_PREFIXES = (".debug", ".nv_debug", ".rela.debug", ".rela.nv_debug", ".rel.debug")


def machine_code(cubin: bytes) -> bytes | None:
    """A cubin's sections but its debug ones, each as its name, header fields (not its
    file offset, which moves with the debug sections' sizes) and bytes; None when the
    bytes are not a 64-bit little-endian ELF file this can read."""
    try:
        header = _ELF_HEADER.unpack_from(cubin, 0)
        if header[0][:6] != b"\x7fELF\x02\x01":
            return None
        shoff, shentsize, shnum, shstrndx = header[6], header[11], header[12], header[13]
        if shentsize != _ELF_SECTION.size or not 0 <= shstrndx < shnum:
            return None
        sections = [_ELF_SECTION.unpack_from(cubin, shoff + i * shentsize) for i in range(shnum)]
        if sum(0 if s[1] == _NOBITS else s[5] for s in sections) > len(cubin):
            return None  # sections that overlap: no compiler's file (and a memory bomb)
        names = sections[shstrndx]
        out = []
        for name_at, kind, flags, _, offset, size, link, info, align, entsize in sections:
            start = names[4] + name_at
            name = cubin[start : cubin.index(b"\0", start)]
            if name.decode("ascii", "replace").startswith(_DEBUG_PREFIXES):
                continue
            body = b"" if kind == _NOBITS else cubin[offset : offset + size]
            if len(body) != (0 if kind == _NOBITS else size):
                return None  # a section past the end of the file
            fields = (kind, flags, size, link, info, align, entsize)
            out.append(name + b"\0" + struct.pack("<IQQIIQQ", *fields) + body)
        return b"".join(out)
    except (struct.error, ValueError, OverflowError):
        return None


def kernel_code_digest(kernel: Any) -> str:
    """Digest of a ``triton.compiler.CompiledKernel``: its machine code (or, without a
    cubin, its normalized PTX) and metadata."""
    meta = kernel.metadata
    fields = {name: _plain(getattr(meta, name, None)) for name in _META_FIELDS}
    cubin = kernel.asm.get("cubin")
    code = machine_code(cubin) if isinstance(cubin, bytes) else None
    if code is not None:
        digest = hashlib.sha256(b"cubin\0" + code)
    else:
        digest = hashlib.sha256(normalize_ptx(kernel.asm["ptx"]).encode())
    digest.update(json.dumps(fields, sort_keys=True).encode())
    return digest.hexdigest()


def _plain(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value if isinstance(value, (int, float, str, bool, type(None))) else str(value)


@contextlib.contextmanager
def capture_triton_launches() -> Iterator[list[Launch]]:
    """Within the block, every Triton launch through ``JITFunction.run`` is recorded.

    Yields the list that launches are appended to. Without triton, yields an empty
    list. Process-wide while active: use it around one call, not beside other threads.
    """
    launches: list[Launch] = []
    try:
        from triton.runtime.jit import JITFunction
    except ImportError:
        yield launches
        return
    run = JITFunction.run

    def recording_run(self: Any, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> Any:
        kernel = run(self, *args, grid=grid, warmup=warmup, **kwargs)
        if kernel is not None and not warmup:
            if hasattr(kernel, "result"):  # an asynchronous compile
                kernel = kernel.result()
            named = dict(zip(self.arg_names, args, strict=False))
            named.update(kwargs)
            size = grid(named) if callable(grid) else grid
            name = str(getattr(kernel.metadata, "name", "") or getattr(self, "__name__", ""))
            launches.append(Launch(kernel_code_digest(kernel), tuple(int(n) for n in size), name))
        return kernel

    JITFunction.run = recording_run
    try:
        yield launches
    finally:
        JITFunction.run = run


class CaptureFailed(RuntimeError):
    """The profiler could not be started or read: the fingerprint is unknown."""


@contextlib.contextmanager
def capture_device_kernels() -> Iterator[list[dict[str, Any]]]:
    """Within the block, the CUDA profiler records every device kernel; on exit the
    yielded list holds one ``{name, grid, block, shared, registers}`` per launch.

    Without a GPU the list stays empty. An error of the block itself propagates as it
    is (the kernel's failure is the case's, not the fingerprint's); a profiler that
    cannot start or be read raises ``CaptureFailed`` after the block ran."""
    kernels: list[dict[str, Any]] = []
    try:
        import torch
        from torch.profiler import ProfilerActivity, profile
    except ImportError:
        yield kernels
        return
    if not torch.cuda.is_available():
        yield kernels
        return
    prof = profile(activities=[ProfilerActivity.CUDA])
    try:
        prof.__enter__()  # type: ignore[no-untyped-call]  # torch leaves it unannotated
    except Exception as exc:
        reason = repr(exc)
    else:
        reason = ""
    if reason:
        yield kernels  # the call still runs; only its fingerprint is unknown
        raise CaptureFailed(f"the CUDA profiler did not start: {reason}")
    try:
        yield kernels
    finally:
        try:
            torch.cuda.synchronize()
            prof.__exit__(None, None, None)  # type: ignore[no-untyped-call]  # as __enter__
            kernels.extend(_kernels_of(prof))
        except Exception as exc:
            kernels.clear()
            raise CaptureFailed(f"the CUDA profiler could not be read: {exc!r}") from exc


def _kernels_of(prof: Any) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory(prefix="guard-fp-") as tmp:
        trace = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(trace))
        events = json.loads(trace.read_text("utf-8")).get("traceEvents", [])
    out = []
    for event in events:
        if not isinstance(event, dict) or event.get("cat") != "kernel":
            continue
        args = event.get("args", {}) if isinstance(event.get("args"), dict) else {}
        out.append(
            {
                "name": str(event.get("name", "")),
                "grid": _plain(args.get("grid")),
                "block": _plain(args.get("block")),
                "shared": _plain(args.get("shared memory")),
                "registers": _plain(args.get("registers per thread")),
            }
        )
    return out


# Shared objects of the system (the driver, libc) are the same for both arms.
_SYSTEM_DIRS = ("/usr/", "/lib/", "/lib64/", "/etc/")


def _mapped_shared_objects() -> list[str]:
    """Files this process has mapped that look like shared objects (Linux: /proc/self/maps).

    An extension loaded through ``importlib.util.module_from_spec`` (as torch's
    ``cpp_extension.load`` does) or ``ctypes`` never enters ``sys.modules``; its mapping
    is still there."""
    try:
        text = Path("/proc/self/maps").read_text()
    except OSError:
        return []
    paths = set()
    for line in text.splitlines():
        fields = line.split(None, 5)
        if len(fields) == 6:
            path = fields[5].strip()
            if path.startswith("/") and (path.endswith(".so") or ".so." in path):
                paths.add(path)
    return sorted(paths)


# Host stubs triton builds into its cache for each kernel signature (one folder a stub):
# they pass the arguments and launch, holding no device code (that counts through the
# launch itself). A constexpr more in a signature gives another stub, not another binary
# on the GPU.
_TRITON_STUBS = tuple(
    stem + suffix
    for stem in ("__triton_launcher", "cuda_utils")
    for suffix in importlib.machinery.EXTENSION_SUFFIXES
)


def _triton_stub_dir() -> str:
    """Triton's cache directory (with a trailing separator), "" without triton."""
    try:
        from triton import knobs
    except ImportError:
        return ""
    return os.path.join(os.path.realpath(str(knobs.cache.dir)), "")


def _is_triton_stub(path: str, stub_dir: str) -> bool:
    folder, name = os.path.split(path)
    return (
        bool(stub_dir)
        and os.path.dirname(folder) == stub_dir.rstrip(os.sep)
        and name in _TRITON_STUBS
    )


def loaded_extensions() -> dict[str, str]:
    """Compiled code loaded from outside the Python installation and the system (built
    extensions, however they were loaded), by path: the sha256 of each shared object.
    Triton's own launch stubs (``_TRITON_STUBS`` in its cache) are left out."""
    installed = {sys.prefix, sys.base_prefix, *site.getsitepackages(), site.getusersitepackages()}
    roots = tuple(os.path.join(root, "") for root in installed) + _SYSTEM_DIRS
    stub_dir = _triton_stub_dir()
    paths = [
        getattr(module, "__file__", None) or "" for module in list(sys.modules.values())
    ] + _mapped_shared_objects()
    out = {}
    for path in dict.fromkeys(paths):
        if path.endswith((".so", ".pyd")) or ".so." in os.path.basename(path):
            if path.startswith(roots) or _is_triton_stub(os.path.realpath(path), stub_dir):
                continue
            with contextlib.suppress(OSError, files.FileRefused):
                out[path] = _file_digest(path, os.stat(path).st_mtime_ns)
    return out


_EXTENSION_LIMIT = 1 << 30


@functools.lru_cache(maxsize=32)
def _extension_bytes(path: str, mtime_ns: int) -> bytes:
    del mtime_ns  # part of the cache key only
    return files.read_bytes(path, _EXTENSION_LIMIT)


def _kernel_token(name: str) -> bytes:
    """The bare function name of a profiled kernel ("void ns::f<T>(int)" -> "f"): it
    appears in the shared object that holds the kernel, mangled or not. Empty for a
    name with none ("void (anonymous namespace)::..." keeps its function name)."""
    name = name.replace("(anonymous namespace)::", "")
    head = name.split("(", 1)[0].split("<", 1)[0].split()
    token = head[-1].rsplit("::", 1)[-1] if head else ""
    # A return type or keyword left alone ("void") is in every C++ library: no token.
    return token.encode() if len(token) >= 4 and token not in _NOT_NAMES else b""


_NOT_NAMES = frozenset({"void", "auto", "const", "static", "inline", "unsigned", "signed"})


def extensions_used(
    before: set[str], now: dict[str, str], device_kernels: list[dict[str, Any]]
) -> dict[str, str]:
    """The extensions a call used, of those loaded after it (``now``): the ones it loaded
    itself (not in ``before``), and those that hold a kernel it launched. A worker keeps
    every extension a case loaded mapped for the cases after it; counting them all would
    make a change to one kernel's extension a change of every case."""
    tokens = {_kernel_token(str(k.get("name", ""))) for k in device_kernels} - {b""}
    # A whole symbol component: "<length><name>" in a mangled C++ name, or the name alone
    # between NULs in the string table (extern "C"); not a substring of a longer name.
    needles = [n for t in tokens for n in (b"%d%s" % (len(t), t), b"\0" + t + b"\0")]
    used = {}
    for path, digest in now.items():
        if path not in before:
            used[path] = digest
            continue
        with contextlib.suppress(OSError):
            data = _extension_bytes(path, os.stat(path).st_mtime_ns)
            if any(needle in data for needle in needles):
                used[path] = digest
    return used


@functools.lru_cache(maxsize=256)
def _file_digest(path: str, mtime_ns: int) -> str:
    # Per (path, mtime): a worker fingerprints every case, its extensions stay loaded.
    del mtime_ns  # part of the cache key only
    return files.digest(path)  # in chunks: memory stays bounded whatever the size


def tree_hash(kernels_dir: str | Path) -> str:
    """Hash of the tree under ``kernels_dir`` (caches excluded), or of that one file:
    the fallback. Regular
    files count by their content, read in chunks; links by their target's text, never
    followed (one could lead out of the tree, to a huge file or a device), so that
    changing a link is a change. Other entries (a FIFO, a socket) are left out."""
    root = Path(kernels_dir)
    entries = []
    if root.is_file() and not root.is_symlink():  # a kernel that is one module's file
        entries.append((root.name, root))
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        # A link to a directory is listed among dirnames, and os.walk does not enter it.
        links = [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]
        for name in (*filenames, *links):
            path = Path(dirpath) / name
            entries.append((path.relative_to(root).as_posix(), path))
    digest = hashlib.sha256()
    for rel, path in sorted(entries):
        if path.is_symlink():
            kind, value = "link", os.readlink(path)
        elif path.is_file():
            kind, value = "file", files.digest(path)
        else:
            continue
        digest.update(os.fsencode(f"{kind}\0{rel}\0{value}\0"))
    return digest.hexdigest()[:32]


def fingerprint(
    launches: list[Launch],
    device_kernels: list[dict[str, Any]],
    extensions: dict[str, str],
) -> str:
    """``"gpu:<digest>"`` of the device work a call did (Triton launches, profiled
    kernels) and the extensions loaded (``take`` falls back to the tree's hash when the
    call did no device work it could see)."""
    parts = {
        "triton": sorted(json.dumps(launch.to_json(), sort_keys=True) for launch in launches),
        "device": sorted(json.dumps(k, sort_keys=True) for k in device_kernels),
        "extensions": sorted(extensions.values()),
    }
    blob = json.dumps(parts, sort_keys=True).encode()
    return "gpu:" + hashlib.sha256(blob).hexdigest()[:32]


MAX_PART_NAME = 120  # characters of a kernel's name in a part's label


def parts(
    launches: list[Launch], device_kernels: list[dict[str, Any]], extensions: dict[str, str]
) -> dict[str, str]:
    """What a fingerprint is made of, readable: a label per launch (the kernel's name and
    grid), per extension (its file name), each with a digest of what it ran. Two arms'
    parts say which launch of a case changed when its fingerprint did."""
    out: dict[str, str] = {}

    def put(label: str, digest: str) -> None:
        label = label[:MAX_PART_NAME]
        key, n = label, 1
        while key in out:  # the same kernel launched twice: both count
            n += 1
            key = f"{label} #{n}"
        out[key] = digest[:16]

    for launch in launches:
        put(f"{launch.name or 'triton kernel'} grid {list(launch.grid)}", launch.code)
    for k in device_kernels:
        blob = json.dumps(k, sort_keys=True).encode()
        put(f"{k.get('name', '')} grid {k.get('grid')}", hashlib.sha256(blob).hexdigest())
    for path, digest in extensions.items():
        put(f"extension {os.path.basename(path)}", digest)
    return out


def take_parts(call: Callable[[], T], kernels_dir: str | Path) -> tuple[T, str, dict[str, str]]:
    """``take``, and the fingerprint's ``parts`` ({} when the capture failed or the call
    did no device work it could see)."""
    before = set(loaded_extensions())
    try:
        with capture_device_kernels() as device_kernels, capture_triton_launches() as launches:
            result = call()
    except CaptureFailed:
        return result, "", {}
    if not launches and not device_kernels:
        return result, f"source:{tree_hash(kernels_dir)}", {}
    used = extensions_used(before, loaded_extensions(), device_kernels)
    return (
        result,
        fingerprint(launches, device_kernels, used),
        parts(launches, device_kernels, used),
    )


def take(call: Callable[[], T], kernels_dir: str | Path) -> tuple[T, str]:
    """Run ``call`` (a case's first call in a fresh process: compiled, launched through
    the JIT, never through a launcher's cache) and fingerprint what it ran.

    Returns its result and the fingerprint ("" when the capture failed: the case is
    then always timed). The call's own exceptions propagate unchanged."""
    before = set(loaded_extensions())
    try:
        with capture_device_kernels() as device_kernels, capture_triton_launches() as launches:
            result = call()
    except CaptureFailed:
        return result, ""
    if not launches and not device_kernels:  # no device work seen: the tree is the fingerprint
        return result, f"source:{tree_hash(kernels_dir)}"
    used = extensions_used(before, loaded_extensions(), device_kernels)
    return result, fingerprint(launches, device_kernels, used)
