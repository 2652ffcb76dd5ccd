"""What machine this is: GPU, driver, versions, clocks, throttling, commit.

Reads ``nvidia-smi`` (present wherever the NVIDIA driver is) rather than binding
NVML, so a machine without it simply reports less.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import socket
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypedDict

from guard.store.results import Environment

# nvidia-smi clocks_event_reasons bits that mean the clock was held down by heat or
# hardware, so timings of that moment are not representative. (SW power cap, 0x4,
# is routine under full load on H100 and is recorded, not treated as throttling.)
THROTTLE_BITS = {
    0x8: "hw_slowdown",
    0x20: "sync_boost",
    0x40: "sw_thermal",
    0x80: "hw_thermal",
    0x100: "hw_power_brake",
}
SEVERE_THROTTLE = 0x8 | 0x40 | 0x80 | 0x100


def slug(name: str) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'nvidia-h100-80gb-hbm3' (the baseline file's name)."""
    text = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    return text or "unknown"


def smi_gpu_id(visible: str | None) -> str:
    """The ``nvidia-smi -i`` id of this process's GPU: nvidia-smi ignores
    ``CUDA_VISIBLE_DEVICES``, so its first entry (an index or a ``GPU-`` UUID) is named
    (a worker pinned to GPU 3 must read GPU 3's clocks, not GPU 0's)."""
    first = (visible or "").split(",")[0].strip()
    if first.isdigit() or first.startswith("GPU-"):
        return first
    return "0"


def _smi(fields: str) -> list[str] | None:
    exe = shutil.which("nvidia-smi")
    if not exe:
        return None
    gpu = smi_gpu_id(os.environ.get("CUDA_VISIBLE_DEVICES"))
    try:
        out = subprocess.run(
            [exe, f"--query-gpu={fields}", "--format=csv,noheader,nounits", "-i", gpu],
            capture_output=True,
            text=True,
            timeout=15,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    line = out.strip().splitlines()[0] if out.strip() else ""
    return [x.strip() for x in line.split(",")] if line else None


def _num(text: str | None) -> float | None:
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


class GpuState(TypedDict, total=False):
    """``gpu_state()``: what a worker reports at its start and end (JSON); empty
    without nvidia-smi, a reading that nvidia-smi left out is None."""

    sm_clock_mhz: float | None
    mem_clock_mhz: float | None
    temperature_c: float | None
    power_w: float | None
    throttle_reasons: str  # hex, e.g. "0x4"
    throttle_names: list[str]  # the THROTTLE_BITS set


class _MachineFields(TypedDict):
    """The ``Environment`` fields that ``collect`` fills in the same way on every device."""

    torch: str
    triton: str
    python: str
    host: str
    commit: str
    commit_dirty: bool
    branch: str
    cpu_fallback_reason: str


def gpu_state() -> GpuState:
    """Clocks, temperature, power and throttle reasons now (empty without nvidia-smi)."""
    fields = "clocks.sm,clocks.mem,temperature.gpu,power.draw,clocks_event_reasons.active"
    row = _smi(fields)
    if row is None or len(row) < 5:
        return {}
    try:
        reasons = int(row[4], 16)
    except ValueError:
        reasons = 0
    return {
        "sm_clock_mhz": _num(row[0]),
        "mem_clock_mhz": _num(row[1]),
        "temperature_c": _num(row[2]),
        "power_w": _num(row[3]),
        "throttle_reasons": hex(reasons),
        "throttle_names": [n for bit, n in THROTTLE_BITS.items() if reasons & bit],
    }


def is_throttled(state: Mapping[str, Any]) -> bool:
    # ``state`` is a GpuState as read back from a worker's JSON: checked, not trusted.
    try:
        return bool(int(state.get("throttle_reasons", "0x0"), 16) & SEVERE_THROTTLE)
    except (TypeError, ValueError):
        return False


def git_info(root: str | Path = ".") -> tuple[str, bool, str]:
    """(commit, dirty, branch) of the tree at ``root``; empty when not a git checkout."""

    def git(*args: str) -> str:
        try:
            return subprocess.run(
                ["git", "-C", str(root), *args],
                capture_output=True,
                text=True,
                timeout=15,
                check=True,
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    commit = git("rev-parse", "HEAD")
    if not commit:  # a copy without .git (CI artifacts, a copied tree): trust the caller
        import os

        return os.environ.get("GUARD_COMMIT", os.environ.get("GITHUB_SHA", "")), False, ""
    dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    branch = git("rev-parse", "--abbrev-ref", "HEAD")
    return commit, dirty, branch


def device_name(device: str) -> str:
    """The GPU's name (or the CPU's), which names its baseline file through ``slug``."""
    if device == "cuda":
        import torch

        return torch.cuda.get_device_name(0)
    return f"CPU ({platform.machine() or 'cpu'})"


def device_slug(device: str) -> str:
    return (
        slug(device_name(device))
        if device == "cuda"
        else slug(f"cpu-{platform.machine() or 'cpu'}")
    )


def recorded_host(environ: Mapping[str, str] = os.environ) -> str:
    """The machine's name as results record it (pytest-benchmark's ``machine_info.node``):
    empty under CI (``CI`` set, as GitHub Actions sets it), whose results are uploaded
    and published."""
    return "" if environ.get("CI") else socket.gethostname()


def collect(device: str, cpu_fallback_reason: str = "", root: str | Path = ".") -> Environment:
    """Describe this machine. Imports torch (and triton when present)."""
    import torch

    try:
        import triton

        triton_version: str = triton.__version__
    except ImportError:
        triton_version = ""
    commit, dirty, branch = git_info(root)
    common: _MachineFields = {
        "torch": torch.__version__,
        "triton": triton_version,
        "python": platform.python_version(),
        "host": recorded_host(),
        "commit": commit,
        "commit_dirty": dirty,
        "branch": branch,
        "cpu_fallback_reason": cpu_fallback_reason,
    }
    if device == "cuda":
        row = _smi("driver_version,clocks.max.sm,clocks.max.mem") or []
        return Environment(
            device="cuda",
            gpu_name=device_name(device),
            gpu_slug=device_slug(device),
            driver=row[0] if row else "",
            cuda=torch.version.cuda or "",
            sm_clock_max_mhz=_num(row[1]) if len(row) > 1 else None,
            mem_clock_max_mhz=_num(row[2]) if len(row) > 2 else None,
            **common,
        )
    return Environment(
        device="cpu", gpu_name=device_name(device), gpu_slug=device_slug(device), **common
    )


def pick_device(requested: str = "auto") -> tuple[str, str]:
    """('cuda' or 'cpu', the reason for falling back to the CPU or '')."""
    if requested == "cpu":
        return "cpu", "asked for the CPU (--device cpu)"
    try:
        import torch
    except ImportError:  # the guard alone (a pytest-benchmark suite needs no torch)
        return "cpu", "torch is not installed"
    if torch.cuda.is_available():
        return "cuda", ""
    if torch.version.cuda is None:
        reason = f"torch {torch.__version__} is a CPU-only build"
    else:
        reason = "torch found no CUDA GPU (driver missing or no device visible)"
    return "cpu", reason
