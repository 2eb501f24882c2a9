"""Worker processes that end when their parent does.

A trainer killed without clean-up (``kill -9``, the OOM killer, ``os._exit``) leaves its
worker processes behind unless they notice: Grain's workers wait forever to hand over
their next batch (holding the dead parent's stdout/stderr pipes, so whoever waits on
those hangs too). :func:`exit_with_parent`, called in a worker, starts a daemon thread
that waits for the parent to end -- on a pidfd where Linux has them (no polling), else
by checking ``os.getppid()`` every ``_POLL_S`` seconds -- then removes the
shared-memory files this worker made that nobody took
(:func:`~megadata_core.handover.shm.remove_own`) and ends the process at once
(``os._exit``).

``prctl(PR_SET_PDEATHSIG)`` is not used: it fires when the *thread* that started the
worker ends, and Grain starts its workers from pool threads that come and go.
"""

from __future__ import annotations

import os
import select
import threading
import time
from collections.abc import Callable

from megadata_core.handover.shm import remove_own

#: How often the fallback checks whether the parent is still there.
_POLL_S = 0.2
#: The exit status of a worker that ended because its parent did.
_ORPHAN_EXIT_STATUS = 70

_LOCK = threading.Lock()
_WATCHING: int | None = None  # the pid whose watch thread runs


def exit_with_parent(cleanup: Callable[[], None] = remove_own) -> None:
    """In a worker: end this process (after ``cleanup``) once its parent has ended.
    Idempotent per process (a forked child calls it again for itself)."""
    global _WATCHING
    if _WATCHING == os.getpid():
        return
    with _LOCK:
        if _WATCHING == os.getpid():
            return
        _WATCHING = os.getpid()
    parent = os.getppid()
    thread = threading.Thread(
        target=_watch, args=(parent, cleanup), name="megadata-parent-watch", daemon=True
    )
    thread.start()


def watching() -> bool:
    """Whether this process runs the watch thread."""
    return _WATCHING == os.getpid()


def _wait_for_exit(parent: int) -> None:
    """Returns once process ``parent`` is no longer this process's parent."""
    pidfd = None
    if hasattr(os, "pidfd_open"):
        try:
            pidfd = os.pidfd_open(parent)
        except OSError:  # an old kernel, or the parent is gone already
            pidfd = None
    try:
        if pidfd is not None and os.getppid() == parent:
            select.select([pidfd], [], [])  # readable once the parent has exited
    finally:
        if pidfd is not None:
            os.close(pidfd)
    while os.getppid() == parent:  # the fallback, and the re-parenting after the exit
        time.sleep(_POLL_S)


def _watch(parent: int, cleanup: Callable[[], None]) -> None:
    try:
        _wait_for_exit(parent)
    except Exception:  # noqa: BLE001 - never end a worker whose parent may live: poll
        while os.getppid() == parent:
            time.sleep(_POLL_S)
    try:
        cleanup()
    finally:
        os._exit(_ORPHAN_EXIT_STATUS)
