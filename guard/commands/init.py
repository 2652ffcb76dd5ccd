"""``guard init``: a starter suite and PR-check workflow for another repository.

Writes, into a repository (default: the current folder), ``guard.yaml`` (a suite naming
``module:function`` kernels, with a commented example of the options) and
``.github/workflows/perf.yml`` (a maintainer's dispatch for one commit, calling this
repository's reusable workflow at one commit). It never replaces a file: when either
exists, nothing is written and the command exits 2 naming it. Each file is written
whole or not at all (a temporary file beside it, linked into place).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from guard.base.errors import BadInput
from guard.measure.proc import GUARD_ROOT
from guard.store.suite import MODULE_KERNEL

SUITE_FILE = Path("guard.yaml")
WORKFLOW_FILE = Path(".github") / "workflows" / "perf.yml"
DEFAULT_KERNEL = "my_package.attention:attention"
DEFAULT_REPOSITORY = "attn-guard/attn-guard"
_SHA = re.compile(r"[0-9a-f]{40}")
_REPOSITORY = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,38}/[A-Za-z0-9._-]{1,100}")

SUITE = """\
# The guard's suite (attn-guard): which kernels run on which shapes, and how a pull
# request is judged. `guard check --suite guard.yaml` checks correctness here;
# `guard compare --against main --suite guard.yaml` checks, then times main's kernels
# against this tree's, paired.
schema_version: 1
name: {name}
# Kernels by `package.module:function`, imported from the tree under test (the pull
# request's, or the base commit's), each called as fn(q, k, v, *, causal, scale) -> out
# over (batch, heads, seq_len, head_dim) tensors. For example:
#   kernels: [my_package.attention:flash_forward, my_package.attention:reference]
#   gate: [my_package.attention:flash_forward]     # only its regressions fail a PR
#   kernel_options:
#     my_package.attention:flash_forward: {{accepts_out: true, devices: [cuda]}}
# accepts_out: the function also takes out= (the guard poisons that buffer and checks
# nothing is written around it); devices: where it runs (default: cpu and cuda).
kernels: [{kernel}]
kernel_options:
  {kernel}: {{accepts_out: false, devices: [cpu, cuda]}}
# The smallest slowdown worth failing a pull request for (a case's median).
threshold: "median:2%"
tolerances:
  # error <= factor * error(torch SDPA in the same dtype vs a float32 reference) + floor
  float16: {{factor: 2.0, rel_norm_floor: 1.0e-3, max_abs_floor: 4.0e-3}}
  float32: {{factor: 2.0, rel_norm_floor: 1.0e-4, max_abs_floor: 1.0e-4}}
cases:  # shape: [batch, heads, seq_len, head_dim]; seq_k, kv_heads, dtype, causal optional
  - {{shape: [1, 8, 512, 64], dtype: float16, causal: false}}
  - {{shape: [1, 8, 512, 64], dtype: float16, causal: true}}
  - {{shape: [1, 4, 256, 64], dtype: float32, causal: false}}
"""

WORKFLOW = """\
# The guard's check of a pull request: `gh workflow run perf.yml -f pr=N -f sha=SHA`
# after reviewing that commit. The guard is pinned to one attn-guard commit, named twice.
name: perf
on:
  workflow_dispatch:
    inputs:
      pr: {{description: "the pull request's number", required: true, type: string}}
      sha: {{description: "its head commit to measure (40 hex digits)", required: true, type: string}}
permissions: {{}}
jobs:
  guard:
    permissions:
      contents: read # the suite and the code under test
      pull-requests: read # the PR's head and base
      checks: write # the check run perf-guard on the approved commit
    uses: {repository}/.github/workflows/guard-reusable.yml@{ref}
    with: {{pr: "${{{{ inputs.pr }}}}", sha: "${{{{ inputs.sha }}}}", guard-repository: {repository}, guard-ref: "{ref}", suite: {suite}, runner-label: gpu}}
