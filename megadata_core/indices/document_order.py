"""Megatron's document index: the split's document ids, tiled per epoch and shuffled."""

from __future__ import annotations

import numpy as np

from megadata_core.checks import INT32_MAX, check_ids, check_int, id_range
from megadata_core.errors import DataError
from megadata_core.indices.allocate import Allocate, fill_arange, in_memory, plain, shuffle_space


def check_random_state(rng: object) -> np.random.RandomState:
    """Megatron's streams come from the legacy ``RandomState``; a ``Generator`` differs."""
    if not isinstance(rng, np.random.RandomState):
        raise DataError(f"rng: expected numpy.random.RandomState, got {type(rng).__name__}")
    return rng


def document_index(
    doc_ids: np.ndarray | range,
    num_epochs: int,
    rng: np.random.RandomState,
    separate_final_epoch: bool,
    *,
    empty: Allocate = in_memory,
) -> np.ndarray:
    """The ids ``doc_ids`` repeated ``num_epochs`` times and shuffled, bit-identical to
    megatron-core's ``_build_document_index``.

    Megatron tiles with ``numpy.mgrid`` (int64 temporaries), casts to int32 and calls
    ``rng.shuffle``. Here the ids are tiled straight into one preallocated int32 array and
    shuffled in place: ``RandomState.shuffle`` draws the same numbers for any dtype, so the
    stream and the result are the same. With ``separate_final_epoch`` (and E > 1) the first
    E-1 epochs are shuffled together, then the final epoch alone.

    A ``range`` of ids (Megatron's consecutive splits) is written block by block with
    ``arange``: no id array is ever made, and the values are the same. A spilled result
    (file-backed) is filled and shuffled part by part in anonymous memory when it fits
    (:func:`.allocate.shuffle_space`), each part then copied into the file in order.

    Args:
        doc_ids: int [D] document ids, each in ``[0, 2**31 - 1]``, or a ``range`` of them.
        num_epochs: E >= 1.
        rng: the RandomState (advanced in place, as in Megatron).
        separate_final_epoch: shuffle the final epoch on its own.
        empty: where the result is made (:mod:`megadata_core.indices.allocate`; a
            memory-mapped spill file keeps E * D * 4 bytes out of anonymous memory).

    Returns:
        int32 [E * D] from ``empty("document_index", ...)``.
    """
    span = id_range("doc_ids", doc_ids, INT32_MAX + 1)
    ids = span if span is not None else check_ids("doc_ids", doc_ids, INT32_MAX + 1)
    epochs = check_int("num_epochs", num_epochs, 1)
    check_random_state(rng)
    count = len(ids)
    result = empty("document_index", (epochs * count,), np.dtype(np.int32))
    out = plain(result)
    parts = [epochs - 1, 1] if separate_final_epoch and epochs > 1 else [epochs]
    done = 0
    for repeats in parts:  # each shuffled apart, in memory when a spill's is too slow
        with shuffle_space(empty, out[done * count : (done + repeats) * count]) as work:
            _tile(work.reshape(repeats, count), ids, span)
            rng.shuffle(work)
        done += repeats
    return result


def _tile(rows: np.ndarray, ids: np.ndarray | range, span: range | None) -> None:
    """Write ``ids`` into every row of int32 ``rows`` [R, D], block by block: a ``range``
    (``span``) as ``arange`` blocks, no [D] temporary."""
    if span is None:
        rows[0] = ids
    else:
        fill_arange(rows[0], span.start)
    for row in range(1, len(rows)):
        rows[row] = rows[0]
