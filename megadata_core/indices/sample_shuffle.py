"""Megatron's shuffle index: a permutation of the sample positions."""

from __future__ import annotations

import numpy as np

from megadata_core.checks import check_int
from megadata_core.errors import DataError
from megadata_core.indices.allocate import Allocate, fill_arange, in_memory, plain, shuffle_space
from megadata_core.indices.document_order import check_random_state

#: Megatron switches from uint32 to int64 at ``total_size >= iinfo(uint32).max - 1``.
UINT32_LIMIT = int(np.iinfo(np.uint32).max) - 1


def shuffle_index(
    num_samples: int,
    total_size: int,
    rng: np.random.RandomState,
    *,
    empty: Allocate = in_memory,
) -> np.ndarray:
    """``[0, num_samples)`` shuffled, then ``[num_samples, total_size)`` shuffled apart,
    bit-identical to megatron-core's ``_build_shuffle_index``.

    Built as one ``arange`` shuffled in two in-place views (no concatenation); the
    RandomState draws exactly as Megatron's, which uses the same state right after the
    document index. A spilled result is filled and shuffled a part at a time in
    anonymous memory when it fits (:func:`.allocate.shuffle_space`).

    Args:
        num_samples: size of the first shuffled range (Megatron passes the samples of
            the first E-1 epochs when the final epoch is separate, else ``total_size``).
        total_size: number of samples in the sample index.
        rng: the RandomState (advanced in place).
        empty: where the result is made (:mod:`megadata_core.indices.allocate`).

    Returns:
        uint32 [total_size], or int64 [total_size] when ``total_size >= 2**32 - 2``.
    """
    first = check_int("num_samples", num_samples, 0)
    total = check_int("total_size", total_size, 0)
    if first > total:
        raise DataError(f"num_samples: {first} exceeds total_size {total}")
    check_random_state(rng)
    dtype = np.int64 if total >= UINT32_LIMIT else np.uint32
    result = empty("shuffle_index", (total,), np.dtype(dtype))
    out = plain(result)
    for lo, hi in ((0, first), (first, total)):  # shuffled apart; an empty part draws nothing
        with shuffle_space(empty, out[lo:hi]) as work:  # in memory when a spill's is too slow
            fill_arange(work, lo)
            rng.shuffle(work)
    return result
