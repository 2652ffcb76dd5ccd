"""Compile ahead: the trusted compile cache (``guard warm-cache``) and each kernel's
compiler resources (registers, spills), base against head."""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from guard.base.errors import GuardError, InfraError, shown
from guard.decide.compare import (
    Comparison,
)
from guard.measure.proc import kill_running_groups, local_kernels_root
from guard.measure.runner import Arm, ProgressFn, _noop
from guard.ops.measure import MeasureOptions, probe_workers, rounds_for, unwinds_on_sigterm
from guard.store.results import OK, UNAVAILABLE, RunResult
from guard.store.suite import (
    Suite,
)

if TYPE_CHECKING:
    from guard.measure.resources import ResourceReport


@dataclass(frozen=True)
class WarmOutcome:
    """A trusted compile cache built: where, of how many cases, what failed to build."""

    path: Path
    cases: int
    failed: tuple[str, ...]  # "case id: why"
    resources: str  # "" when the compiler resources were built, else why not
    seconds: float


@unwinds_on_sigterm
def warm_cache(
    suite: Suite,
    dest: str | Path,
    opts: MeasureOptions = MeasureOptions(),
    progress: ProgressFn = _noop,
    *,
    with_resources: bool = True,
) -> WarmOutcome:
    """Build this tree's kernels for every case of ``suite`` and its surface (one call
    each: the probe) and, beside them in a child process, their compiler resources into
    a fresh cache; then replace ``dest`` with it whole (``build_cache.publish``): the
    trusted cache of a PR check, built by a trusted job on main, never by a PR's."""
    from concurrent.futures import ThreadPoolExecutor

    import yaml

    from guard.measure import build_cache, resources

    started = time.monotonic()
    folder = build_cache.staging(dest)
    try:
        env = build_cache.env_for(folder)
        everything = suite.with_cases((*suite.cases, *suite.extra_surface()))
        with tempfile.TemporaryDirectory(prefix="guard-suite-") as tmp:
            suite_file = Path(tmp) / "suite.yaml"
            suite_file.write_text(yaml.safe_dump(everything.document(), sort_keys=False), "utf-8")
            with ThreadPoolExecutor(1) as pool:
                compiling = (
                    pool.submit(
                        resources.collect_in_tree,
                        local_kernels_root(),
                        suite_file,
                        RESOURCE_ARCHES,
                        1800,
                        env=dict(env),
                    )
                    if with_resources and suite.uses_registry
                    else None
                )
                arm = Arm("candidate", None, "trusted cache", env=env)
                try:
                    with rounds_for(everything, opts, progress, (arm,)) as session:
                        session.probe(probe_workers(opts))
                        run = session.results()["candidate"]
                except BaseException:
                    kill_running_groups()  # the compile child too
                    raise
                problem = ""
                if not compiling:
                    problem = (
                        "no registry kernel (module:function kernels have no resources hook)"
                        if with_resources
                        else "not asked for (--no-resources)"
                    )
                try:
                    if compiling is not None:
                        compiling.result()
                except GuardError as exc:
                    problem = shown(str(exc))
        failed = tuple(
            f"{c.id}: {c.reason}" for c in run.cases if c.status not in (OK, UNAVAILABLE)
        )
        build_cache.publish(folder, dest)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return WarmOutcome(
        Path(dest), len(everything.cases), failed, problem, time.monotonic() - started
    )


RESOURCE_ARCHES = ("sm_90",)  # compiled on the CPU for the notes of a paired comparison


