"""Inside a worker process: check one case's output, then time it.

Correctness: fresh random inputs from a recorded seed, a NaN-poisoned output buffer
with NaN guard regions on both sides (kernels that accept ``out=``), or a NaN-filled
block freed just before the call so the caching allocator hands it to the kernel
(kernels that allocate their own output); a float32 reference (float64 on the CPU);
relative-norm and max error against ``factor * yardstick + floor``; NaN/Inf fail.
The same test is applied, after a round's samples, to the output of the last timed call
(for a CUDA graph: its output buffer after the last replay), so a kernel that is right
on its first call and wrong afterwards is caught.

Timing on a GPU: a sample is one CUDA-graph replay of ``k`` calls, ``k`` sized so the
replay takes about ``sample_target_ms``, timed with a CUDA event pair and divided by
``k``. Beside it, a host-inclusive per-call time of plain eager calls (what a user
pays for launch-bound shapes). On the CPU: perf_counter around ``k`` calls.

A round prepares every case first, keeps the GPU busy for ``round_warmup_ms``, then
takes each case's samples in ``passes`` passes over all cases: GPU clocks drift on a
scale of about 100 ms (consecutive blocks of samples correlate, r = 0.43, on an
H200), so spreading a case's samples over the round averages that drift out instead
of letting one block's clock state decide the case.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from guard.measure.reference import attention_reference, yardstick_sdpa
from guard.store.results import Correctness
from guard.store.suite import Case, TimingPlan, Tolerance

if TYPE_CHECKING:
    # Not at run time: the worker imports the kernels package of the tree it measures.
    from kernels.registry import KernelFn

GUARD_ELEMS = 4096  # NaN guard region on each side of an ``out=`` buffer
# Beyond this many query-key pairs (batch x heads x seq_q x seq_k: 1 GB of float32
# scores) the reference is computed for a sample of SAMPLED_ROWS query rows (the first,
# the last, the rest drawn from the case's seed), against every key, a few heads at a time.
REFERENCE_PAIRS = 1 << 28
SAMPLED_ROWS = 256
CHUNK_PAIRS = 1 << 26  # query-key pairs of the sampled reference computed at once

DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}


class OutOfBoundsWrite(RuntimeError):
    """The kernel wrote into the guard region around its output buffer."""


def make_inputs(
    case: Case, seed: int, device: str
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Fresh standard-normal q, k, v for ``case`` (never zeros; seed recorded by the caller)."""
    gen = torch.Generator(device=device).manual_seed(seed)
    s, dtype = case.shape, DTYPES[case.dtype]

    def rand(heads: int, seq: int) -> torch.Tensor:
        shape = (s.batch, heads, seq, s.head_dim)
        return torch.randn(shape, generator=gen, device=device, dtype=torch.float32).to(dtype)

    return rand(s.heads, s.seq_q), rand(s.hkv, s.sk), rand(s.hkv, s.sk)


def _errors(out: torch.Tensor, ref: torch.Tensor) -> tuple[float, float]:
    diff = out.to(ref.dtype) - ref
    rel = float(torch.linalg.vector_norm(diff) / torch.linalg.vector_norm(ref).clamp_min(1e-30))
    return rel, float(diff.abs().max()) if diff.numel() else 0.0


def call_kernel(
    fn: KernelFn,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool,
    accepts_out: bool,
) -> torch.Tensor:
    """Run ``fn`` once on a NaN-poisoned output; raise OutOfBoundsWrite on a stray write."""
    if accepts_out:
        flat = torch.full((q.numel() + 2 * GUARD_ELEMS,), math.nan, dtype=q.dtype, device=q.device)
        out = flat[GUARD_ELEMS : GUARD_ELEMS + q.numel()].view(q.shape)
        result = fn(q, k, v, causal=causal, out=out)
        if q.device.type == "cuda":
            torch.cuda.synchronize()
        if not (torch.isnan(flat[:GUARD_ELEMS]).all() and torch.isnan(flat[-GUARD_ELEMS:]).all()):
            raise OutOfBoundsWrite(
                "the kernel wrote outside its output buffer (guard region changed)"
            )
        if result is not None and result.data_ptr() != out.data_ptr():
            return result
        return out
    # Best effort for kernels that allocate: leave a NaN block of the output's size in
    # the caching allocator's free list, where the kernel's allocation will find it.
    poison = torch.full(q.shape, math.nan, dtype=q.dtype, device=q.device)
    del poison
    result = fn(q, k, v, causal=causal)
    if q.device.type == "cuda":
        torch.cuda.synchronize()
    return result


