"""Where the index build puts its large arrays: memory, or files it spills to.

The index functions take ``empty(name, shape, dtype) -> array`` and write their result
into what it returns. :func:`in_memory` is ``numpy.empty``; the index cache passes one
that makes a ``.npy`` memory map on a temporary file of the entry
(:func:`megadata_core.cache.entries.spill_arrays`), so an index of a billion documents
lives in the page cache (file-backed, reclaimable) instead of anonymous memory, and is
renamed into the cache entry instead of being written again. Random-access shuffles of
such an array run in anonymous memory when it fits (:mod:`.shuffle_scratch`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

#: ``empty(name, shape, dtype)``: an uninitialized writable C-ordered array.
Allocate = Callable[[str, tuple[int, ...], np.dtype], np.ndarray]


def in_memory(name: str, shape: tuple[int, ...], dtype: np.typing.DTypeLike) -> np.ndarray:
    """``numpy.empty(shape, dtype)`` (``name`` is unused)."""
    return np.empty(shape, dtype)


def plain(array: np.ndarray) -> np.ndarray:
    """``array`` as a base-class ndarray over the same memory: ``RandomState.shuffle``
    takes its buffer fast path only for exact ndarrays (a ``numpy.memmap`` would go
    through a per-element Python loop, with the same draws)."""
    return np.asarray(array)


_ARANGE_BLOCK = 1 << 20  # values written per step (a small temporary)


def fill_arange(out: np.ndarray, start: int = 0) -> np.ndarray:
    """Writes ``start, start + 1, ...`` into the 1-D ``out`` a block at a time (no
    temporary of ``out``'s size); returns ``out``."""
    for lo in range(0, len(out), _ARANGE_BLOCK):
        hi = min(len(out), lo + _ARANGE_BLOCK)
        out[lo:hi] = np.arange(start + lo, start + hi, dtype=out.dtype)
    return out
