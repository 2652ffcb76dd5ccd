"""What a pull request changes in the policy that judges it.

In a PR check the judge (the base commit's guard) measures with the base commit's
suite; the PR's suite file only takes effect after merge. ``changes`` lists, in words
a reviewer reads, every difference between the two: cases added or removed, kernels
gated or ungated, the surface's cases, thresholds, tolerances, the timing plan
(alpha included) and a ``module:function`` kernel's options. Pure: two ``Suite``
values in, sentences out.
"""

from __future__ import annotations

from dataclasses import asdict

from guard.store.suite import Suite


def _fmt(value: object) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def changes(base: Suite, head: Suite) -> list[str]:
    """Sentences naming each policy difference from ``base`` to ``head`` (empty: none)."""
    out: list[str] = []
    base_cases = {c.id: c for c in base.cases}
    head_cases = {c.id: c for c in head.cases}
    removed = sorted(set(base_cases) - set(head_cases))
    added = sorted(set(head_cases) - set(base_cases))
    if removed:
        gated = [cid for cid in removed if base_cases[cid].gate]
        out.append(
            f"removes {len(removed)} case(s) ({len(gated)} gated): {', '.join(removed[:8])}"
            + (" ..." if len(removed) > 8 else "")
        )
    if added:
        out.append(
            f"adds {len(added)} case(s) (measured as new until merged): "
            + ", ".join(added[:8])
            + (" ..." if len(added) > 8 else "")
        )
    base_gates = {c.kernel for c in base.cases if c.gate}
    head_gates = {c.kernel for c in head.cases if c.gate}
    if base_gates - head_gates:
        out.append(f"ungates {', '.join(sorted(base_gates - head_gates))}")
    if head_gates - base_gates:
        out.append(f"gates {', '.join(sorted(head_gates - base_gates))}")
    for cid in sorted(set(base_cases) & set(head_cases)):
        b, h = base_cases[cid], head_cases[cid]
        if b.threshold != h.threshold:
            out.append(f"{cid}: threshold {b.threshold} -> {h.threshold}")
        if b.params() != h.params():
            out.append(f"{cid}: workload parameters change")
    base_surface = {c.id for c in base.surface}
    head_surface = {c.id for c in head.surface}
    for verb, ids in (
        ("removes", sorted(base_surface - head_surface)),
        ("adds", sorted(head_surface - base_surface)),
    ):
        if ids:
            out.append(
                f"{verb} {len(ids)} surface case(s): {', '.join(ids[:8])}"
                + (" ..." if len(ids) > 8 else "")
            )
    for dtype in sorted(set(base.tolerances) | set(head.tolerances)):
        b_tol, h_tol = base.tolerances.get(dtype), head.tolerances.get(dtype)
        if b_tol != h_tol:
            before = asdict(b_tol) if b_tol else "none"
            after = asdict(h_tol) if h_tol else "none"
            out.append(f"tolerance {dtype}: {before} -> {after}")
    for kernel in sorted(set(base.kernel_options) & set(head.kernel_options)):
        b_opt, h_opt = base.kernel_options[kernel], head.kernel_options[kernel]
        if b_opt != h_opt:
            out.append(f"kernel_options.{kernel}: {b_opt.to_json()} -> {h_opt.to_json()}")
    for plan_name, b_plan, h_plan in (
        ("timing", base.timing, head.timing),
        ("cpu_timing", base.cpu_timing, head.cpu_timing),
    ):
        b_fields, h_fields = asdict(b_plan), asdict(h_plan)
        for key in b_fields:
            if b_fields[key] != h_fields.get(key):
                out.append(f"{plan_name}.{key}: {_fmt(b_fields[key])} -> {_fmt(h_fields[key])}")
    return out
