"""Blocks through a few threads of this process, results in input order.

A native block encoder runs without the GIL (gigatoken's encode, numpy's array passes),
so threads overlap reading, scanning, encoding and writing with no copy of a block to
another process; the window of blocks in flight bounds memory as the process pool's does.
"""

from __future__ import annotations

import collections
import contextlib
import os
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")


def threads_for_native() -> int:
    """Threads for native block encoding in one process: the usable cores, at most 4."""
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        usable = os.cpu_count() or 1
    return max(1, min(4, usable))


@contextlib.contextmanager
def in_order(
    items: Iterable[Item], work: Callable[[Item], Result], threads: int
) -> Iterator[Iterator[tuple[Item, Result]]]:
    """Yields ``(item, work(item))`` in input order, ``threads`` items being worked on at
    once (and at most twice that many read ahead). An error is raised in order."""
    with ThreadPoolExecutor(threads, thread_name_prefix="megadata-block") as pool:
        pending: collections.deque = collections.deque()

        def run() -> Iterator[tuple[Item, Result]]:
            for item in items:
                pending.append((item, pool.submit(work, item)))
                if len(pending) >= 2 * threads:
                    done, future = pending.popleft()
                    yield done, future.result()
            while pending:
                done, future = pending.popleft()
                yield done, future.result()

        try:
            yield run()
        finally:
            for _, future in pending:
                future.cancel()
