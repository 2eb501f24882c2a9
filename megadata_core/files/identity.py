"""What tells that a file is still the one that was checked: its identity.

A file replaced by another (``os.replace``) gets another inode; one written in place
gets a new size or modification time, and every change gets a new status-change time.
``(device, inode, size, mtime_ns, ctime_ns)`` is the identity that the index cache,
the corpus validation records and the blend record remember per file, and that a
reader compares before trusting a map it holds.

The racy-time rule (git's "racily clean"): a write in the same timestamp tick as the
file's last change can leave the identity unchanged. A check is therefore remembered
only when the file last changed at least :data:`RACY_NS` before the check began: a
later write then lands in a later tick and shows.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

#: A file changed less than this long before it was checked is not remembered as checked.
RACY_NS = 2_000_000_000

_Identity = tuple[int, int, int, int, int]


def identity(status: os.stat_result) -> _Identity:
    """``(device, inode, size, mtime_ns, ctime_ns)`` of a stat result."""
    return (
        status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns
    )


def path_identity(path: str) -> _Identity:
    """:func:`identity` of the file at ``path`` (OSError when it cannot be stat'ed)."""
    return identity(os.stat(path))


def which_file(status: os.stat_result) -> tuple[int, int]:
    """``(device, inode)``: what changes when the file is replaced by another."""
    return status.st_dev, status.st_ino


def contents_stamp(status: os.stat_result) -> tuple[int, int, int]:
    """``(size, mtime_ns, ctime_ns)``: what changes when the file is written in place."""
    return status.st_size, status.st_mtime_ns, status.st_ctime_ns


def settled(stats: Iterable[os.stat_result], began_ns: int) -> bool:
    """Whether every file's identity would show any later write: its modification or
    status-change time lies at least :data:`RACY_NS` before ``began_ns`` (a write in a
    later tick changes both, so one old stamp is enough)."""
    return all(
        began_ns - min(status.st_mtime_ns, status.st_ctime_ns) >= RACY_NS for status in stats
    )
