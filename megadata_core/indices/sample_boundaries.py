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
(:func:`samples_in_epochs`); every row both compute is equal.

Vectorized and block-wise: the document index is read ``block_size`` entries at a
time (an array, or a source that computes its blocks, e.g. the Feistel order); a group
of blocks (one per thread) is gathered (``np.take`` of the lengths) and summed, then
each block takes an int64 cumulative sum of its lengths and ``np.searchsorted`` of the
sample targets that fall in it, and writes those rows. Memory is a group's gathered
lengths and sums (O(threads x block_size)), whatever the corpus size; the output comes
from an allocator (:mod:`megadata_core.indices.arrays`), so it can be a memory-mapped
file. The result never depends on the number of threads or the block size.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

import numpy as np

from megadata_core.checks import (
    INT32_MAX,
    check_int,
    check_int_array,
    check_lengths,
)
from megadata_core.cores import usable_threads
from megadata_core.errors import DataError
from megadata_core.indices.arrays import Allocate, in_memory, plain, take_into

#: Document-index entries per block: a group (one block per thread, at most 8) holds
#: ~20 bytes per entry (ids, gathered lengths, int64 sums), ~350 MB at 8 threads.
_BLOCK_SIZE = 1 << 21
#: A corpus of at most this many documents has its lengths copied to uint16 for the
#: gathers (half the bytes: faster random reads); larger ones are gathered in place
#: (the copy would be anonymous memory in proportion to the corpus).
COPY_LENGTHS_BELOW = 1 << 27


class DocumentBlocks(Protocol):
    """A document index computed on demand: ``len()`` entries, ``block(lo, hi)`` the
    ids at positions ``[lo, hi)`` (any integer dtype)."""

    def __len__(self) -> int: ...

    def block(self, lo: int, hi: int) -> np.ndarray: ...


def _run(work: Callable, items: list, pool: ThreadPoolExecutor | None) -> list:
    """``[work(*item) for item in items]``, on the pool's threads (None: inline)."""
    if pool is None or len(items) <= 1:
        return [work(*item) for item in items]
    return list(pool.map(lambda item: work(*item), items))


def _default_threads(num_threads: int | None) -> int:
    if num_threads is not None:
        return check_int("num_threads", num_threads, 1)
    return usable_threads(8)


