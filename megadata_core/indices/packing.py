"""Best-fit-decreasing packing of documents into samples (bins) of a fixed capacity.

:func:`best_fit_pack` is exact best fit decreasing (BFD): pieces are placed from the
largest to the smallest, each into the open bin with the *smallest* remaining capacity
that still holds it, a new bin when none does. Documents longer than the capacity are
cut into capacity-sized pieces (each fills a bin alone) and a remainder piece, which is
packed like any document; empty documents are skipped.

Ties, so that the result is a pure function of the inputs:

* pieces of equal length are placed in ``order`` (the caller's shuffled document order);
  the full pieces of one document in increasing offset;
* among open bins with the same remaining capacity, the piece goes to the bin that has
  had that remaining capacity the longest (first in, first out); bins are numbered in
  the order they are opened.

How it runs without a Python loop over documents or bins: pieces of one size s are
placed all at once. Bins are kept only as counts per remaining-capacity class c plus,
per class, a FIFO queue of bin ids held as numpy segments. For a size-s piece the best
fit is the smallest non-empty class c >= s; that bin then falls to c - s, and since no
bin has a capacity in [s, c) it stays the best fit while it holds s, so it takes
``c // s`` pieces in a row and ends in class ``c % s``. Walking the classes >= s upwards,
every bin of a class takes ``c // s`` pieces (the last bin used maybe fewer): a cumsum
of ``count[c] * (c // s)`` over the classes finds where the n_s pieces run out, and the
pieces left open new bins of ``capacity // s`` pieces each. The Python work per size is
one step per non-empty class the pieces reach (each such class but the last is emptied);
the numpy work is over the classes >= s, and the piece -> bin map is one ``np.repeat``
at the end. Memory is O(documents + bins + capacity), never documents x capacity.

The padding fraction of a packing is ``1 - sum(lengths) / (B * capacity)``: B bins, each
padded at its end.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from megadata_core.errors import DataError
from megadata_core.indices._checks import check_int, check_lengths


@dataclass(frozen=True)
class PackedBins:
    """Packed pieces in CSR form: bin b holds piece rows ``bin_offsets[b]:bin_offsets[b+1]``,
    in the order they sit in the sample (placement order: longest first).

    Attributes:
        piece_document: int64 [P] position of the piece's document in ``lengths``.
        piece_offset: int64 [P] first token of the piece inside its document.
        piece_length: int64 [P] tokens in the piece (1 .. capacity).
        bin_offsets: int64 [B + 1], starting at 0.
    """

    piece_document: np.ndarray
    piece_offset: np.ndarray
    piece_length: np.ndarray
    bin_offsets: np.ndarray

    @property
    def num_bins(self) -> int:
        return len(self.bin_offsets) - 1

    def bin_lengths(self) -> np.ndarray:
        """int64 [B] tokens in each bin."""
        tokens = np.zeros(len(self.piece_length) + 1, dtype=np.int64)
        np.cumsum(self.piece_length, out=tokens[1:])
        return tokens[self.bin_offsets[1:]] - tokens[self.bin_offsets[:-1]]


def check_order(order: object, count: int) -> np.ndarray:
    """``order`` as int64 [count], a permutation of ``[0, count)`` (DataError if not)."""
    array = np.asarray(order)
    if array.shape != (count,) or (count and array.dtype.kind not in "iu"):
        raise DataError(
            f"order: expected a permutation of [0, {count}), got {array.dtype} {array.shape}"
        )
    array = array.astype(np.int64, copy=False)
    if count:
        low, high = int(array.min()), int(array.max())
        if low < 0 or high >= count:
            raise DataError(f"order: {low if low < 0 else high} is outside [0, {count})")
        seen = np.zeros(count, dtype=np.bool_)
        seen[array] = True
        if not seen.all():
            raise DataError(f"order: not a permutation of [0, {count}) (repeated entries)")
    return array


def _sort_key(sizes: np.ndarray, capacity: int) -> np.ndarray:
    """Keys that sort sizes in [1, capacity) decreasingly and 0 last; 16-bit where they
    fit, which numpy's stable sort handles as a radix sort (linear time)."""
    key = capacity - 1 - sizes
    key[sizes == 0] = capacity - 1
    return key.astype(np.uint16 if capacity <= 1 << 16 else np.int64)


