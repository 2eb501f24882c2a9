"""Floor 0: the threads one process of the core may run at once, and its kept pools."""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

MAX_THREADS = 4  # past this, on the machines measured, threads gave less than they cost


def usable_threads(cap: int = MAX_THREADS) -> int:
    """The cores this process may run on (its CPU affinity), at least 1, at most ``cap``."""
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        usable = os.cpu_count() or 1
    return max(1, min(cap, usable))


_pools: dict[tuple[str, int], ThreadPoolExecutor] = {}
_pools_lock = threading.Lock()


def shared_pool(name: str, size: int) -> ThreadPoolExecutor:
    """This process' pool of ``size`` threads named ``name``, made on first use and kept
    (a new thread waits for the GIL to start: once per call when each call made its own)."""
    with _pools_lock:
        pool = _pools.get((name, size))
        if pool is None:
            pool = _pools[(name, size)] = ThreadPoolExecutor(size, thread_name_prefix=name)
        return pool


def _forget_pools() -> None:  # a forked child (a DataLoader worker) has no parent threads
    global _pools_lock
    _pools.clear()
    _pools_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pools)