class ResourceCompile:
    """Both trees' compiler resources (registers, spills, shared memory, config) for
    exactly ``suite``'s cases, compiled without a GPU in two child processes started
    at once, in the background: the GPU measures meanwhile (the children run at the
    lowest CPU priority, and a cold compile of a large suite takes minutes of CPU).
    ``apply`` waits for them and adds the changes to a comparison; ``cancel`` ends them."""

    def __init__(
        self,
        suite: Suite,
        base_root: str,
        head_root: str,
        arches: Sequence[str] = RESOURCE_ARCHES,
        envs: tuple[tuple[tuple[str, str], ...], ...] = ((), ()),
        wrappers: tuple[tuple[str, ...], ...] = ((), ()),
    ) -> None:
        from concurrent.futures import Future, ThreadPoolExecutor

        import yaml

        from guard.measure import resources

        self._problem = ""  # why nothing compiles ("": compiling)
        self._futures: tuple[Future[resources.ResourceReport], ...] = ()
        self._tmp = tempfile.TemporaryDirectory(prefix="guard-suite-")
        self._pool = ThreadPoolExecutor(max_workers=2)  # two child processes at once
        if not suite.cases:  # every kernel identical in both trees: nothing to compile
            return
        if not suite.raw:
            self._problem = f"the suite {shown(suite.source)} has no file to compile from"
            return
        # Each child reads exactly these cases (surface cases among them) from a copy in
        # a folder it can read in its sandbox: its own TMPDIR, where it has one.
        try:
            document = yaml.safe_dump(suite.document(), sort_keys=False)
        except yaml.YAMLError as exc:
            self._problem = f"cannot copy the suite {shown(suite.source)}: {exc}"
            return
        kernels_ = sorted({c.kernel for c in suite.cases})
        ids = [c.id for c in suite.cases]  # not every kernel x name: a shard is a set of ids

        def collect(
            root: str, env: tuple[tuple[str, str], ...], wrapper: tuple[str, ...]
        ) -> resources.ResourceReport:
            folder = dict(env).get("TMPDIR") or self._tmp.name
            suite_file = Path(tempfile.mkdtemp(prefix="suite-", dir=folder)) / "suite.yaml"
            try:
                suite_file.write_text(document, "utf-8")
            except OSError as exc:
                raise InfraError(f"cannot copy the suite for the resources: {exc}") from None
            return resources.collect_in_tree(
                root,
                suite_file,
                arches,
                300,
                kernels=kernels_,
                case_ids=ids,
                env=dict(env),
                wrapper=wrapper,
            )

        self._futures = tuple(
            self._pool.submit(collect, root, env, wrapper)
            for root, env, wrapper in zip((base_root, head_root), envs, wrappers, strict=True)
        )

    @property
    def pending(self) -> bool:
        """Whether a child is still compiling."""
        return any(not f.done() for f in self._futures)

    def cancel(self) -> None:
        """End both children (their process groups) and the pool."""
        if any(not f.done() for f in self._futures):
            kill_running_groups()  # the caller is unwinding: its workers are done with
        self._pool.shutdown(wait=True)
        self._tmp.cleanup()

    def apply(self, comparison: Comparison) -> Comparison:
        """The comparison with each case's resource changes. A change is a note beside
        the verdict, never a failure; when it cannot be computed (a compile failure,
        records from one tree only), a note says so and the verdict stands: a hook that
        could not report must not look like "no change"."""

        def unavailable(why: str) -> Comparison:
            note = f"compiler resources not compared: {why}"
            return replace(comparison, notes=(*comparison.notes, note))

        try:  # cancel: a Ctrl-C or SIGTERM here must not wait out the children's timeout
            if self._problem:
                return unavailable(self._problem)
            if not self._futures:
                return comparison
            base, head = self._futures[0].result(), self._futures[1].result()
        except GuardError as exc:
            return unavailable(shown(str(exc)))
        finally:
            self.cancel()
        return _with_reports(comparison, base, head)


def with_resource_changes(
    comparison: Comparison,
    suite: Suite,
    base_root: str,
    head_root: str,
    arches: Sequence[str] = RESOURCE_ARCHES,
) -> Comparison:
    """``comparison`` with the resource changes of ``suite``'s cases between the two
    trees, compiled now (``ResourceCompile``, waited for)."""
    return ResourceCompile(suite, base_root, head_root, arches).apply(comparison)


def _with_reports(comparison: Comparison, base: ResourceReport, head: ResourceReport) -> Comparison:
    """The comparison with both trees' resource reports: changes per case, notes for
    what could not be compared, and each run's records as its results file keeps them."""
    from guard.measure import resources

    changes = resources.diff_cases(base.cases, head.cases)
    cases = tuple(
        replace(c, resource_changes=tuple(str(x) for x in changes.get(c.case_id, ())))
        for c in comparison.cases
    )
    notes = comparison.notes
    skipped = {**head.skipped, **base.skipped}  # case -> {arch: why}, from either tree
    if skipped:  # a hook that could not report must not look like "no change"
        cid, why = next(iter(skipped.items()))
        arch, reason = next(iter(why.items()))
        notes = (
            *notes,
            f"compiler resources not compared for {len(skipped)} case(s), e.g. {cid} on "
            f"{arch}: {shown(reason)}",
        )
    one_tree = sorted(set(base.cases) ^ set(head.cases))  # a hook added or removed
    if one_tree:
        side = "head" if one_tree[0] in head.cases else "base"
        notes = (
            *notes,
            f"compiler resources not compared for {len(one_tree)} case(s) that have records "
            f"in one tree only (a resources hook added or removed), e.g. {one_tree[0]} "
            f"(only in the {side})",
        )

    def stored(run: RunResult, report: ResourceReport) -> RunResult:
        """The run with each case's records, as its results file keeps them."""
        return replace(
            run,
            cases=tuple(
                replace(c, resources=tuple(r.to_json() for r in report.cases.get(c.id, ())))
                for c in run.cases
            ),
        )

    return replace(
        comparison,
        cases=cases,
        notes=notes,
        baseline=stored(comparison.baseline, base),
        candidate=stored(comparison.candidate, head),
    )
