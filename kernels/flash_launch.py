"""What the FlashAttention wrappers share: input checks, the device queries the path
chooser needs, kept launches and the entry that caches them.

Every public ``flash_attention_fwd`` (``kernels/triton_flash.py``: the Triton kernel;
``kernels/gluon_flash_fwd.py``: the Gluon kernel; ``kernels/flash_attention.py``: the
dispatching entry point) is an ``Entry``: the first call of each key (shapes, strides,
dtypes, devices, pointer alignment, causal, scale, out, the switches) validates, asks
``kernels.flash_plan.choose`` for the path and launches; it keeps a ``LaunchPlan`` (the
compiled kernel's launcher, grid and scalar arguments) that later calls of that key use
directly: 13-14 us of host time per call instead of 51-55 (SDPA: 17-18), H200.

No kernel here; this module imports neither kernel module.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import torch
import triton

from kernels import dispatch_table, flash_plan
from kernels.flash_plan import Choice, Env, Kernel

# Read once, like ``triton.jit`` reads it when it decorates the kernels: they are either
# compiled or interpreted for the life of the process.
INTERPRET = os.environ.get(flash_plan.INTERPRET_ENV, "0") == "1"

DTYPES = (torch.float16, torch.bfloat16)
SUPPORTED_HEAD_DIMS = flash_plan.TRITON_HEAD_DIMS  # what the checks accept


# ----------------------------------------------------------------------------------------
# Input checks
# ----------------------------------------------------------------------------------------


def _check_device(name: str, t: torch.Tensor, ref: torch.Tensor | None) -> None:
    # is_cuda first: the launcher runs this on every call, and small shapes are
    # launch-bound (t.device.type costs about 0.5 us, is_cuda 0.1 us).
    if ref is not None and t.device != ref.device:
        raise ValueError(f"{name} is on {t.device} but q is on {ref.device}")
    if t.is_cuda or (INTERPRET and t.device.type == "cpu"):
        return
    if INTERPRET:
        raise ValueError(f"{name} must be a CUDA or CPU tensor, got device {t.device}")
    raise ValueError(
        f"{name} must be a CUDA tensor, got device {t.device}"
        " (CPU tensors run only under TRITON_INTERPRET=1)"
    )


def validate(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool,
    scale: float | None,
    out: torch.Tensor | None,
) -> float:
    """The scale to use; ValueError naming the argument that is wrong."""
    # Typed as the public signature; the checks are for callers that do not keep to it.
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(
                f"{name} must be 4-D (batch, heads, seq, head_dim), got shape {tuple(t.shape)}"
            )
        if t.dtype not in DTYPES:
            raise ValueError(f"{name} must be float16 or bfloat16, got {t.dtype}")
        _check_device(name, t, None if name == "q" else q)
    for name, t in (("k", k), ("v", v)):
        if t.dtype != q.dtype:
            raise ValueError(f"{name} has dtype {t.dtype} but q has {q.dtype}; they must match")
    batch, heads_q, _, head_dim = q.shape
    if head_dim not in SUPPORTED_HEAD_DIMS:
        raise ValueError(f"q has head_dim {head_dim}; supported: {SUPPORTED_HEAD_DIMS}")
    if k.shape != v.shape:
        raise ValueError(
            f"v has shape {tuple(v.shape)} but k has {tuple(k.shape)}; they must match"
        )
    if k.shape[0] != batch or k.shape[3] != head_dim:
        raise ValueError(
            f"k has shape {tuple(k.shape)}; batch and head_dim must match q {tuple(q.shape)}"
        )
    heads_kv = k.shape[1]
    if heads_kv == 0 or heads_q % heads_kv != 0:
        raise ValueError(
            f"k has {heads_kv} heads, which must divide q's {heads_q} heads (grouped-query)"
        )
    if not isinstance(causal, bool):
        raise ValueError(f"causal must be a bool, got {type(causal).__name__}")
    if scale is None:
        scale = 1.0 / math.sqrt(head_dim)
    elif isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise ValueError(f"scale must be a float or None, got {type(scale).__name__}")
    elif not (math.isfinite(scale) and scale > 0):
        # The unmasked loops' fused max-then-scale relies on scale > 0.
        raise ValueError(f"scale must be positive and finite, got {scale}")
    if out is not None:
        if not isinstance(out, torch.Tensor):
            raise ValueError(f"out must be a torch.Tensor, got {type(out).__name__}")
        if out.shape != q.shape:
            raise ValueError(f"out has shape {tuple(out.shape)}, expected q's {tuple(q.shape)}")
        if out.dtype != q.dtype:
            raise ValueError(f"out has dtype {out.dtype}, expected q's {q.dtype}")
        if out.device != q.device:
            raise ValueError(f"out is on {out.device} but q is on {q.device}")
        if out.stride(-1) != 1 and out.numel() > 0:
            raise ValueError("out must have a contiguous last dimension (stride 1)")
    return float(scale)


def prepare(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool,
    scale: float | None,
    out: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, float]:
    """Checked inputs with a unit stride along head_dim (copied where not), the output
    buffer (allocated where not given) and the scale."""
    scale = validate(q, k, v, causal, scale, out)
    # The kernels assume a unit stride along head_dim (vector loads, TMA); other
    # strides are passed through.
    if q.stride(-1) != 1:
        q = q.contiguous()
    if k.stride(-1) != 1:
        k = k.contiguous()
    if v.stride(-1) != 1:
        v = v.contiguous()
    if out is None:
        out = torch.empty_like(q, memory_format=torch.contiguous_format)
    return q, k, v, out, scale


def tma_aligned(t: torch.Tensor) -> bool:
    """TMA: unit stride along head_dim; every (batch, head) base and row start 16-byte
    aligned, since the kernels offset the base by batch and head strides."""
    size = t.element_size()
    return (
        t.stride(-1) == 1
        and t.data_ptr() % 16 == 0
        and all((stride * size) % 16 == 0 for stride in t.stride()[:-1])
    )


# ----------------------------------------------------------------------------------------
# The device, as the chooser takes it
# ----------------------------------------------------------------------------------------


def device_index(device: torch.device) -> int:
    return device.index if device.index is not None else torch.cuda.current_device()


@functools.cache
def _max_shared_mem(index: int) -> int:
    try:
        props = triton.runtime.driver.active.utils.get_device_properties(index)
        return int(props["max_shared_mem"])
    except Exception:  # another backend or driver API: ask torch instead
        props = torch.cuda.get_device_properties(index)
        return int(getattr(props, "shared_memory_per_block_optin", 48 * 1024))


def smem_budget(device: torch.device) -> int:
    """Shared memory a block may use on ``device`` (opt-in maximum)."""
    return _max_shared_mem(device_index(device))


@functools.cache
def _capability_of(index: int) -> int:
    major, minor = torch.cuda.get_device_capability(index)
    return major * 10 + minor


def capability(device: torch.device) -> int | None:
    """90 for an sm_90 GPU; None for a CPU tensor (the interpreter)."""
    return _capability_of(device_index(device)) if device.type == "cuda" else None


@functools.cache
def _sm_count_of(index: int) -> int:
    return int(torch.cuda.get_device_properties(index).multi_processor_count)


def sm_count(device: torch.device) -> int:
    """SMs of ``device``; ``flash_plan.SM_COUNT`` off a GPU (the interpreter, compiles)."""
    return _sm_count_of(device_index(device)) if device.type == "cuda" else flash_plan.SM_COUNT


@functools.cache
def _name_of(index: int) -> str:
    return str(torch.cuda.get_device_name(index))


def gpu_name(device: torch.device) -> str | None:
    """The GPU model's name ("NVIDIA H200"), which picks its dispatch table; None off a GPU."""
    return _name_of(device_index(device)) if device.type == "cuda" else None


