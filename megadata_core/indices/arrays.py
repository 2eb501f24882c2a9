"""The index build's arrays: where large ones are made, and how they are read.

Where: the index functions take ``empty(name, shape, dtype) -> array`` and write their
result into what it returns. :func:`in_memory` is ``numpy.empty``; the index cache passes
one that makes a ``.npy`` memory map on a temporary file of the entry
(:func:`megadata_core.cache.spill.spill_arrays`), so an index of a billion documents
lives in the page cache (file-backed, reclaimable) instead of anonymous memory, and is
renamed into the cache entry instead of being written again. The index functions never
see a file: an allocator may also say where a part of a result is filled and shuffled
(``empty.shuffle_space(target)``, :func:`shuffle_space`) and whether writes into an
array should go through a buffer in order (``empty.is_spilled(array)``,
:func:`is_spilled`); a plain callable answers "in place" and "no".

How: the .idx arrays start right after a 34-byte header, so a memory-mapped ``int32``
lengths array (and the ``int64`` pointers) are not aligned to their item size.
``np.take`` first makes an aligned copy of the *whole* source array when it is not
aligned: 4 GB of anonymous memory, copied again at every call, for the lengths of a
billion documents. :func:`take_into` gathers the same bytes through an opaque (void)
view instead, whose items have alignment 1: no copy of the source, and each item moved
as raw bytes. :func:`scan_equal` and :func:`scan_member` find values in memory bounded
by a block.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import AbstractContextManager

import numpy as np
from numpy.typing import DTypeLike

#: ``empty(name, shape, dtype)``: an uninitialized writable C-ordered array.
Allocate = Callable[[str, tuple[int, ...], DTypeLike], np.ndarray]
#: Names of working arrays (not results) start with this: an allocator may make them
#: wherever it likes (a spill: a working file of the entry, removed after the build).
SCRATCH_PREFIX = "scratch-"


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


def shuffle_space(empty: Allocate, target: np.ndarray) -> AbstractContextManager[np.ndarray]:
    """A context giving a writable 1-D array of ``target``'s size and dtype to fill and
    shuffle in, whose contents are in ``target`` on a normal exit: the allocator's
    ``shuffle_space(target)`` when it has one (a spill shuffles a file-backed part in
    anonymous memory when it fits: random swaps on a file mapping outrun writeback),
    else ``target`` itself. The draws and values are the same either way."""
    space = getattr(empty, "shuffle_space", None)
    return contextlib.nullcontext(target) if space is None else space(target)


def is_spilled(empty: Allocate, array: np.ndarray) -> bool:
    """Whether ``array`` (made by ``empty``) lives where random writes are slow (a file
    mapping): the allocator's ``is_spilled(array)`` when it has one, else False."""
    check = getattr(empty, "is_spilled", None)
    return bool(check is not None and check(array))


def take_into(source: np.ndarray, ids: np.ndarray, out: np.ndarray) -> np.ndarray:
    """``out[:] = source[ids]`` for ids already known to lie in ``[0, len(source))``.

    Args:
        source: 1-D array, aligned or not (e.g. a memory-mapped .idx array).
        ids: int [k] positions in ``source``.
        out: contiguous [k] array of the dtype of ``source``.

    Returns:
        ``out``. ``mode="wrap"`` never wraps in-range ids; it only skips numpy's
        per-element error path.
    """
    if not source.flags.aligned and source.dtype == out.dtype and source.ndim == 1:
        raw = np.dtype((np.void, source.dtype.itemsize))
        np.take(source.view(raw), ids, out=out.view(raw), mode="wrap")
    else:
        np.take(source, ids, out=out, mode="wrap")
    return out


SCAN_BLOCK = 1 << 22  # entries of an index array compared per step


def scan_equal(array, value: int, block: int = SCAN_BLOCK) -> np.ndarray:
    """int64 [K] sorted: the positions of ``array`` (1-D, sliceable: an ndarray or a
    memory map of billions of entries) that equal ``value``, block by block."""
    found = []
    for lo in range(0, len(array), block):  # one trip per block, never per entry
        hits = np.flatnonzero(np.asarray(array[lo : lo + block]) == value)
        if hits.size:
            found.append(hits + lo)
    return np.concatenate(found).astype(np.int64) if found else np.zeros(0, np.int64)


def scan_member(values, array, block: int = SCAN_BLOCK) -> np.ndarray:
    """int64 [K] sorted: the positions of ``array`` whose value is one of ``values``."""
    values = np.unique(np.asarray(values, dtype=np.int64))
    if not values.size:
        return np.zeros(0, np.int64)
    found = []
    for lo in range(0, len(array), block):
        part = np.asarray(array[lo : lo + block]).astype(np.int64)
        hits = np.flatnonzero(np.isin(part, values))
        if hits.size:
            found.append(hits + lo)
    return np.concatenate(found).astype(np.int64) if found else np.zeros(0, np.int64)