def samples_in_epochs(
    num_epochs: int,
    tokens_per_epoch: int,
    sequence_length: int,
    add_extra_token: bool | int = True,
    drop_last_partial_sequence: bool = True,
) -> int:
    """Samples that ``num_epochs`` epochs yield: ``(E*T - extra) // S``.

    With ``drop_last_partial_sequence=False`` a trailing partial sample counts too
    (exact ceiling). Megatron's C++ computes that ceiling in float32 and is off by one
    past ~2**24 tokens; this function is exact.
    """
    epochs = check_int("num_epochs", num_epochs, 0)
    tokens = check_int("tokens_per_epoch", tokens_per_epoch, 1)
    length = check_int("sequence_length", sequence_length, 1)
    usable = max(0, epochs * tokens - (1 if add_extra_token else 0))
    if drop_last_partial_sequence:
        return usable // length
    return -(-usable // length)


def sample_index_dtype(num_positions: int, max_length: int) -> np.dtype:
    """Megatron's choice: int32 when ``max(len(document_index), max length)`` fits, else
    int64 (then every position and offset fits; int32 would overflow)."""
    return np.dtype(np.int32 if max(num_positions, max_length) <= INT32_MAX else np.int64)


def _gather_source(lengths: np.ndarray, num_positions: int, max_length: int) -> np.ndarray:
    """``lengths``, or a uint16 copy when every length fits, the index reads the corpus
    densely and the corpus is small enough (``COPY_LENGTHS_BELOW``): random gathers
    from half the bytes are faster, the values are the same."""
    if (
        num_positions >= len(lengths)
        and len(lengths) <= COPY_LENGTHS_BELOW
        and lengths.dtype.itemsize > 2
        and max_length <= 0xFFFF
    ):
        return lengths.astype(np.uint16)
    return lengths


def _reader(document_index: np.ndarray | DocumentBlocks) -> Callable[[int, int], np.ndarray]:
    if isinstance(document_index, np.ndarray):
        return lambda lo, hi: document_index[lo:hi]
    return document_index.block


def _gather(source: np.ndarray, ids: np.ndarray, out: np.ndarray) -> int:
    """``out[:] = source[ids]`` after a range check; returns the sum (int64)."""
    bound = len(source)
    if ids.size:
        low, high = int(ids.min()), int(ids.max())
        if low < 0 or high >= bound:
            bad = low if low < 0 else high
            raise DataError(f"document_index: id {bad} is out of range [0, {bound})")
    take_into(source, ids, out)  # in range; an unaligned .idx map is not copied whole
    return int(out.sum(dtype=np.int64))


def _fill_block(
    out: np.ndarray,
    lengths: np.ndarray,
    a: int,
    base: int,
    end: int,
    sequence_length: int,
    extra: int,
    last_row: int,
) -> None:
    """Rows j whose target ``j*S + extra`` lies in ``(base, end]``, from the lengths of
    document-index positions ``[a, a + len(lengths))`` (``base`` tokens before ``a``)."""
    first = max(1, (base - extra) // sequence_length + 1)
    last = min(last_row, (end - extra) // sequence_length)
    if last < first:
        return
    ends = np.cumsum(lengths, dtype=np.int64)  # tokens up to each document's end
    start_tokens = np.arange(first, last + 1, dtype=np.int64) * sequence_length
    pos = np.searchsorted(ends, start_tokens + (extra - base), side="left")
    before = ends[pos - 1]  # tokens of this block before pos (pos == 0: none)
    before[pos == 0] = 0
    start_tokens -= before
    start_tokens -= base
    out[first : last + 1, 1] = start_tokens
    pos += a
    out[first : last + 1, 0] = pos


def _fill_rows(
    out: np.ndarray,
    source: np.ndarray,
    read: Callable[[int, int], np.ndarray],
    n: int,
    sequence_length: int,
    extra: int,
    last_row: int,
    threads: int,
    block_size: int,
) -> int:
    """Rows 1..last_row of ``out``, a group of ``threads`` blocks at a time; returns the
    tokens of the whole document index."""
    buffers = [np.empty(min(block_size, n), dtype=source.dtype) for _ in range(threads)]

    def gather(k: int, a: int, b: int) -> int:
        return _gather(source, read(a, b), buffers[k][: b - a])

    def fill(k: int, a: int, b: int, base: int, end: int) -> None:
        lengths = buffers[k][: b - a]
        _fill_block(out, lengths, a, base, end, sequence_length, extra, last_row)

    base = 0
    span = block_size * threads
    with ThreadPoolExecutor(threads) if threads > 1 else contextlib.nullcontext() as pool:
        for group in range(0, n, span):
            stop = min(n, group + span)
            starts = range(group, stop, block_size)
            blocks = [(k, a, min(stop, a + block_size)) for k, a in enumerate(starts)]
            totals = _run(gather, blocks, pool)
            bases = list(itertools.accumulate(totals, initial=base))
            _run(fill, [(*block, bases[k], bases[k + 1]) for k, block in enumerate(blocks)], pool)
            base = bases[-1]
    return base


def sample_index(
    sequence_lengths: np.ndarray,
    document_index: np.ndarray | DocumentBlocks,
    sequence_length: int,
    num_epochs: int,
    tokens_per_epoch: int,
    drop_last_partial_sequence: bool = True,
    add_extra_token: bool | int = True,
    *,
    num_threads: int | None = None,
    block_size: int = _BLOCK_SIZE,
    empty: Allocate = in_memory,
) -> np.ndarray:
    """The 2-D sample index, equal in values to megatron-core's ``helpers.build_sample_idx``
    (see the module docstring for the exact rows and the one deliberate difference).

    Args:
        sequence_lengths: int [N] length of every document of the corpus (not negative).
        document_index: int [n] positions into ``sequence_lengths``, or a
            :class:`DocumentBlocks` computing them; together they hold exactly
            ``num_epochs * tokens_per_epoch`` tokens.
        sequence_length: S >= 1.
        num_epochs: E >= 1.
        tokens_per_epoch: T >= 1.
        drop_last_partial_sequence: drop a trailing sample shorter than S + extra.
        add_extra_token: samples span S + 1 tokens (Megatron's default) instead of S.
        num_threads: threads to use (default: up to 8 available CPUs); never changes
            the result.
        block_size: document-index entries per block (bounds the working memory);
            never changes the result.
        empty: where the result is made (:mod:`megadata_core.indices.arrays`).

    Returns:
        [num_samples + 1, 2] int32, or int64 when ``max(n, max length) >= 2**31``
        (Megatron's rule), from ``empty("sample_index", ...)``.
    """
    lengths = check_lengths("sequence_lengths", sequence_lengths)
    if lengths.size == 0:
        raise DataError("sequence_lengths: empty corpus (no documents)")
    if not hasattr(document_index, "block"):
        document_index = check_int_array("document_index", document_index)
    length = check_int("sequence_length", sequence_length, 1)
    epochs = check_int("num_epochs", num_epochs, 1)
    tokens = check_int("tokens_per_epoch", tokens_per_epoch, 1)
    block = check_int("block_size", block_size, 1)
    extra = 1 if add_extra_token else 0
    threads = _default_threads(num_threads)
    n = len(document_index)
    if n == 0:
        raise DataError("document_index: empty, but tokens_per_epoch > 0")

    max_length = int(lengths.max())
    source = _gather_source(lengths, n, max_length)
    num_samples = samples_in_epochs(epochs, tokens, length, extra, drop_last_partial_sequence)
    shape = (num_samples + 1, 2)
    result = empty("sample_index", shape, sample_index_dtype(n, max_length))
    out = plain(result)
    out[0] = 0
    # Rows past the stream's end (the partial sample) are written below; if the index
    # holds other than E*T tokens the build fails after the fill.
    last_row = min(num_samples, max(0, epochs * tokens - extra) // length)
    read = _reader(document_index)
    total = _fill_rows(out, source, read, n, length, extra, last_row, threads, block)
    if total != epochs * tokens:
        raise DataError(
            f"tokens_per_epoch: {epochs} epochs x {tokens} tokens != {total} tokens "
            "in document_index"
        )
    # Past the stream's end (the partial sample): the last document, its length - extra.
    out[last_row + 1 :, 0] = n - 1
    out[last_row + 1 :, 1] = int(lengths[int(read(n - 1, n)[0])]) - extra
    return result