def choose_for(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    causal: bool,
    env: Env,
    kernel: Kernel,
) -> Choice:
    """``flash_plan.choose`` for prepared tensors on their device."""
    cap = capability(q.device)
    return flash_plan.choose(
        head_dim=q.shape[-1],
        causal=causal,
        seq_q=q.shape[2],
        seq_k=k.shape[2],
        batch_heads=q.shape[0] * q.shape[1],
        elem_size=q.element_size(),
        capability=cap,
        smem_budget=0 if cap is None else smem_budget(q.device),
        tma_aligned=all(tma_aligned(t) for t in (q, k, v, out)),
        env=env,
        kernel=kernel,
        table=None if cap is None else dispatch_table.table_for(gpu_name(q.device), env.table),
        dtype=str(q.dtype).removeprefix("torch."),
        group=q.shape[1] // max(1, k.shape[1]),
    )


# ----------------------------------------------------------------------------------------
# Kept launches
# ----------------------------------------------------------------------------------------
#
# An eager call used to cost 42-80 us of host time at S <= 1024 against 16-20 us for
# torch SDPA (H200): the checks, the config lookup and triton 3.6's JITFunction.run
# (binding and specializing 27 arguments, hashing the key, building launch metadata,
# calling an empty hook chain, asking the driver for the device of every pointer). The
# first call of a key runs all of that; it then keeps a plan: the compiled kernel's
# launcher, the grid and every scalar argument. A later call with the same key only
# builds the key, allocates ``out`` and calls the launcher with four raw pointers.


