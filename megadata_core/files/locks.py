"""Exclusive ``flock(2)`` locks on lock files (POSIX; elsewhere, no lock is taken).

Lock files are left in place on purpose: unlinking a lock file that others may be
waiting on is racy (they would lock an unlinked inode), unless the holder unlinks it
while holding it and waiters check that they locked the file that is still there
(:func:`try_exclusive` does).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from types import ModuleType

fcntl: ModuleType | None
try:  # POSIX only
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


@contextlib.contextmanager
def exclusive(lock_path: str) -> Iterator[bool]:
    """Hold an exclusive lock on ``lock_path`` (waiting for it), created if needed;
    yields False where locking failed (no fcntl, a read-only directory, a file system
    without flock): the caller then goes on unlocked, as safely as its writes allow."""
    if fcntl is None:
        yield False
        return
    try:
        os.makedirs(os.path.dirname(lock_path) or ".", exist_ok=True)
        handle = os.open(lock_path, os.O_RDWR | os.O_CREAT | _CLOEXEC, 0o666)
    except OSError:
        yield False
        return
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX)
        except OSError:
            yield False
            return
        yield True
    finally:
        os.close(handle)  # closing releases the lock


def try_exclusive(path: str) -> int:
    """An open descriptor of ``path`` (created if needed) holding its exclusive lock,
    without waiting. Retries when the holder it raced with unlinked the file it held.

    Raises:
        BlockingIOError: another process holds the lock (the descriptor is closed).
        OSError: the file cannot be opened or locked (no flock on this file system).
    """
    if fcntl is None:  # pragma: no cover - Windows
        raise OSError("file locks need fcntl (POSIX)")
    while True:
        handle = os.open(path, os.O_RDWR | os.O_CREAT | _CLOEXEC, 0o666)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BaseException:
            os.close(handle)
            raise
        try:  # the holder we raced with may have unlinked the file it locked
            if os.stat(path).st_ino == os.fstat(handle).st_ino:
                return handle
        except FileNotFoundError:
            pass
        os.close(handle)
