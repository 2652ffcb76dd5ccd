"""The compile caches of a paired check: one per tree, seeded from a trusted cache.

A worker compiles what its tree's kernels need into the caches its environment names:
``ATTN_GUARD_CACHE`` (the CUDA extension's builds, compiler-resource reports) and
``TRITON_CACHE_DIR`` (Triton's and Gluon's binaries and launch stubs). Both are
content-addressed: an entry is found by the hash of what built it (sources, flags,
toolchain), so a copy serves any tree whose sources match, and nothing else.

In a PR check each tree gets a cache of its own (``arm_caches``), so that nothing the
pull request's code builds or writes is ever loaded by the base's workers. Each starts
as a copy of the trusted cache when one is given: a folder that only trusted jobs on
main write (``warm``: the nightly run and the baseline refresh build every case of the
suite and its surface, then ``publish`` it whole), and that a PR job reads and never
writes. A cold runner then compiles only what the pull request changed.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from guard.base.errors import BadInput, InfraError

Env = tuple[tuple[str, str], ...]  # an arm's variables (``runner.Arm.env``)
FOLDERS = {
    "ATTN_GUARD_CACHE": "attn-guard",  # kernels/cuda_flash.py, kernel_reports/ptxas.py
    "TRITON_CACHE_DIR": "triton",
    "TORCH_EXTENSIONS_DIR": "torch-extensions",
}
TEMP = "tmp"  # a tree's own TMPDIR (compilers' scratch files), never copied


def env_for(folder: str | Path) -> Env:
    """The variables that point every compile cache, and the temporary folder, into
    ``folder`` (its ``tmp`` made here)."""
    root = Path(folder)
    (root / TEMP).mkdir(parents=True, exist_ok=True)
    caches = tuple((var, str(root / name)) for var, name in FOLDERS.items())
    return (*caches, ("TMPDIR", str(root / TEMP)))


def _copy(trusted: Path, folder: Path) -> None:
    """``trusted``'s cache folders into ``folder``: plain copies (a link, or a file the
    other tree could write through, would let one tree change the other's builds)."""
    for name in FOLDERS.values():
        source = trusted / name
        target = folder / name
        if source.is_dir() and not source.is_symlink():
            shutil.copytree(source, target, symlinks=True, dirs_exist_ok=True)
        else:
            target.mkdir(parents=True, exist_ok=True)


def check_trusted(trusted: str | Path) -> Path:
    """The trusted cache folder, resolved; BadInput when it is not a readable folder."""
    path = Path(trusted)
    if not path.is_dir():
        raise BadInput(f"--trusted-cache {path}: not a folder")
    if not os.access(path, os.R_OK | os.X_OK):
        raise BadInput(f"--trusted-cache {path}: not readable")
    return path.resolve()


def arm_folders(root: str | Path) -> tuple[Path, Path]:
    """The folders of ``arm_caches`` (base, head): all that a tree's code may write."""
    return Path(root) / "base", Path(root) / "head"


def arm_caches(root: str | Path, trusted: str | Path | None) -> tuple[Env, Env]:
    """Two caches under ``root`` (base, head), each a copy of ``trusted`` (or empty)."""
    envs = []
    for name, folder in zip(("base", "head"), arm_folders(root), strict=True):
        folder.mkdir(parents=True, exist_ok=True)
        try:
            if trusted is not None:
                _copy(Path(trusted), folder)
            else:
                for sub in FOLDERS.values():
                    (folder / sub).mkdir(exist_ok=True)
        except OSError as exc:
            raise InfraError(f"cannot prepare the {name}'s compile cache ({exc})") from None
        envs.append(env_for(folder))
    return envs[0], envs[1]


def staging(dest: str | Path) -> Path:
    """A fresh folder beside ``dest`` to build a trusted cache in (``publish`` moves it),
    readable by every user (a PR job runs as another user than the trusted one)."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    folder.chmod(0o755)
    for name in FOLDERS.values():
        (folder / name).mkdir(mode=0o755)
    return folder


def publish(built: Path, dest: str | Path) -> None:
    """Replace ``dest`` with ``built`` whole: a reader sees the old cache or the new one,
    never half of one (a rename; the old one is removed after)."""
    dest = Path(dest)
    shutil.rmtree(built / TEMP, ignore_errors=True)  # scratch, not cache
    old = None
    if dest.exists() or dest.is_symlink():
        old = Path(tempfile.mkdtemp(prefix=f".{dest.name}.old.", dir=dest.parent))
        os.replace(dest, old / "cache")
    os.replace(built, dest)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