def _env_reader() -> Callable[[str], str | None]:
    # os.environ.get encodes the key on every call (~0.5 us each, three per call); the
    # mapping underneath answers in ~0.05 us and still sees os.environ[...] = ... and
    # monkeypatch.setenv at once. Falls back to os.environ off CPython.
    data, encode = getattr(os.environ, "_data", None), getattr(os.environ, "encodekey", None)
    if not isinstance(data, dict) or encode is None:
        return lambda name: os.environ.get(name)
    keys: dict[str, object] = {}

    def read(name: str) -> str | None:
        key = keys.get(name)
        if key is None:
            key = keys[name] = encode(name)
        value = data.get(key)
        return value if value is None or isinstance(value, str) else os.fsdecode(value)

    return read


getenv = _env_reader()

# The CUDA calls that triton's own launcher makes, without torch.cuda's Python layers:
# the current device's index, and the raw current stream of a device index.
_cuda_device: Callable[[], int] | None = getattr(torch._C, "_cuda_getDevice", None)
_cuda_stream: Callable[[int], int] | None = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def _no_launch_hooks() -> bool:
    # A profiler (proton) adds launch hooks; then the JIT path runs so they see the call.
    runtime = triton.knobs.runtime
    for hook in (runtime.launch_enter_hook, runtime.launch_exit_hook):
        if hook is not None and getattr(hook, "calls", True):
            return False
    return True


class LaunchPlan(Protocol):
    """A kept launch (Triton's or Gluon's): the kernel again on new tensors of its key."""

    def __call__(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor | None, /
    ) -> torch.Tensor: ...


# A kernel's scalar arguments after the tensors (bools are ints).
Scalars = tuple[int | float, ...]


def plans_possible() -> bool:
    """Whether a launch may be kept as a plan here: torch's raw device and stream
    getters exist, no launch hooks (a profiler) and a real driver: a GPU, and not the
    compile-only driver of ``kernel_reports/triton_compile.py`` (which a GPU runner's resource
    records run under, with torch.cuda available all the same)."""
    active = getattr(triton.runtime.driver, "_active", None)
    return (
        _cuda_device is not None
        and _cuda_stream is not None
        and _no_launch_hooks()
        and getattr(active, "launches", True)
        and torch.cuda.is_available()
    )


def c_entry_head(kernel: Any, launcher: Any) -> tuple[object, ...]:
    """The C launcher's arguments between the stream and the kernel's own: function,
    cooperative grid, PDL, the two scratch buffers (none), metadata, launch metadata
    and the enter and exit hooks (none: ``_no_launch_hooks``)."""
    return (
        kernel.function, launcher.launch_cooperative_grid, launcher.launch_pdl,
        None, None, kernel.packed_metadata, None, None, None,
    )  # fmt: skip


