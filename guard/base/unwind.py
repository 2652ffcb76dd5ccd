"""SIGTERM unwinds: inside ``sigterm_unwinds`` a SIGTERM raises ``SystemExit(143)`` so
that ``finally`` blocks run (workers killed, a worktree removed, a half-written file
removed). Standard library only."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator


def _raise_on_sigterm(signum: int, frame: object) -> None:
    signal.signal(signum, _ignore_repeat)  # a second SIGTERM must not cut the cleanup short
    raise SystemExit(128 + signum)


def _ignore_repeat(signum: int, frame: object) -> None:
    pass


@contextlib.contextmanager
def sigterm_unwinds() -> Iterator[None]:
    """While inside, SIGTERM raises ``SystemExit(143)`` so ``finally`` blocks run: workers
    are killed, a ``--against`` worktree removed. Only where SIGTERM has its default
    action and on the main thread (signal handlers live there); restored on the way out.
    """
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
    ):
        yield
        return
    signal.signal(signal.SIGTERM, _raise_on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
