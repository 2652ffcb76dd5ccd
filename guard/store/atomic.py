"""Writing a file the guard produces (results, baselines, reports, summaries) whole:
readers see the old file or the new, never half. The text goes to a temporary file in
the same folder, is flushed to disk (fsync) and renamed over the path; the temporary
file is removed on any failure. The new file gets the mode ``open`` would have given
it, and a path that is a link, FIFO, socket or device is refused, not replaced.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
from pathlib import Path

from guard.base.errors import ExitCode, GuardError
from guard.base.unwind import sigterm_unwinds


class CannotWrite(GuardError, OSError):
    """A file the guard was asked to write cannot be: the message names the path and
    why (a directory, a path under a regular file, no permission). Exit 2, or 3 when
    the disk failed or is full; an ``OSError`` too, for callers that catch those, whose
    ``strerror`` is the why alone (for a caller that names the path itself)."""

    def __init__(self, path: Path, why: str, exit_code: ExitCode | None = None) -> None:
        super().__init__(f"{path}: cannot write: {why}", exit_code)
        self.strerror = why  # errno stays None, so str() stays the message above


def not_a_regular_file(path: str | Path) -> str:
    """Why an output ``path`` that exists must not be replaced ("" when it may be: it does
    not exist, or is a regular file or a directory, which the callers refuse by name): a
    link, FIFO, socket or device. Output files are written whole and renamed into
    place, which would replace such a thing rather than write to it."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return ""
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return ""
    kind = (
        "a symbolic link" if stat.S_ISLNK(mode)
        else "a FIFO" if stat.S_ISFIFO(mode)
        else "a socket" if stat.S_ISSOCK(mode)
        else "a device"
    )  # fmt: skip
    return f"it is {kind}, not a regular file: refused (give a new path or a regular file)"


def write_atomic(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` so that readers see the old file or the new, never half,
    and no temporary file stays behind: not on an error, Ctrl-C or SIGTERM (which unwinds
    while writing, on the main thread). ``CannotWrite`` when the path cannot be written."""

    path = Path(path)
    with sigterm_unwinds():
        special = not_a_regular_file(path)
        if special:  # replacing it would destroy it (/dev/full as root) or fool a reader
            raise CannotWrite(path, special)
        try:
            if path.is_dir():  # os.replace's error would name the temporary file
                raise IsADirectoryError(errno.EISDIR, "it is a directory")
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        except OSError as exc:
            raise _cannot_write(path, exc) from None
        try:
            os.fchmod(fd, 0o666 & ~_umask())  # mkstemp's 0600 -> what open() would have made
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException as exc:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            if isinstance(exc, OSError):
                raise _cannot_write(path, exc) from None
            raise


def _cannot_write(path: Path, exc: OSError) -> CannotWrite:
    blocker = next((p for p in reversed(path.parents) if p.exists() and not p.is_dir()), None)
    why = f"{blocker} is not a directory" if blocker else (exc.strerror or str(exc))
    failed = exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EIO)  # the machine, not the path
    return CannotWrite(path, why, ExitCode.INFRA if failed else None)


def _umask() -> int:
    """The process's umask: read from /proc on Linux (setting it to read it back, the
    portable way, would briefly change it for every thread)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
