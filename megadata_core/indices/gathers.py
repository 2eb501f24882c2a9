"""Gathers from corpus arrays that may be unaligned, and scans of arrays too large to copy.

The .idx arrays start right after a 34-byte header, so a memory-mapped ``int32`` lengths
array (and the ``int64`` pointers) are not aligned to their item size. ``np.take`` first
makes an aligned copy of the *whole* source array when it is not aligned: 4 GB of
anonymous memory, copied again at every call, for the lengths of a billion documents.
:func:`take_into` gathers the same bytes through an opaque (void) view instead, whose
items have alignment 1: no copy of the source, and each item moved as raw bytes.
:func:`scan_equal` and :func:`scan_member` find values in memory bounded by a block.
"""

from __future__ import annotations

import numpy as np


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
