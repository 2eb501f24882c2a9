"""Checking the sample positions a batch asks for."""

from __future__ import annotations

import numpy as np


def sample_positions(indices: object, size: int, split: str) -> np.ndarray:
    """``indices`` (ints, a list or an int array) as int64 [B] positions in ``[0, size)``.

    Negative positions count from the end, as for sequences; anything else out of range
    is an IndexError naming the split.
    """
    positions = np.asarray(indices)
    if positions.ndim != 1:
        positions = positions.reshape(-1)
    if positions.size and positions.dtype.kind not in "iu":
        raise IndexError(f"sample indices must be integers, got {positions.dtype}")
    positions = positions.astype(np.int64, copy=False)
    if positions.size:
        low, high = int(positions.min()), int(positions.max())
        if low < 0:
            positions = np.where(positions < 0, positions + size, positions)
            low, high = int(positions.min()), int(positions.max())
        if low < 0 or high >= size:
            raise IndexError(f"sample index out of range [0, {size}) ({split})")
    return positions
