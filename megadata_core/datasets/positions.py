"""Checking the sample positions a batch asks for."""

from __future__ import annotations

import numpy as np

from megadata_core.checks import position_in


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


def sample_position(index: object, size: int, split: str) -> int:
    """One sample position (an int) in ``[0, size)``, by the rules of
    :func:`sample_positions` (negative counts from the end), in scalar steps."""
    if isinstance(index, (bool, np.bool_)) or not isinstance(index, (int, np.integer)):
        raise TypeError(f"sample index must be an int, got {type(index).__name__}")
    return position_in(int(index), size, f"sample index ({split})")
