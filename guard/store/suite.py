"""The suite file: which kernels run on which shapes, with what tolerances and thresholds.

The file is YAML (see ``suites/default.yaml``); ``load_suite`` validates every field
and raises ``BadInput`` naming the file and the field at fault.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from guard.base import files, limits, stats
from guard.base.errors import BadInput, shown
from guard.base.stats import Threshold

SUITE_SCHEMA_VERSION = 1
DTYPES = ("float16", "bfloat16", "float32")
DEVICES = ("cpu", "cuda")
# A kernel named by where it lives in the tree under test: ``pkg.module:function``.
MODULE_KERNEL = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*")


def is_module_kernel(name: str) -> bool:
    """Whether ``name`` names a function in a module (``pkg.module:function``) rather
    than an entry of the tree's ``kernels/registry.py``."""
    return ":" in name


@dataclass(frozen=True)
class KernelOptions:
    """What the guard needs to know of a ``module:function`` kernel (a suite's
    ``kernel_options``): whether it takes ``out=`` (the guard then poisons that buffer),
    and the devices it runs on."""

    accepts_out: bool = False
    devices: tuple[str, ...] = DEVICES

    def unavailable_reason(self, device: str) -> str | None:
        """Why the kernel cannot run on ``device`` (None: it can, as far as the suite says)."""
        if device not in self.devices:
            return f"runs on {', '.join(self.devices)} only (the suite's kernel_options)"
        return None

    def to_json(self) -> dict[str, Any]:
        return {"accepts_out": self.accepts_out, "devices": list(self.devices)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> KernelOptions:
        return cls(bool(data.get("accepts_out", False)), tuple(data.get("devices", DEVICES)))


@dataclass(frozen=True)
class Shape:
    """(batch, heads, seq_q, head_dim); seq_k and kv_heads default to seq_q and heads."""

    batch: int
    heads: int
    seq_q: int
    head_dim: int
    seq_k: int | None = None
    kv_heads: int | None = None

    @property
    def sk(self) -> int:
        return self.seq_q if self.seq_k is None else self.seq_k

    @property
    def hkv(self) -> int:
        return self.heads if self.kv_heads is None else self.kv_heads

    def label(self) -> str:
        text = f"b{self.batch}-h{self.heads}-s{self.seq_q}-d{self.head_dim}"
        if self.seq_k is not None and self.seq_k != self.seq_q:
            text += f"-sk{self.seq_k}"
        if self.kv_heads is not None and self.kv_heads != self.heads:
            text += f"-kv{self.kv_heads}"
        return text

    def as_tuple(self) -> tuple[int, int, int, int]:
        return (self.batch, self.heads, self.seq_q, self.head_dim)


def flops(shape: Shape, causal: bool) -> float:
    """Forward attention FLOPs: 4*B*H*Sq*Sk*D, half of that when causal."""
    total = 4.0 * shape.batch * shape.heads * shape.seq_q * shape.sk * shape.head_dim
    return total / 2.0 if causal else total


@dataclass(frozen=True)
class Case:
    """One kernel on one workload. ``id`` is unique within a suite."""

    name: str  # the workload's name, shared by every kernel measured on it
    kernel: str
    shape: Shape
    dtype: str
    causal: bool
    threshold: Threshold
    gate: bool  # a significant regression of this case fails the check

    @property
    def id(self) -> str:
        return f"{self.kernel}/{self.name}"

    def params(self) -> dict[str, Any]:
        """What must match for a baseline of this case to be comparable."""
        return {
            "kernel": self.kernel,
            "shape": list(self.shape.as_tuple()),
            "seq_k": self.shape.sk,
            "kv_heads": self.shape.hkv,
            "dtype": self.dtype,
            "causal": self.causal,
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kernel": self.kernel,
            "shape": asdict(self.shape),
            "dtype": self.dtype,
            "causal": self.causal,
            "threshold": str(self.threshold),
            "gate": self.gate,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Case:
        return cls(
            name=data["name"],
            kernel=data["kernel"],
            shape=Shape(**data["shape"]),
            dtype=data["dtype"],
            causal=bool(data["causal"]),
            threshold=Threshold.parse(data["threshold"]),
            gate=bool(data["gate"]),
        )


@dataclass(frozen=True)
class Tolerance:
    """Pass when error <= factor * (same-precision torch SDPA's error) + floor.

    The yardstick is torch's own result in the input dtype against the same float32
    reference, so the bound follows the precision actually reachable on each input.
    """

    factor: float = 2.0
    rel_norm_floor: float = 1e-3
    max_abs_floor: float = 4e-3


LOADS = ("sustained", "bursts")


@dataclass(frozen=True)
class TimingPlan:
    """How much to measure. ``rounds`` fresh processes per arm, more (up to
    ``max_rounds``) for cases still inconclusive; each sample is a CUDA-graph replay
    of enough calls to fill ``sample_target_ms``."""

    rounds: int = 6
    max_rounds: int = 12
    samples_per_round: int = 25
    sample_target_ms: float = 1.0
    warmup_ms: float = 25.0
    # A case whose samples last long (calls of milliseconds) takes fewer of them a
    # round: about this much time, never fewer than min_samples (measure.samples_for).
    case_budget_ms: float = 150.0
    min_samples: int = 5
    host_samples: int = 5
    passes: int = 5  # samples of a case are spread over this many passes of the round
    round_warmup_ms: float = 300.0  # GPU kept busy before the first sample of a round
    case_timeout_s: float = 180.0
    # Resident memory of one worker process, at most half the machine's: beyond it the
    # case it runs is a crash, named with the limit (runner.worker_rss).
    memory_gb: float = 16.0
    alpha: float = 0.01  # whole-check false-alarm rate the intervals are sized for
    # The noise floor a regression must clear when both trees run on one machine,
    # interleaved (calibrated: docs/CALIBRATION.md), and the drift between machines or
    # days of one GPU model that a stored baseline adds on top (measured on several).
    margin: float = 0.005
    drift: float = 0.03
    # "sustained": a pass's samples are queued back to back (no host sync between
    # them), so the GPU never idles and runs at the clock and power it holds under
    # load; "bursts": one sample at a time, synchronized (the GPU idles between).
    load: str = "sustained"


@dataclass(frozen=True)
class Suite:
    name: str
    cases: tuple[Case, ...]
    tolerances: dict[str, Tolerance]
    timing: TimingPlan
    cpu_timing: TimingPlan
    source: str = ""
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    full_hash: str = ""  # the whole file's hash, kept when cases are selected
    # The surface (``surface:``, a file beside the suite's): more cases under this
    # suite's policy, which a paired check adds where a change reaches them.
    surface: tuple[Case, ...] = ()
    surface_source: str = ""
    # The ``module:function`` kernels' options (``kernel_options:``); every such kernel
    # of the suite has an entry, the defaults where the file gives none.
    kernel_options: dict[str, KernelOptions] = field(default_factory=dict)

    @property
    def uses_registry(self) -> bool:
        """Whether a case (or surface case) names a kernel of the tree's
        ``kernels/registry.py``: only then must the tree have a ``kernels`` package."""
        return any(not is_module_kernel(c.kernel) for c in (*self.cases, *self.surface))

    @property
    def hash(self) -> str:
        """Hash of what decides correctness and comparability (not the timing plan).

        A selection (``--kernels``, ``--cases``) keeps the hash of the whole suite, so a
        partial run is not reported as a changed suite."""
        return self.full_hash or self._content_hash()

    def _content_hash(self) -> str:
        payload = {
            "name": self.name,
            "cases": [c.to_json() for c in self.cases],
            "tolerances": {k: asdict(v) for k, v in sorted(self.tolerances.items())},
        }
        if self.kernel_options:  # absent from suites of registry kernels: their hash stays
            payload["kernel_options"] = {
                k: v.to_json() for k, v in sorted(self.kernel_options.items())
            }
        text = json.dumps(payload, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def select(self, kernels: list[str] | None = None, names: list[str] | None = None) -> Suite:
        """The cases whose kernel and workload name are among those given."""
        cases = self.cases
        if kernels:
            unknown = sorted(set(kernels) - {c.kernel for c in self.cases})
            if unknown:
                raise BadInput(f"{self.source}: no case uses kernel(s) {', '.join(unknown)}")
            cases = tuple(c for c in cases if c.kernel in kernels)
        if names:
            unknown = sorted(set(names) - {c.name for c in self.cases})
            if unknown:
                raise BadInput(f"{self.source}: no case named {', '.join(unknown)}")
            cases = tuple(c for c in cases if c.name in names)
        surface = tuple(c for c in self.surface if not kernels or c.kernel in kernels)
        return replace(self, cases=cases, full_hash=self.hash, surface=surface)

    def extra_surface(self) -> tuple[Case, ...]:
        """The surface's cases that are not already cases of the suite (by id)."""
        ids = {c.id for c in self.cases}
        return tuple(c for c in self.surface if c.id not in ids)

    def with_cases(self, cases: tuple[Case, ...]) -> Suite:
        """This suite (its policy, its hash) measuring ``cases``."""
        return replace(self, cases=cases, full_hash=self.hash)

    def document(self) -> dict[str, Any]:
        """A suite file's content that loads back to this suite's cases and policy
        (every case's workload written out, no surface): what a child process reads."""
        data = {k: v for k, v in self.raw.items() if k not in ("cases", "surface")}
        workloads: dict[str, dict[str, Any]] = {}
        for c in self.cases:
            entry = workloads.setdefault(
                c.name,
                {
                    "name": c.name,
                    "shape": list(c.shape.as_tuple()),
                    "seq_k": c.shape.sk,
                    "kv_heads": c.shape.hkv,
                    "dtype": c.dtype,
                    "causal": c.causal,
                    "threshold": str(c.threshold),
                    "kernels": [],
                },
            )
            entry["kernels"].append(c.kernel)
        data["cases"] = list(workloads.values())
        return data

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "hash": self.hash,
            "source": self.source,
            "cases": [c.to_json() for c in self.cases],
            "tolerances": {k: asdict(v) for k, v in self.tolerances.items()},
            "timing": asdict(self.timing),
        }


# ---------------------------------------------------------------- validation helpers


def _fail(source: str, where: str, msg: str) -> BadInput:
    return BadInput(f"{source}: {where}: {msg}")


def _positive_int(value: Any, source: str, where: str, most: int = limits.MAX_DIMENSION) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= most:
        raise _fail(source, where, f"must be an integer from 1 to {most}, got {shown(value)}")
    return value


def _positive_float(value: Any, source: str, where: str, *, allow_zero: bool = False) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if ok:
        try:
            number = float(value)
        except OverflowError:  # an integer with hundreds of digits
            number = math.inf
        ok = math.isfinite(number) and (number > 0 or (allow_zero and number == 0))
    if not ok:
        raise _fail(source, where, f"must be a finite positive number, got {shown(value)}")
    return number


def _mapping(value: Any, source: str, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _fail(source, where, f"must be a mapping, got {type(value).__name__}")
    return value


def _header(data: dict[str, Any], source: str) -> str:
    """A suite's or surface file's ``schema_version`` (this guard's) and ``name``."""
    version = data.get("schema_version")
    if version != SUITE_SCHEMA_VERSION:
        raise _fail(
            source, "schema_version", f"expected {SUITE_SCHEMA_VERSION}, got {shown(version)}"
        )
    name = data.get("name")
    if not isinstance(name, str) or not name.strip():
        raise _fail(source, "name", "must be a non-empty string")
    return name


def _no_unknown(data: dict[str, Any], allowed: set[str], source: str, where: str) -> None:
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise _fail(source, where, f"unknown field(s) {shown(unknown)}")


def _threshold(value: Any, source: str, where: str) -> Threshold:
    try:
        threshold = Threshold.parse(value)
    except ValueError as exc:
        raise _fail(source, where, str(exc)) from None
    if threshold.statistic != "median":  # min:N% is for pytest-benchmark rounds on a CPU
        why = f"{shown(value)}: a suite's cases are decided on medians (median:N%)"
        raise _fail(source, where, why)
    return threshold


# What a worker may be asked to measure: no more than a results file may hold.
_TIMING_MOST = {
    "rounds": limits.MAX_ROUNDS_PER_CASE,
    "max_rounds": limits.MAX_ROUNDS_PER_CASE,
    "samples_per_round": limits.MAX_SAMPLES_PER_ROUND,
    "min_samples": limits.MAX_SAMPLES_PER_ROUND,
    "host_samples": limits.MAX_SAMPLES_PER_ROUND,
}


def _timing(data: Any, source: str, where: str, base: TimingPlan) -> TimingPlan:
    data = _mapping(data, source, where)
    fields = set(TimingPlan.__dataclass_fields__)
    _no_unknown(data, fields, source, where)
    values: dict[str, Any] = {}
    for key, value in data.items():
        default = getattr(base, key)
        if key == "load":
            if value not in LOADS:
                raise _fail(source, f"{where}.load", f"must be one of {', '.join(LOADS)}")
            values[key] = value
        elif isinstance(default, int):
            most = _TIMING_MOST.get(key, limits.MAX_DIMENSION)
            values[key] = _positive_int(value, source, f"{where}.{key}", most)
        else:
            values[key] = _positive_float(value, source, f"{where}.{key}")
    plan = replace(base, **values)
    if plan.rounds < 2:
        raise _fail(source, f"{where}.rounds", "needs at least 2 rounds for an interval")
    if plan.max_rounds < plan.rounds:
        raise _fail(source, f"{where}.max_rounds", "must be at least rounds")
    for key in ("samples_per_round", "host_samples"):
        if plan.max_rounds * getattr(plan, key) > limits.MAX_SAMPLES_PER_CASE:
            raise _fail(
                source,
                f"{where}.{key}",
                f"times max_rounds ({plan.max_rounds}) exceeds the limit of "
                f"{limits.MAX_SAMPLES_PER_CASE} samples per case",
            )
    try:
        stats.check_alpha(plan.alpha)
    except ValueError as exc:
        raise _fail(source, f"{where}.alpha", str(exc)) from None
    for key in ("margin", "drift"):
        if not 0.0 < getattr(plan, key) < 0.5:
            raise _fail(source, f"{where}.{key}", "must lie in (0, 0.5)")
    return plan


def timing_plan(data: Any, source: str, where: str = "timing") -> TimingPlan:
    """A timing plan read from elsewhere (a shard's evidence), validated as a suite's
    ``timing:`` is: every number within the same bounds; BadInput naming the field."""
    return _timing(data, source, where, TimingPlan())


def _shape(value: Any, source: str, where: str) -> Shape:
    if not isinstance(value, (list, tuple)) or len(value) != 4:
        raise _fail(source, where, f"must be [batch, heads, seq_len, head_dim], got {shown(value)}")
    dims = [_positive_int(v, source, f"{where}[{i}]") for i, v in enumerate(value)]
    return Shape(*dims)


def parse_suite(data: Any, source: str, known_kernels: set[str]) -> Suite:
    """Validate a parsed suite document; raise BadInput naming the field at fault."""
    if not isinstance(data, dict):
        raise BadInput(f"{source}: the suite must be a YAML mapping")
    _no_unknown(
        data,
        {
            "schema_version",
            "name",
            "kernels",
            "gate",
            "threshold",
            "tolerances",
            "timing",
            "cpu_timing",
            "cases",
            "surface",
            "kernel_options",
        },
        source,
        "top level",
    )
    name = _header(data, source)

    kernels = data.get("kernels")
    if not isinstance(kernels, list) or not kernels or not all(isinstance(k, str) for k in kernels):
        raise _fail(source, "kernels", "must be a non-empty list of kernel names")
    for i, k in enumerate(kernels):
        if is_module_kernel(k):
            if not MODULE_KERNEL.fullmatch(k):
                raise _fail(
                    source,
                    f"kernels[{i}]",
                    f"{shown(k)} is not a module:function name (like toy_attention.ops:attention)",
                )
        elif k not in known_kernels:
            known = ", ".join(sorted(known_kernels)) or "none: no kernels/registry.py"
            raise _fail(
                source,
                f"kernels[{i}]",
                f"unknown kernel {shown(k)} (known: {known}; or name a function as "
                "pkg.module:function)",
            )
    if len(set(kernels)) != len(kernels):
        raise _fail(source, "kernels", "lists a kernel twice")
    gate = data.get("gate", kernels)
    if not isinstance(gate, list) or not all(isinstance(g, str) and g in kernels for g in gate):
        raise _fail(source, "gate", "must list kernels that appear under 'kernels'")

    default_threshold = _threshold(data.get("threshold", "median:2%"), source, "threshold")

    tolerances: dict[str, Tolerance] = {}
    for dtype, tol in _mapping(data.get("tolerances"), source, "tolerances").items():
        where = f"tolerances.{dtype}"
        if dtype not in DTYPES:
            raise _fail(source, where, f"unknown dtype {shown(dtype)} (known: {', '.join(DTYPES)})")
        tol = _mapping(tol, source, where)
        _no_unknown(tol, set(Tolerance.__dataclass_fields__), source, where)
        tolerances[dtype] = Tolerance(
            **{
                k: _positive_float(v, source, f"{where}.{k}", allow_zero=True)
                for k, v in tol.items()
            }
        )

    timing = _timing(data.get("timing"), source, "timing", TimingPlan())
    cpu_timing = _timing(
        data.get("cpu_timing"),
        source,
        "cpu_timing",
        replace(
            timing,
            rounds=3,
            max_rounds=3,
            samples_per_round=5,
            sample_target_ms=5.0,
            warmup_ms=5.0,
            host_samples=2,
        ),
    )

    surface = data.get("surface")
    if surface is not None and not _surface_name(surface):
        raise _fail(
            source, "surface", f"must be a file name beside the suite file, got {shown(surface)}"
        )
    cases = _cases(data.get("cases"), source, kernels, gate, default_threshold, timing)
    return Suite(
        name=name,
        cases=tuple(cases),
        tolerances=tolerances,
        timing=timing,
        cpu_timing=cpu_timing,
        source=source,
        raw=data,
        kernel_options=_kernel_options(data.get("kernel_options"), source, kernels),
    )


def _kernel_options(data: Any, source: str, kernels: list[str]) -> dict[str, KernelOptions]:
    """Each ``module:function`` kernel's options: ``accepts_out`` (default false) and
    ``devices`` (default every one), from the ``kernel_options`` mapping."""
    given = _mapping(data, source, "kernel_options")
    out: dict[str, KernelOptions] = {}
    for kernel, raw in given.items():
        where = f"kernel_options.{kernel}"
        if not isinstance(kernel, str) or not is_module_kernel(kernel) or kernel not in kernels:
            raise _fail(source, where, "must name a module:function kernel listed under 'kernels'")
        entry = _mapping(raw, source, where)
        _no_unknown(entry, {"accepts_out", "devices"}, source, where)
        accepts_out = entry.get("accepts_out", False)
        if not isinstance(accepts_out, bool):
            raise _fail(
                source, f"{where}.accepts_out", f"must be true or false, got {shown(accepts_out)}"
            )
        devices = entry.get("devices", list(DEVICES))
        if (
            not isinstance(devices, list)
            or not devices
            or not all(isinstance(d, str) and d in DEVICES for d in devices)
            or len(set(devices)) != len(devices)
        ):
            raise _fail(
                source,
                f"{where}.devices",
                f"must be a non-empty list of {', '.join(DEVICES)}, got {shown(devices)}",
            )
        out[kernel] = KernelOptions(accepts_out, tuple(devices))
    for kernel in kernels:
        if is_module_kernel(kernel):
            out.setdefault(kernel, KernelOptions())
    return out


def _surface_name(value: Any) -> bool:
    """A plain file name (no folder, no "..", no hidden file): the surface lies beside
    the suite file that names it."""
    return (
        isinstance(value, str)
        and 0 < len(value) <= 255
        and "/" not in value
        and "\\" not in value
        and not value.startswith(".")
        and "\0" not in value
    )


def _cases(
    raw_cases: Any,
    source: str,
    kernels: list[str],
    gate: list[str],
    default_threshold: Threshold,
    timing: TimingPlan,
) -> list[Case]:
    """The cases of a ``cases:`` list, each workload times its kernels."""
    if not isinstance(raw_cases, list) or not raw_cases:
        raise _fail(source, "cases", "must be a non-empty list")
    cases: list[Case] = []
    names: set[str] = set()
    for i, entry in enumerate(raw_cases):
        where = f"cases[{i}]"
        entry = _mapping(entry, source, where)
        _no_unknown(
            entry,
            {"name", "shape", "dtype", "causal", "threshold", "seq_k", "kv_heads", "kernels"},
            source,
            where,
        )
        shape = _shape(entry.get("shape"), source, f"{where}.shape")
        if "seq_k" in entry:
            shape = replace(shape, seq_k=_positive_int(entry["seq_k"], source, f"{where}.seq_k"))
        if "kv_heads" in entry:
            kvh = _positive_int(entry["kv_heads"], source, f"{where}.kv_heads")
            if shape.heads % kvh:
                raise _fail(source, f"{where}.kv_heads", f"must divide heads ({shape.heads})")
            shape = replace(shape, kv_heads=kvh)
        dtype = entry.get("dtype", "float16")
        if dtype not in DTYPES:
            raise _fail(
                source,
                f"{where}.dtype",
                f"unknown dtype {shown(dtype)} (known: {', '.join(DTYPES)})",
            )
        causal = entry.get("causal", False)
        if not isinstance(causal, bool):
            raise _fail(source, f"{where}.causal", f"must be true or false, got {shown(causal)}")
        case_name = entry.get("name") or (
            f"{shape.label()}-{'causal' if causal else 'full'}"
            + ("" if dtype == "float16" else f"-{dtype}")
        )
        if not isinstance(case_name, str) or "/" in case_name or "\\" in case_name:
            raise _fail(
                source,
                f"{where}.name",
                f"must be a string without path separators, got {shown(case_name)}",
            )
        if case_name in names:
            raise _fail(source, f"{where}.name", f"duplicate case name {shown(case_name)}")
        names.add(case_name)
        threshold = (
            _threshold(entry["threshold"], source, f"{where}.threshold")
            if "threshold" in entry
            else default_threshold
        )
        if threshold.min_effect <= timing.margin:
            raise _fail(
                source,
                f"{where}.threshold" if "threshold" in entry else "threshold",
                f"{threshold} must exceed timing.margin ({timing.margin:g}), the noise floor",
            )
        case_kernels = entry.get("kernels", kernels)
        if not isinstance(case_kernels, list) or not all(k in kernels for k in case_kernels):
            raise _fail(source, f"{where}.kernels", "must list kernels that appear under 'kernels'")
        for kernel in case_kernels:
            cases.append(Case(case_name, kernel, shape, dtype, causal, threshold, kernel in gate))
    return cases


class _SuiteLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` minus what a suite never needs and an attacker can use:
    aliases (``*name``: a "billion laughs" file expands to gigabytes), nesting deeper
    than ``MAX_SUITE_DEPTH`` (a deep file exhausts the recursive composer), and
    duplicate keys (which YAML resolves silently in favour of the last one)."""

    _depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        # peek_event is unannotated in types-PyYAML: the two ignores below.
        if self.check_event(yaml.AliasEvent):
            raise yaml.composer.ComposerError(
                None,
                None,
                "aliases (*name) are not allowed in a suite file",
                self.peek_event().start_mark,  # type: ignore[no-untyped-call]
            )
        if self._depth >= limits.MAX_SUITE_DEPTH:
            raise yaml.composer.ComposerError(
                None,
                None,
                f"nested deeper than {limits.MAX_SUITE_DEPTH} levels",
                self.peek_event().start_mark,  # type: ignore[no-untyped-call]
            )
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            first: dict[Any, int] = {}
            for key_node, _ in node.value:
                if not isinstance(key_node, yaml.ScalarNode) or key_node.tag.endswith(":merge"):
                    continue  # the base class refuses unhashable keys
                key = self.construct_object(key_node)
                line = key_node.start_mark.line + 1
                if key in first:
                    raise yaml.constructor.ConstructorError(
                        None,
                        None,
                        f"duplicate key {shown(key)} (first on line {first[key]})",
                        key_node.start_mark,
                    )
                first[key] = line
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_int(self, node: Any) -> Any:
        if len(node.value) > 40:  # int() refuses over 4300 digits, and no mark says where
            raise yaml.constructor.ConstructorError(
                None, None, f"integer of {len(node.value)} characters", node.start_mark
            )
        return super().construct_yaml_int(node)


_SuiteLoader.add_constructor("tag:yaml.org,2002:int", _SuiteLoader.construct_yaml_int)


def parse_surface(data: Any, source: str, suite: Suite) -> tuple[Case, ...]:
    """The cases of a surface file (``schema_version``, ``name``, ``kernels``: some of the
    suite's, its gated ones when left out; ``cases``), under the suite's policy: its
    gates, default threshold and timing plan. A case named as one of the suite's is the
    suite's own workload (checked to be the same) and adds nothing."""
    if not isinstance(data, dict):
        raise BadInput(f"{source}: the surface must be a YAML mapping")
    _no_unknown(data, {"schema_version", "name", "kernels", "cases"}, source, "top level")
    _header(data, source)
    suite_kernels = list(suite.raw.get("kernels", []))
    gate = list(suite.raw.get("gate", suite_kernels))
    kernels = data.get("kernels", gate)
    if (
        not isinstance(kernels, list)
        or not kernels
        or not all(isinstance(k, str) and k in suite_kernels for k in kernels)
    ):
        known = ", ".join(suite_kernels)
        raise _fail(source, "kernels", f"must list kernels of the suite ({known})")
    threshold = _threshold(suite.raw.get("threshold", "median:2%"), source, "threshold")
    cases = _cases(data.get("cases"), source, kernels, gate, threshold, suite.timing)
    own = {c.id: c for c in suite.cases}
    for c in cases:
        mine = own.get(c.id)
        if mine is not None and mine.params() != c.params():
            raise _fail(source, f"case {shown(c.name)}", "names a suite case with another workload")
    return tuple(c for c in cases if c.id not in own)


def load_suite(path: str | Path, known_kernels: set[str] | None = None) -> Suite:
    """Read and validate a suite file, and the surface file it names."""
    path = Path(path)
    data = _read_yaml(path, "suite")
    if known_kernels is None:
        known_kernels = _registry_names(data)
    suite = parse_suite(data, str(path), known_kernels)
    surface = suite.raw.get("surface")
    if surface is None:
        return suite
    where = path.parent / str(surface)
    cases = parse_surface(_read_yaml(where, "surface"), str(where), suite)
    return replace(suite, surface=cases, surface_source=str(where))


def _registry_names(data: Any) -> set[str]:
    """The names ``kernels/registry.py`` knows, imported only when the suite names a
    kernel that is not ``module:function`` (a tree with none of those needs no
    ``kernels`` package, nor torch in the guard's process)."""
    named = data.get("kernels") if isinstance(data, dict) else None
    if isinstance(named, list) and all(isinstance(k, str) and is_module_kernel(k) for k in named):
        return set()
    from kernels.registry import REGISTRY

    return set(REGISTRY)


def surface_named(text: str) -> str | None:
    """The surface file a suite file's text names (a plain name), or None."""
    try:
        data = yaml.load(text, Loader=_SuiteLoader)
    except (yaml.YAMLError, ValueError, RecursionError):
        return None
    name = data.get("surface") if isinstance(data, dict) else None
    return name if _surface_name(name) else None


def _read_yaml(path: Path, what: str) -> Any:
    """A suite or surface file's YAML; BadInput naming the file at fault."""
    try:
        text = files.read_text(path, limits.MAX_SUITE_BYTES)  # regular files only, bounded
    except FileNotFoundError:
        raise BadInput(f"{path}: {what} file not found") from None
    except files.FileRefused as exc:  # a FIFO, a device, a directory, over the limit
        raise BadInput(f"{path}: {what} file: {exc}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(f"{path}: cannot read the {what} file ({exc})") from None
    try:
        data = yaml.load(text, Loader=_SuiteLoader)  # a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark else "?"
        raise BadInput(
            f"{path}: not valid YAML ({where}: {getattr(exc, 'problem', None) or exc})"
        ) from None
    except (ValueError, RecursionError) as exc:  # a value the constructors refuse
        raise BadInput(f"{path}: not valid YAML ({shown(str(exc))})") from None
    return data
