"""Blocks through a few threads of this process, results in input order.

A native block encoder runs without the GIL (gigatoken's encode, numpy's array passes),
so threads overlap reading, scanning, encoding and writing with no copy of a block to
another process; the window of blocks in flight bounds memory as the process pool's does.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

from megadata_core.cores import shared_pool, usable_threads

_Item = TypeVar("_Item")
Result = TypeVar("Result")


def threads_for_native() -> int:
    """Threads for native block encoding in one process: the usable cores, at most 4."""
    return usable_threads()


@contextlib.contextmanager
def in_order(
    items: Iterable[_Item], work: Callable[[_Item], Result], threads: int
) -> Iterator[Iterator[tuple[_Item, Result]]]:
    """Yields ``(item, work(item))`` in input order, ``threads`` items being worked on at
    once (and at most twice that many read ahead). An error is raised in order; leaving
    early cancels the items not started and waits for those running."""
    pool = shared_pool("megadata-block", threads)
    pending: collections.deque = collections.deque()

    def run() -> Iterator[tuple[_Item, Result]]:
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
        running = [future for _, future in pending if not future.cancel()]
        concurrent.futures.wait(running)
