"""Gathers from corpus arrays that may be unaligned.

The .idx arrays start right after a 34-byte header, so a memory-mapped ``int32`` lengths
array (and the ``int64`` pointers) are not aligned to their item size. ``np.take`` first
makes an aligned copy of the *whole* source array when it is not aligned: 4 GB of
anonymous memory, copied again at every call, for the lengths of a billion documents.
:func:`take_into` gathers the same bytes through an opaque (void) view instead, whose
items have alignment 1: no copy of the source, and each item moved as raw bytes.
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