def best_fit_pack(
    lengths: np.ndarray, capacity: int, order: np.ndarray | None = None
) -> PackedBins:
    """Best-fit-decreasing packing of documents into bins of ``capacity`` tokens.

    Args:
        lengths: int [D] document lengths, >= 0 (zero-length documents are skipped).
        capacity: tokens per bin (``sequence_length + add_extra_token``), >= 1.
        order: int [D] a permutation of ``[0, D)``: pieces of equal length are placed in
            this order (None: ``arange(D)``).

    Returns:
        :class:`PackedBins`; bins are numbered in opening order (first the bins of
        capacity-sized pieces, in ``order``, then as BFD opens them).
    """
    lengths = check_lengths("lengths", lengths).astype(np.int64, copy=False)
    capacity = check_int("capacity", capacity, 1)
    count = len(lengths)
    order = np.arange(count, dtype=np.int64) if order is None else check_order(order, count)

    # Capacity-sized pieces: bins 0 .. F-1, one each, in document order, then by offset.
    ordered_lengths = lengths[order]
    whole = ordered_lengths // capacity
    remainder = ordered_lengths - whole * capacity
    del ordered_lengths
    full_count = int(whole.sum())
    full_document = np.repeat(order, whole)
    starts = np.cumsum(whole) - whole
    full_offset = np.arange(full_count, dtype=np.int64)
    full_offset -= np.repeat(starts, whole)
    full_offset *= capacity
    del starts

    # Remainders, longest first, equal lengths in ``order`` (a stable sort; the empty
    # remainders sort last and are cut off).
    sort = np.argsort(_sort_key(remainder, capacity), kind="stable")
    per_size = np.bincount(remainder, minlength=capacity)
    sort = sort[: count - int(per_size[0])]
    documents = order[sort]
    offsets = whole[sort]
    offsets *= capacity
    del sort, whole, remainder
    sizes = np.repeat(np.arange(capacity - 1, 0, -1, dtype=np.int64), per_size[:0:-1])
    piece_bin, rank, bins = _place(sizes, capacity, full_count)

    # Bin b's pieces go to rows bin_offsets[b] + rank (rank: placement order in the bin).
    filled = np.bincount(piece_bin, minlength=bins)
    filled[:full_count] += 1
    bin_offsets = np.zeros(bins + 1, dtype=np.int64)
    np.cumsum(filled, out=bin_offsets[1:])
    del filled
    row = bin_offsets[piece_bin]
    row += rank
    del piece_bin, rank
    total = int(bin_offsets[-1])
    piece_document = np.empty(total, dtype=np.int64)
    piece_offset = np.empty(total, dtype=np.int64)
    piece_length = np.empty(total, dtype=np.int64)
    piece_document[row] = documents
    piece_offset[row] = offsets
    piece_length[row] = sizes
    full_rows = bin_offsets[:full_count]  # one piece per full bin
    piece_document[full_rows] = full_document
    piece_offset[full_rows] = full_offset
    piece_length[full_rows] = capacity
    return PackedBins(piece_document, piece_offset, piece_length, bin_offsets)


def _place(
    sizes: np.ndarray, capacity: int, first_bin: int
) -> tuple[np.ndarray, np.ndarray, int]:
    """BFD with FIFO ties of the pieces ``sizes`` (sorted decreasingly, each in
    ``[1, capacity)``) into bins numbered from ``first_bin``.

    Returns ``(bin, rank, bins)``: int64 [P] the bin of every piece and its rank among
    that bin's pieces (placement order), and the number of bins in all.
    """
    count = np.zeros(capacity, dtype=np.int64)  # open bins per remaining capacity
    queues: list[list[np.ndarray]] = [[] for _ in range(capacity)]
    filled = np.zeros(len(sizes), dtype=np.int64)  # pieces per bin so far (bin - first_bin)
    taken: list[np.ndarray] = []  # bins (minus first_bin) that took pieces, in order
    takes: list[int] = []  # pieces each bin of taken[i] took
    bases: list[np.ndarray] = []  # their pieces before
    next_bin = 0

    def take(bins: np.ndarray, pieces: int, target: int) -> None:
        taken.append(bins)
        takes.append(pieces)
        bases.append(filled[bins])
        filled[bins] += pieces
        if target > 0:  # a full bin (class 0) never takes a piece again
            queues[target].append(bins)
            count[target] += len(bins)

    if len(sizes) == 0:
        empty = np.empty(0, dtype=np.int64)
        return empty, empty, first_bin
    change = np.flatnonzero(sizes[1:] != sizes[:-1]) + 1
    group_start = np.concatenate([[0], change]).tolist()
    group_stop = np.concatenate([change, [len(sizes)]]).tolist()
    for start, stop in zip(group_start, group_stop):
        size = int(sizes[start])
        left = stop - start
        classes = count[size:]
        per_bin = np.arange(size, capacity, dtype=np.int64) // size
        reach = np.cumsum(classes * per_bin)
        last = int(np.searchsorted(reach, left)) if reach.size else 0
        for c in (np.flatnonzero(classes[: last + 1]) + size).tolist():
            segments = queues[c]
            held = segments[0] if len(segments) == 1 else np.concatenate(segments)
            each = c // size
            if len(held) * each <= left:  # every bin of the class is filled down
                left -= len(held) * each
                queues[c] = []
                count[c] = 0
                take(held, each, c - each * size)
                continue
            filled_bins, rest = divmod(left, each)
            if filled_bins:
                take(held[:filled_bins], each, c - each * size)
            if rest:
                take(held[filled_bins : filled_bins + 1], rest, c - rest * size)
            used = filled_bins + (rest > 0)
            queues[c] = [held[used:]]
            count[c] -= used
            left = 0
            break
        if left:  # new bins, ``capacity // size`` pieces each, the last maybe fewer
            each = capacity // size
            filled_bins, rest = divmod(left, each)
            new = np.arange(next_bin, next_bin + filled_bins + (rest > 0), dtype=np.int64)
            next_bin += len(new)
            if filled_bins:
                take(new[:filled_bins], each, capacity - each * size)
            if rest:
                take(new[filled_bins:], rest, capacity - rest * size)
    bins = np.concatenate(taken)
    repeats = np.repeat(np.asarray(takes, dtype=np.int64), [len(t) for t in taken])
    run_start = np.cumsum(repeats) - repeats  # first piece of each (bin, step) run
    rank = np.arange(len(sizes), dtype=np.int64)
    rank -= np.repeat(run_start - np.concatenate(bases), repeats)
    bins += first_bin
    return np.repeat(bins, repeats), rank, first_bin + next_bin
