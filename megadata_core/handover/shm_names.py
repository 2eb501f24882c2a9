"""Names of the shared-memory files a process hands batches over in, and their clean-up.

Every file is ``/dev/shm/megadata-{kind}-{namespace}-{pid}-{random}`` (the temp directory
where there is no ``/dev/shm``): ``pid`` is the process that made it and ``namespace``
the inode of its pid namespace (``/proc/self/ns/pid``; 0 where there is none), so a
process can tell its own files, and those of dead processes of its own namespace, from
anyone else's. Three clean-ups use that:

* the consumer removes a file's name as soon as it has mapped it (the memory stays while
  a map lives);
* :func:`remove_own`, at a producer's exit (``multiprocessing``'s exit hooks) and when
  its parent died (:mod:`~megadata_core.handover.orphans`), removes what it made that
  no consumer took;
* :func:`sweep_dead`, once per producer process at its first file, removes the files of
  producers of this namespace that are no longer running (killed with ``kill -9``
  before they could clean up).
"""

from __future__ import annotations

import os
import tempfile
import threading
import uuid
from multiprocessing import util

#: Where the files go: memory-backed on Linux.
SHM_DIR = "/dev/shm"
PREFIX = "megadata-"

_LOCK = threading.Lock()
_PREPARED: int | None = None  # the pid that swept and registered its exit clean-up


def shm_dir() -> str:
    """``/dev/shm`` where it exists and is writable, else the temp directory."""
    if os.path.isdir(SHM_DIR) and os.access(SHM_DIR, os.W_OK):
        return SHM_DIR
    return tempfile.gettempdir()


def namespace() -> int:
    """The inode of this process's pid namespace (0 where /proc does not say)."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


def new_path(kind: str) -> str:
    """A fresh file name of this process, ``kind`` in ``[a-z]+`` (``batch``, ``ring``).
    The first call of a process sweeps dead producers' files and arranges for this
    process's own to go at its exit."""
    _prepare()
    name = f"{PREFIX}{kind}-{namespace()}-{os.getpid()}-{uuid.uuid4().hex}"
    return os.path.join(shm_dir(), name)


def owner(path: str) -> tuple[int, int] | None:
    """``(namespace, pid)`` of the process that made ``path``, or None for other names."""
    parts = os.path.basename(path).split("-")
    if len(parts) != 5 or f"{parts[0]}-" != PREFIX:
        return None
    try:
        return int(parts[2]), int(parts[3])
    except ValueError:
        return None


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (in this pid namespace)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def remove(path: str) -> None:
    """Unlink ``path``; gone already is fine."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _names() -> list[str]:
    try:
        return [name for name in os.listdir(shm_dir()) if name.startswith(PREFIX)]
    except OSError:
        return []


def remove_own() -> None:
    """Remove every file this process made that is still named (no consumer took it)."""
    mine = (namespace(), os.getpid())
    directory = shm_dir()
    for name in _names():
        if owner(name) == mine:
            remove(os.path.join(directory, name))


def sweep_dead() -> list[str]:
    """Remove the files of producers of this pid namespace that no longer run; returns
    their paths."""
    space = namespace()
    directory = shm_dir()
    removed = []
    for name in _names():
        made_by = owner(name)
        if made_by is not None and made_by[0] == space and not alive(made_by[1]):
            remove(os.path.join(directory, name))
            removed.append(os.path.join(directory, name))
    return removed


def _prepare() -> None:
    global _PREPARED
    with _LOCK:
        if _PREPARED == os.getpid():
            return
        _PREPARED = os.getpid()
        sweep_dead()
        util.Finalize(None, remove_own, exitpriority=10)  # at this process's normal exit