def sampled_rows(q: torch.Tensor, k: torch.Tensor, seed: int) -> torch.Tensor | None:
    """The query rows a long case's reference covers (None: every row): the first, the
    last, and the rest of ``SAMPLED_ROWS`` drawn without replacement from ``seed``."""
    batch, heads, seq_q, _ = q.shape
    if batch * heads * seq_q * k.shape[2] <= REFERENCE_PAIRS or seq_q <= SAMPLED_ROWS:
        return None
    gen = torch.Generator().manual_seed(seed)
    inner = torch.randperm(seq_q - 2, generator=gen)[: SAMPLED_ROWS - 2] + 1
    rows = torch.cat([torch.tensor([0, seq_q - 1]), inner]).sort().values
    return rows.to(q.device)


def reference_rows(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool,
    rows: torch.Tensor,
    dtype: torch.dtype,
) -> torch.Tensor:
    """The reference's output at query ``rows`` (every key), a few heads at a time so
    that no more than ``CHUNK_PAIRS`` scores exist at once."""
    batch, heads, _, _ = q.shape
    group = heads // k.shape[1]
    pairs_per_head = batch * len(rows) * k.shape[2]
    step = max(group, CHUNK_PAIRS // max(pairs_per_head, 1) // group * group)
    parts = []
    for h0 in range(0, heads, step):
        h1 = min(heads, h0 + step)
        kv = slice(h0 // group, -(-h1 // group))
        parts.append(
            attention_reference(
                q[:, h0:h1, rows], k[:, kv], v[:, kv], causal=causal, dtype=dtype, rows=rows
            )
        )
    return torch.cat(parts, dim=1)


@dataclass(frozen=True)
class Yardstick:
    """The high-precision reference for one set of inputs, and the error bounds.
    ``rows``: the query rows the reference covers (None: all of them)."""

    ref: torch.Tensor
    rel_bound: float
    max_bound: float
    yard_rel: float
    seed: int
    rows: torch.Tensor | None = None

    @classmethod
    def of(
        cls,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        causal: bool,
        tol: Tolerance,
        seed: int,
    ) -> Yardstick:
        """float32 reference (float64 on the CPU); bounds from SDPA's own error (both
        the guard's, ``guard.measure.reference``). A long case's reference covers a
        sample of its query rows (``sampled_rows``)."""
        ref_dtype = torch.float64 if q.device.type == "cpu" else torch.float32
        rows = sampled_rows(q, k, seed)
        if rows is None:
            ref = attention_reference(q, k, v, causal=causal, dtype=ref_dtype)
            yard = yardstick_sdpa(q, k, v, causal)
        else:
            ref = reference_rows(q, k, v, causal, rows, ref_dtype)
            yard = yardstick_sdpa(q, k, v, causal)[:, :, rows]
        yard_rel, yard_max = _errors(yard, ref)
        del yard
        rel_bound = tol.factor * yard_rel + tol.rel_norm_floor
        max_bound = tol.factor * yard_max + tol.max_abs_floor
        return cls(ref, rel_bound, max_bound, yard_rel, seed, rows)


def check(
    fn: KernelFn, case: Case, tol: Tolerance, seed: int, device: str, accepts_out: bool
) -> Correctness:
    """Compare the kernel with a high-precision reference on fresh inputs."""
    q, k, v = make_inputs(case, seed, device)
    yard = Yardstick.of(q, k, v, case.causal, tol, seed)
    return judge(call_kernel(fn, q, k, v, case.causal, accepts_out), q, yard)


def unfinished(out: Any, q: torch.Tensor) -> str:
    """Why ``out`` cannot be ``q``'s attention output (not a tensor, another shape or
    dtype, NaN or Inf: unwritten), or "" when it can."""
    if not isinstance(out, torch.Tensor):
        return f"returned {type(out).__name__}, not a tensor"
    if tuple(out.shape) != tuple(q.shape):
        return f"output shape {tuple(out.shape)}, expected {tuple(q.shape)}"
    if out.dtype != q.dtype:
        return f"output dtype {out.dtype}, expected {q.dtype}"
    finite = torch.isfinite(out)
    if not bool(finite.all()):
        bad = int((~finite).sum())
        return f"{bad} of {out.numel()} outputs are NaN/Inf (or unwritten)"
    return ""


def judge(out: Any, q: torch.Tensor, yard: Yardstick) -> Correctness:
    """Whether ``out`` is the attention output for ``q`` within ``yard``'s bounds."""
    ref, rel_bound, max_bound = yard.ref, yard.rel_bound, yard.max_bound

    def result(
        passed: bool, rel: float | None = None, mx: float | None = None, message: str = ""
    ) -> Correctness:
        return Correctness(passed, rel, mx, rel_bound, max_bound, yard.yard_rel, yard.seed, message)

    problem = unfinished(out, q)  # every row: NaN anywhere fails
    if problem:
        return result(False, message=problem)
    rel, mx = _errors(out if yard.rows is None else out[:, :, yard.rows], ref)
    if rel > rel_bound or mx > max_bound:
        return result(
            False,
            rel,
            mx,
            f"error over tolerance: rel-norm {rel:.3g} (bound {rel_bound:.3g}), "
            f"max {mx:.3g} (bound {max_bound:.3g})",
        )
    return result(True, rel, mx)


@dataclass(frozen=True)
class Timing:
    samples: tuple[float, ...]  # seconds per call
    host_samples: tuple[float, ...]  # host-inclusive seconds per call
    method: str
    calls_per_sample: int


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _timing_event() -> torch.cuda.Event:
    # torch leaves Event.__new__ unannotated.
    return torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]


def _host_per_call(run: Callable[[], object], device: str, calls: int, n: int) -> tuple[float, ...]:
    out = []
    for _ in range(n):
        _sync(device)
        t0 = time.perf_counter()
        for _ in range(calls):
            run()
        _sync(device)
        out.append((time.perf_counter() - t0) / calls)
    return tuple(out)


class Prepared:
    """One case ready to sample: inputs made, warmed up, captured in a CUDA graph.

    A sample is one replay of ``calls`` calls (about ``sample_target_ms`` of GPU time)
    timed with an event pair, divided by ``calls``. On the CPU, perf_counter instead.
    """

    def __init__(self, fn: KernelFn, case: Case, plan: TimingPlan, seed: int, device: str):
        self.device = device
        self.case, self.seed, self.plan = case, seed, plan
        q, k, v = make_inputs(case, seed, device)
        self._inputs = (q, k, v)

        def run() -> object:
            return fn(q, k, v, causal=case.causal)

        self._run = run
        self._out: object = None  # the last timed call's output (a graph's static output)
        # Warm up (compilation, autotune lookups, cuDNN plans) and estimate one call.
        run()
        _sync(device)
        t0 = time.perf_counter()
        n = 0
        while n < 3 or (time.perf_counter() - t0) * 1e3 < plan.warmup_ms:
            run()
            n += 1
            if n % 8 == 0:
                _sync(device)
        _sync(device)
        per_call = (time.perf_counter() - t0) / n
        self.calls = max(1, min(10_000, round(plan.sample_target_ms * 1e-3 / max(per_call, 1e-9))))
        self.samples = samples_for(plan, per_call * self.calls)
        self.host = _host_per_call(run, device, self.calls, plan.host_samples)
        self.method = "cpu-timer" if device != "cuda" else "cuda-graph"
        self._replay: Callable[[], None] = self._eager
        if device == "cuda":
            try:
                self._replay = self._capture()
            except Exception:  # some backends cannot be captured: time eager calls
                torch.cuda.synchronize()
                self.method = "cuda-events"
            self._start = _timing_event()
            self._end = _timing_event()

    def _eager(self) -> None:
        self._out = None  # free the previous output first, as plain calls would
        for _ in range(self.calls - 1):
            self._run()
        self._out = self._run()  # kept for ``verify``

    def _capture(self) -> Callable[[], None]:
        # torch leaves Stream.__new__ unannotated.
        stream = torch.cuda.Stream()  # type: ignore[no-untyped-call]
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            self._run()  # a warm call on the capture stream
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(self.calls - 1):
                self._run()
            out = self._run()
        self._graph = graph  # keep it (and its memory pool) alive
        self._out = out  # the last call's output, rewritten by every replay
        graph.replay()
        torch.cuda.synchronize()
        return graph.replay

    def spin(self) -> None:
        """One untimed replay (keeps the GPU busy during the round's warm-up)."""
        self._replay()

    def sample(self, n: int, sustained: bool | None = None) -> list[float]:
        """``n`` samples, after one untimed replay: the first replay after another case
        ran is about 10% slow (H200, calibration pool 2), a cold start, not the kernel.

        ``sustained``: the replays are queued back to back with an event between each
        two and one synchronization at the end, so the GPU never idles. Power-capped
        shapes then run at the clock they hold under load (an H200 at its 700 W cap
        drops from 1980 MHz to 1500-1750 at hd 128), which is what a user's training
        step sees; one synchronized sample at a time lets the GPU idle and boost.
        """
        self._replay()
        if sustained is None:
            sustained = self.plan.load == "sustained"
        if sustained and self.device == "cuda":
            events = [_timing_event() for _ in range(n + 1)]
            events[0].record()
            for i in range(n):
                self._replay()
                events[i + 1].record()
            events[-1].synchronize()
            return [events[i].elapsed_time(events[i + 1]) * 1e-3 / self.calls for i in range(n)]
        out = []
        for _ in range(n):
            if self.device == "cuda":
                self._start.record()
                self._replay()
                self._end.record()
                self._end.synchronize()
                out.append(self._start.elapsed_time(self._end) * 1e-3 / self.calls)
            else:
                t0 = time.perf_counter()
                self._replay()
                out.append((time.perf_counter() - t0) / self.calls)
        return out

    def verify(self, tol: Tolerance) -> Correctness:
        """Check the output of the last timed call (for a CUDA graph: its output buffer
        after the last replay) against the reference, as the correctness check does."""
        _sync(self.device)
        q, k, v = self._inputs
        return judge(self._out, q, Yardstick.of(q, k, v, self.case.causal, tol, self.seed))


def warm_round(
    prepared: list[Prepared],
    plan: TimingPlan,
    on_spin: Callable[[Prepared], None] | None = None,
) -> None:
    """Keep the GPU busy for ``round_warmup_ms`` before any sample is taken.

    Measured on an H200 (calibration pool, 74 rounds): without it the first case
    timed in a fresh process ran 2.8% faster than the same case later in the round,
    as clocks settle under sustained load. ``on_spin`` is told before each case's
    replay (the worker announces the case, so a crash there is blamed on it).
    """
    if not prepared or prepared[0].device != "cuda":
        return
    t0 = time.perf_counter()
    while (time.perf_counter() - t0) * 1e3 < plan.round_warmup_ms:
        for p in prepared:
            if on_spin is not None:
                on_spin(p)
            p.spin()
        torch.cuda.synchronize()


def samples_for(plan: TimingPlan, sample_s: float) -> int:
    """A case's samples per round: ``samples_per_round``, fewer where a sample lasts
    long (a call of milliseconds), so that a round spends about ``case_budget_ms`` on
    it, never fewer than ``min_samples``. The decision rests on the rounds' medians."""
    fits = int(plan.case_budget_ms * 1e-3 / max(sample_s, 1e-9))
    return max(min(plan.min_samples, plan.samples_per_round), min(plan.samples_per_round, fits))


def pass_sizes(plan: TimingPlan, samples: int | None = None) -> list[int]:
    """Split ``samples`` (``samples_per_round``) over ``passes`` (the first passes take
    the rest)."""
    total = plan.samples_per_round if samples is None else samples
    passes = max(1, min(plan.passes, total))
    base, extra = divmod(total, passes)
    return [base + (1 if i < extra else 0) for i in range(passes)]


def time_case(fn: KernelFn, case: Case, plan: TimingPlan, seed: int, device: str) -> Timing:
    """Time one case on its own (all samples in one block)."""
    prepared = Prepared(fn, case, plan, seed, device)
    warm_round([prepared], plan)
    samples = prepared.sample(prepared.samples)
    return Timing(tuple(samples), prepared.host, prepared.method, prepared.calls)
