"""Floor 0: the threads one process of the core may run at once for its array passes."""

from __future__ import annotations

import os

MAX_THREADS = 4  # past this, on the machines measured, threads gave less than they cost


def usable_threads() -> int:
    """The cores this process may run on (its CPU affinity), at most MAX_THREADS."""
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        usable = os.cpu_count() or 1
    return max(1, min(MAX_THREADS, usable))