class PlanBase:
    """What every kept launch holds besides its launcher (Triton's, Gluon's)."""

    __slots__ = ("device", "device_index", "dtype", "grid", "head", "shape", "stream", "tail")
    head: tuple[object, ...]  # the launcher's arguments between the stream and the tensors
    grid: tuple[int, ...]
    tail: Scalars
    shape: torch.Size  # of q and out
    dtype: torch.dtype
    device: torch.device
    device_index: int
    stream: Callable[[int], int]  # _cuda_stream

    def bind(self, grid: Sequence[int], tail: Scalars, q: torch.Tensor) -> None:
        """Grid, scalars and the output's shape; the device current now (plans_possible)."""
        assert _cuda_device is not None and _cuda_stream is not None
        self.grid, self.tail = tuple(grid), tuple(tail)
        self.shape, self.dtype, self.device = q.shape, q.dtype, q.device
        self.device_index, self.stream = _cuda_device(), _cuda_stream


# Everything a launch depends on besides the data pointers (``plan_key``).
PlanKey = tuple[object, ...]
_MAX_PLANS = 4096  # a process that cycles through more shapes than this starts over


def plan_key(
    q: object, k: object, v: object, causal: object, scale: object, out: object
) -> PlanKey | None:
    """Everything a launch depends on besides the data pointers, or None (no fast path).

    Exact types only: ``causal=1`` or ``scale=True`` must still reach the checks (and
    their ValueError), though they hash like True and 1.0. The alignment of each pointer
    is part of the key because triton specializes the kernel on it.
    """
    if INTERPRET or type(q) is not torch.Tensor or type(k) is not torch.Tensor:
        return None
    if type(v) is not torch.Tensor or not q.is_cuda or _cuda_device is None:
        return None
    if (causal is not True and causal is not False) or not (scale is None or type(scale) is float):
        return None
    if out is None:
        out_key = None
    elif type(out) is torch.Tensor:
        out_key = (out.shape, out.stride(), out.dtype, out.get_device(), out.data_ptr() % 16)
    else:
        return None
    return (
        q.shape, k.shape, v.shape, q.stride(), k.stride(), v.stride(),
        q.dtype, k.dtype, v.dtype, q.get_device(), k.get_device(), v.get_device(),
        q.data_ptr() % 16, k.data_ptr() % 16, v.data_ptr() % 16,
        causal, scale, out_key, _cuda_device(),
        getenv(flash_plan.AUTOTUNE_ENV), getenv(flash_plan.WS_ENV), getenv(flash_plan.GLUON_ENV),
        getenv(dispatch_table.TABLE_ENV),
    )  # fmt: skip


# (prepared q, k, v, out, causal, scale, the choice) -> a kept launch, or None.
Launcher = Callable[
    [torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, bool, float, Choice],
    "LaunchPlan | None",
]


class Entry:
    """A public ``flash_attention_fwd``: kept plans per key, else check, choose, launch.

    ``kernel``: what ``flash_plan.choose`` is asked for; ``launch`` runs a choice;
    ``env`` adjusts the switches read from the environment (the entry point turns the
    Gluon kernel off where it cannot be imported).
    """

    def __init__(
        self, kernel: Kernel, launch: Launcher, env: Callable[[Env], Env] = lambda e: e
    ) -> None:
        self.kernel, self.launch, self.env = kernel, launch, env
        self.plans: dict[PlanKey, LaunchPlan] = {}

    def __call__(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        causal: bool,
        scale: float | None,
        out: torch.Tensor | None,
    ) -> torch.Tensor:
        key = plan_key(q, k, v, causal, scale, out)
        if key is not None:
            plan = self.plans.get(key)
            if plan is not None:
                return plan(q, k, v, out)
        # Any stride of the caller's tensors along head_dim other than 1 means a copy per
        # call; such keys take this path every time.
        unit = key is not None and q.stride(-1) == 1 and k.stride(-1) == 1 and v.stride(-1) == 1
        q, k, v, out, scale = prepare(q, k, v, causal, scale, out)
        if out.numel() == 0:
            return out
        env = self.env(Env.read(getenv, interpret=INTERPRET))
        # flash_plan.Unsupported (a ValueError) where the kernel asked for cannot run.
        choice = choose_for(q, k, v, out, causal, env, self.kernel)
        plan = self.launch(q, k, v, out, causal, scale, choice)
        if plan is not None and unit and key is not None:
            if len(self.plans) >= _MAX_PLANS:
                self.plans.clear()
            self.plans[key] = plan
        return out
