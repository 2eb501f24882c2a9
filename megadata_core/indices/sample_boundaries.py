"""Megatron's sample index: where every sample starts in the document-ordered stream.

Concatenate the documents in ``document_index`` order into one token stream. Sample j
starts at token ``j * S`` and spans ``S + extra`` tokens (``extra`` = 1 with
``add_extra_token``), so consecutive samples overlap by ``extra``. Row j of the index is
``(i, offset)`` where i is a position in ``document_index`` and ``offset`` a token offset
in that document, exactly as megatron-core's C++ ``build_sample_idx`` writes it:

* row 0 is ``(0, 0)``;
* for j >= 1 with target ``t = j*S + extra`` inside the stream, i is the FIRST position
  whose documents end at or past ``t`` (so a boundary that falls exactly at the end of a
  document points at that document with ``offset = length - extra``, never at the next
  one or at empty documents after it) and ``offset = j*S - tokens before i``;
* a target past the end of the stream (the trailing partial sample kept with
  ``drop_last_partial_sequence=False``) gives ``(len(document_index) - 1,
  length of that last document - extra)``; with an empty last document and extra = 1
  that offset is -1, as in Megatron (whose Python wrapper then fails its own assert).

Difference from Megatron, on purpose: with ``drop_last_partial_sequence=False`` Megatron
counts samples as ``ceil(float32(E*T - extra) / S)``, which past ~2**24 tokens loses the
partial sample or adds an empty one. Here the count is the exact integer ceiling
(:func:`megadata_core.indices.epochs.samples_in_epochs`); every row both compute is equal.

Vectorized, in two phases over at most ``_MAX_BLOCKS`` blocks of the document index:
(1) gather the lengths in document-index order (``np.take``) and sum each block; (2) per
block, an int64 cumulative sum of its lengths and ``np.searchsorted`` of the sample targets
that fall in it. No per-token arrays; memory is the gathered lengths (2 or 4 bytes per
document-index entry) plus one block's int64 sums. Blocks run on threads (numpy releases
the GIL); the result never depends on the number of threads or blocks.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from megadata_core.errors import DataError
from megadata_core.indices._checks import (
    INT32_MAX,
    check_int,
    check_int_array,
    check_lengths,
)
from megadata_core.indices.epochs import samples_in_epochs

_MIN_BLOCK = 1 << 16  # document-index entries below which a block is not split further
_MAX_BLOCKS = 64  # blocks per call: a bound on Python-level steps, independent of n


def _run(work: Callable[[int], None], blocks: Iterable[int], threads: int) -> None:
    """``work(b)`` for every block, on ``threads`` threads (1: inline)."""
    if threads <= 1:
        for block in blocks:
            work(block)
        return
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(work, blocks))


def _default_threads(num_threads: int | None) -> int:
    if num_threads is not None:
        return check_int("num_threads", num_threads, 1)
    try:
        return min(8, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return min(8, os.cpu_count() or 1)


def sample_index_dtype(num_positions: int, max_length: int) -> np.dtype:
    """Megatron's choice: int32 when ``max(len(document_index), max length)`` fits, else
    int64 (then every position and offset fits; int32 would overflow)."""
    return np.dtype(np.int32 if max(num_positions, max_length) <= INT32_MAX else np.int64)


def _gather_source(lengths: np.ndarray, num_positions: int, max_length: int) -> np.ndarray:
    """``lengths``, or a uint16 copy when every length fits and the index reads the corpus
    densely: random gathers from half the bytes are faster, the values are the same."""
    if num_positions >= len(lengths) and lengths.dtype.itemsize > 2 and max_length <= 0xFFFF:
        return lengths.astype(np.uint16)
    return lengths


def _gather_lengths(
    source: np.ndarray, document_index: np.ndarray, threads: int
) -> tuple[np.ndarray, list[int], list[int]]:
    """Phase 1: the lengths in document-index order, gathered block by block.

    Returns ``(lengths, starts, bases)``: [n] of ``source``'s dtype; block k is
    ``[starts[k], starts[k + 1])`` (at most ``_MAX_BLOCKS`` blocks, ``starts[-1] = n``);
    ``bases[k]`` = tokens before block k, ``bases[-1]`` = all tokens (Python ints).
    Raises DataError for an id outside ``[0, len(source))`` (checked before gathering).
    """
    n, bound = len(document_index), len(source)
    num_blocks = max(1, min(_MAX_BLOCKS, n // _MIN_BLOCK))
    starts = [n * k // num_blocks for k in range(num_blocks + 1)]
    lengths = np.empty(n, dtype=source.dtype)
    totals = [0] * num_blocks

    def work(k: int) -> None:
        a, b = starts[k], starts[k + 1]
        ids = document_index[a:b]
        if ids.size:
            low, high = int(ids.min()), int(ids.max())
            if low < 0 or high >= bound:
                bad = low if low < 0 else high
                raise DataError(f"document_index: id {bad} is out of range [0, {bound})")
        # In range, so "wrap" never wraps; it only skips numpy's per-element error path.
        np.take(source, ids, out=lengths[a:b], mode="wrap")
        totals[k] = int(lengths[a:b].sum(dtype=np.int64))

    _run(work, range(num_blocks), min(threads, num_blocks))
    bases = [0]
    for total in totals:
        bases.append(bases[-1] + total)
    return lengths, starts, bases


def _fill_rows(
    out: np.ndarray,
    lengths: np.ndarray,
    starts: list[int],
    bases: list[int],
    sequence_length: int,
    extra: int,
    last_row: int,
    threads: int,
) -> None:
    """Phase 2: write rows 1..last_row of ``out`` (targets inside the stream), block by
    block, each from the block's own int64 cumulative sum."""

    def work(k: int) -> None:
        a, b, base, end = starts[k], starts[k + 1], bases[k], bases[k + 1]
        # Rows j whose target j*S + extra lies in (base, end] belong to this block.
        first = max(1, (base - extra) // sequence_length + 1)
        last = min(last_row, (end - extra) // sequence_length)
        if last < first:
            return
        ends = np.cumsum(lengths[a:b], dtype=np.int64)  # tokens up to each document's end
        start_tokens = np.arange(first, last + 1, dtype=np.int64) * sequence_length
        pos = np.searchsorted(ends, start_tokens + (extra - base), side="left")
        before = ends[pos - 1]  # tokens of this block before pos (pos == 0: none)
        before[pos == 0] = 0
        start_tokens -= before
        start_tokens -= base
        out[first : last + 1, 1] = start_tokens
        pos += a
        out[first : last + 1, 0] = pos

    _run(work, range(len(starts) - 1), min(threads, len(starts) - 1))


def sample_index(
    sequence_lengths: np.ndarray,
    document_index: np.ndarray,
    sequence_length: int,
    num_epochs: int,
    tokens_per_epoch: int,
    drop_last_partial_sequence: bool = True,
    add_extra_token: bool | int = True,
    *,
    num_threads: int | None = None,
) -> np.ndarray:
    """The 2-D sample index, equal in values to megatron-core's ``helpers.build_sample_idx``
    (see the module docstring for the exact rows and the one deliberate difference).

    Args:
        sequence_lengths: int [N] length of every document of the corpus (not negative).
        document_index: int [n] positions into ``sequence_lengths``; together they hold
            exactly ``num_epochs * tokens_per_epoch`` tokens.
        sequence_length: S >= 1.
        num_epochs: E >= 1.
        tokens_per_epoch: T >= 1.
        drop_last_partial_sequence: drop a trailing sample shorter than S + extra.
        add_extra_token: samples span S + 1 tokens (Megatron's default) instead of S.
        num_threads: threads to use (default: up to 8 available CPUs); never changes
            the result.

    Returns:
        [num_samples + 1, 2] int32, or int64 when ``max(n, max length) >= 2**31``
        (Megatron's rule).
    """
    lengths = check_lengths("sequence_lengths", sequence_lengths)
    if lengths.size == 0:
        raise DataError("sequence_lengths: empty corpus (no documents)")
    doc_index = check_int_array("document_index", document_index)  # range: in phase 1
    length = check_int("sequence_length", sequence_length, 1)
    epochs = check_int("num_epochs", num_epochs, 1)
    tokens = check_int("tokens_per_epoch", tokens_per_epoch, 1)
    extra = 1 if add_extra_token else 0
    threads = _default_threads(num_threads)
    if doc_index.size == 0:
        raise DataError("document_index: empty, but tokens_per_epoch > 0")

    max_length = int(lengths.max())
    source = _gather_source(lengths, len(doc_index), max_length)
    gathered, starts, bases = _gather_lengths(source, doc_index, threads)
    del source  # a uint16 copy of the lengths: not needed past phase 1 (lower peak memory)
    if bases[-1] != epochs * tokens:
        raise DataError(
            f"tokens_per_epoch: {epochs} epochs x {tokens} tokens != {bases[-1]} tokens "
            "in document_index"
        )
    num_samples = samples_in_epochs(epochs, tokens, length, extra, drop_last_partial_sequence)
    out = np.empty((num_samples + 1, 2), dtype=sample_index_dtype(len(doc_index), max_length))
    out[0] = 0
    last_row = min(num_samples, max(0, bases[-1] - extra) // length)
    _fill_rows(out, gathered, starts, bases, length, extra, last_row, threads)
    # Past the stream's end (the partial sample): the last document, its length - extra.
    out[last_row + 1 :, 0] = len(doc_index) - 1
    out[last_row + 1 :, 1] = int(lengths[doc_index[-1]]) - extra
    return out
