"""Access-pattern advice for large read-only memory maps (``madvise``).

A page fault on a file mapping reads around the faulting page (the readahead window,
128 KiB by default) on the bet that the next read is nearby. Index lookups read a few
bytes at random positions of gigabyte arrays (the .idx lengths and pointers, the
document, sample and shuffle indices), so at a billion documents that bet loses: each
miss pulls ~32 pages of which one is used, and the unused ones push pages that are
used out of the page cache. :func:`advise_random` tells the kernel to read only the
faulting page (``MADV_RANDOM``) for arrays of more than ``RANDOM_ABOVE`` bytes. It is
for reads in random order only: a sequential pass (validation, an index build) over an
advised range loses its readahead, so call it once those are done.
"""

from __future__ import annotations

import contextlib
import mmap

import numpy as np

#: Arrays of at most this many bytes are left alone: they stay in the page cache whole.
RANDOM_ABOVE = 64 << 20


def _mapping(array: np.ndarray) -> tuple[mmap.mmap, int] | None:
    """The read-only ``mmap`` under ``array`` and the array's byte offset in it, or None
    (memory, a writable map, or a platform without ``madvise``)."""
    holder: object = array
    while isinstance(holder, np.ndarray) and not isinstance(holder, np.memmap):
        holder = holder.base
    if not isinstance(holder, np.memmap) or getattr(holder, "mode", None) != "r":
        return None
    mapping = holder.base
    if not isinstance(mapping, mmap.mmap) or not hasattr(mapping, "madvise") or not len(mapping):
        return None
    start = np.frombuffer(mapping, dtype=np.uint8, count=1).ctypes.data
    return mapping, array.ctypes.data - start


def advise_random(*arrays: np.ndarray | None) -> int:
    """Advise ``MADV_RANDOM`` over the bytes of each array (None or non-arrays skipped)
    that lies in a read-only ``numpy.memmap`` and spans more than ``RANDOM_ABOVE``
    bytes. Advisory: the values read are the same. Returns how many were advised."""
    advice = getattr(mmap, "MADV_RANDOM", None)
    advised = 0
    for array in arrays:
        if advice is None or not isinstance(array, np.ndarray) or array.nbytes <= RANDOM_ABOVE:
            continue
        found = _mapping(array)
        if found is None:
            continue
        mapping, offset = found
        aligned = offset - offset % mmap.PAGESIZE
        end = min(offset + array.nbytes, len(mapping))
        with contextlib.suppress(OSError, ValueError):
            mapping.madvise(advice, aligned, end - aligned)
            advised += 1
    return advised