"""  # noqa: E501


@dataclass(frozen=True)
class Starter:
    """What ``guard init`` wrote: the files, and the guard commit the workflow pins."""

    written: tuple[Path, ...]
    guard_ref: str


def guard_commit() -> str:
    """This guard's commit, when it runs from a git checkout ("" otherwise)."""
    try:
        proc = subprocess.run(
            ["git", "-C", str(GUARD_ROOT), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    sha = proc.stdout.strip()
    return sha if proc.returncode == 0 and _SHA.fullmatch(sha) else ""


def _write_new(path: Path, text: str) -> None:
    """Write ``path`` whole, never replacing a file: a temporary file beside it is
    linked into place (FileExistsError when something is there by then)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except FileExistsError as exc:  # a file where a folder must be: not "already exists"
        raise NotADirectoryError(exc.errno, f"{path.parent} is not a folder") from None
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.link(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def write_starter(
    root: str | Path,
    kernel: str = DEFAULT_KERNEL,
    *,
    guard_repository: str = DEFAULT_REPOSITORY,
    guard_ref: str = "",
) -> Starter:
    """Write the starter suite and workflow into ``root``; BadInput (nothing written)
    for a bad option or a file already there."""
    root = Path(root)
    if not root.is_dir():
        raise BadInput(f"{root}: not a folder")
    if not MODULE_KERNEL.fullmatch(kernel):
        raise BadInput(f"--kernel {kernel!r}: not a module:function name (like pkg.ops:attention)")
    if not _REPOSITORY.fullmatch(guard_repository):
        raise BadInput(f"--guard-repository {guard_repository!r}: not OWNER/NAME")
    ref = guard_ref or guard_commit()
    if not _SHA.fullmatch(ref):
        why = f"{ref!r} is not" if ref else "this guard is not a git checkout; give"
        raise BadInput(f"--guard-ref: {why} a 40-hex commit of {guard_repository}")
    targets = (root / SUITE_FILE, root / WORKFLOW_FILE)
    for path in targets:
        if os.path.lexists(path):
            raise BadInput(f"{path}: already exists; not replaced (nothing was written)")
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", root.resolve().name).strip("-") or "kernels"
    texts = (
        SUITE.format(name=name, kernel=kernel),
        WORKFLOW.format(repository=guard_repository, ref=ref, suite=SUITE_FILE.as_posix()),
    )
    written: list[Path] = []
    for path, text in zip(targets, texts, strict=True):
        try:
            _write_new(path, text)
        except OSError as exc:
            for done in written:  # all or nothing: the suite goes if the workflow cannot
                with contextlib.suppress(OSError):
                    done.unlink()
            why = (
                "already exists; not replaced"
                if isinstance(exc, FileExistsError)
                else (f"cannot write ({exc.strerror or exc})")
            )
            raise BadInput(f"{path}: {why} (nothing was written)") from None
        written.append(path)
    return Starter(tuple(written), ref)


def cmd_init(args: argparse.Namespace, argv: Sequence[str]) -> int:
    starter = write_starter(
        args.dir,
        args.kernel,
        guard_repository=args.guard_repository,
        guard_ref=args.guard_ref or "",
    )
    for path in starter.written:
        print(f"wrote {path}")
    print(
        f"the workflow runs the guard at {starter.guard_ref[:12]}; next: edit the cases in "
        f"{starter.written[0]}, then `guard check --suite {starter.written[0]}`",
        file=sys.stderr,
    )
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``init`` to the ``guard`` subcommands."""
    p = sub.add_parser(
        "init",
        help="write a starter suite and PR-check workflow into a repository",
        description="Write guard.yaml (a suite of module:function kernels) and "
        ".github/workflows/perf.yml (a maintainer's dispatch calling the reusable "
        "workflow guard-reusable.yml) into DIR. Refuses to replace either file (exit 2).",
    )
    p.add_argument("dir", nargs="?", default=".", help="the repository (default: here)")
    p.add_argument(
        "--kernel",
        default=DEFAULT_KERNEL,
        metavar="PKG.MOD:FN",
        help=f"the kernel the suite names (default: {DEFAULT_KERNEL}, to edit)",
    )
    p.add_argument(
        "--guard-repository",
        default=DEFAULT_REPOSITORY,
        metavar="OWNER/NAME",
        help=f"where the workflow takes the guard from (default: {DEFAULT_REPOSITORY})",
    )
    p.add_argument(
        "--guard-ref",
        metavar="SHA",
        help="the guard commit the workflow pins (default: this guard's checkout's commit)",
    )
    p.set_defaults(func=cmd_init)
