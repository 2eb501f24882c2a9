"""Where an in-place shuffle of a spilled array runs: anonymous memory when it fits.

``RandomState.shuffle`` swaps entries at random positions over the whole array. On a
file-backed spill (a memory map of a cache temporary, :mod:`.cache_spill`) each swap can
dirty another page, and once the array passes the kernel's dirty-page limit the pages
are re-dirtied faster than they are written back: a 1B-document index (8 GB) was still
shuffling after 12 minutes. :func:`shuffle_scratch` gives such a target an anonymous
buffer of its size when the memory the kernel reports available leaves
``SCRATCH_MARGIN`` to spare; the caller fills and shuffles the buffer, which is then
copied into the target once, in order (sequential writeback). Otherwise, and for a
target in memory already, it gives the target itself. The draws and values are the same
either way.
"""

from __future__ import annotations

import contextlib
import mmap
from collections.abc import Iterator

import numpy as np

#: Memory left to the rest of the machine beyond a scratch buffer (bytes).
SCRATCH_MARGIN = 2 << 30
_COPY_BLOCK = 1 << 26  # bytes copied into the target per step
_MEMINFO = "/proc/meminfo"
_CGROUP = "/sys/fs/cgroup/"  # cgroup v2: memory.max, memory.current


def available_memory() -> int:
    """Bytes the kernel reports available (``MemAvailable``: free plus reclaimable page
    cache), capped by a cgroup v2 ``memory.max`` of this process's namespace; 0 when
    unknown (then nothing is made in memory)."""
    available = 0
    with contextlib.suppress(OSError, ValueError):
        with open(_MEMINFO) as stream:
            for line in stream:
                if line.startswith("MemAvailable:"):
                    available = int(line.split()[1]) * 1024
    with contextlib.suppress(OSError, ValueError):
        with open(_CGROUP + "memory.max") as limit, open(_CGROUP + "memory.current") as used:
            text = limit.read().strip()
            if text != "max":
                available = min(available, int(text) - int(used.read()))
    return available


def file_backed(array: np.ndarray) -> bool:
    """Whether ``array``'s memory is a file mapping (a ``numpy.memmap`` or a view of one)."""
    holder: object = array
    while isinstance(holder, np.ndarray):
        if isinstance(holder, np.memmap):
            return True
        holder = holder.base
    return isinstance(holder, mmap.mmap)


@contextlib.contextmanager
def shuffle_scratch(target: np.ndarray, margin: int | None = None) -> Iterator[np.ndarray]:
    """A writable 1-D array of ``target``'s size and dtype to fill and shuffle in; its
    contents are in ``target`` on a normal exit (nothing is copied when the block
    raises).

    Args:
        target: a 1-D array (the spilled result, or a part of it).
        margin: bytes to leave available beyond the buffer (default ``SCRATCH_MARGIN``).

    Yields:
        an anonymous buffer when ``target`` is file-backed and
        ``target.nbytes + margin <= available_memory()``; else ``target`` itself.
    """
    margin = SCRATCH_MARGIN if margin is None else margin
    if not file_backed(target) or target.nbytes + margin > available_memory():
        yield target
        return
    work = np.empty(target.shape, target.dtype)
    yield work
    step = max(1, _COPY_BLOCK // target.itemsize)
    for start in range(0, len(target), step):  # in order: the kernel writes it back
        target[start : start + step] = work[start : start + step]
