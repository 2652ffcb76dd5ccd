"""Reading and hashing files that a user or a pull request hands the guard, bounded.

Every such file is read only if it is a regular file (not a directory, FIFO, device
or socket: ``/dev/zero`` would fill memory, a FIFO would hang), through no link that
leaves the tree it belongs to, and only up to a limit. Standard library only: the PR
comment's reader (``guard.github.comment``) runs without the package's dependencies.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

_CHUNK = 1 << 20


class FileRefused(OSError):
    """The path is not a regular file, lies outside its tree, or is over its limit.
    The message says which, in words a user can act on (the caller adds the path)."""


def _open_regular(path: Path) -> tuple[int, os.stat_result]:
    # O_NONBLOCK: opening a FIFO for reading would otherwise block until a writer comes.
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise FileRefused(f"not a regular file ({_kind(info.st_mode)})")
    except BaseException:
        os.close(fd)
        raise
    return fd, info


def _kind(mode: int) -> str:
    for test, word in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return word
    return "not a plain file"


def read_bytes(path: str | Path, limit: int) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes. ``FileRefused`` for
    anything else; ``OSError`` (``FileNotFoundError`` among them) as ``open`` raises it.
    The size is checked on what is read, not only on ``stat`` (a file may grow)."""
    fd, info = _open_regular(Path(path))
    with os.fdopen(fd, "rb") as fh:
        if info.st_size > limit:
            raise FileRefused(f"{info.st_size} bytes, over the {limit}-byte limit")
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise FileRefused(f"over the {limit}-byte limit")
    return data


class _Bounded:
    """A binary file object that raises ``FileRefused`` once more than ``limit`` bytes
    have been read (the size is checked on what is read: a file may grow)."""

    def __init__(self, fh: BinaryIO, limit: int) -> None:
        self._fh, self._limit, self._read = fh, limit, 0

    def read(self, size: int = -1) -> bytes:
        data = self._fh.read(min(size, self._limit + 1 - self._read) if size >= 0 else -1)
        self._read += len(data)
        if self._read > self._limit:
            raise FileRefused(f"over the {self._limit}-byte limit")
        return data


@contextlib.contextmanager
def open_bounded(path: str | Path, limit: int) -> Iterator[_Bounded]:
    """A regular file of at most ``limit`` bytes, opened for reading in a stream
    (``FileRefused`` as ``read_bytes``)."""
    fd, info = _open_regular(Path(path))
    with os.fdopen(fd, "rb") as fh:
        if info.st_size > limit:
            raise FileRefused(f"{info.st_size} bytes, over the {limit}-byte limit")
        yield _Bounded(fh, limit)


def read_text(path: str | Path, limit: int) -> str:
    """``read_bytes`` decoded as UTF-8 (``UnicodeDecodeError`` when it is not)."""
    return read_bytes(path, limit).decode("utf-8")


def inside(path: Path, root: Path) -> bool:
    """Whether ``path``, with every link resolved, lies under ``root`` (resolved)."""
    try:
        path.resolve(strict=True).relative_to(root.resolve())
    except (OSError, ValueError, RuntimeError):  # RuntimeError: a link loop
        return False
    return True


def tree_files(root: str | Path) -> Iterator[Path]:
    """The regular files under ``root``, sorted, skipping ``__pycache__`` and every link
    (a link could lead out of the tree, to a huge file or a device)."""
    root = Path(root)
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            path = Path(dirpath) / name
            try:
                info = path.lstat()
            except OSError:
                continue
            if stat.S_ISREG(info.st_mode):
                yield path


def digest(path: str | Path, limit: int | None = None) -> str:
    """sha256 of a regular file, read in chunks (memory stays bounded); ``FileRefused``
    past ``limit`` bytes when one is given."""
    fd, _ = _open_regular(Path(path))
    h = hashlib.sha256()
    seen = 0
    with os.fdopen(fd, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            seen += len(chunk)
            if limit is not None and seen > limit:
                raise FileRefused(f"over the {limit}-byte limit")
            h.update(chunk)
    return h.hexdigest()
