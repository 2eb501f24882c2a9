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


@dataclass(frozen=True)
class PackLayout:
    """What BFD decides from the lengths alone: where the k-th piece of every size goes.

    The bins' shapes (which sizes sit where) depend only on the multiset of piece sizes;
    ``order`` only decides which of the equal-sized pieces takes which place. So one
    layout serves every epoch (:func:`fill_pieces`).

    Attributes:
        capacity: tokens per bin.
        lengths: int64 [D] the document lengths.
        key: [D] sort key of each document's remainder piece (decreasing size, empty last).
        remainders: R, documents with a non-empty remainder piece.
        full_count: F, capacity-sized pieces (bins 0 .. F-1, piece rows 0 .. F-1).
        row: int64 [R] the piece row of the k-th remainder piece in (size desc, order).
        piece_length: int64 [P] tokens of each piece row.
        bin_offsets: int64 [B + 1].
    """

    capacity: int
    lengths: np.ndarray
    key: np.ndarray
    remainders: int
    full_count: int
    row: np.ndarray
    piece_length: np.ndarray
    bin_offsets: np.ndarray


def pack_layout(lengths: np.ndarray, capacity: int) -> PackLayout:
    """The :class:`PackLayout` of BFD over documents of ``lengths`` (int [D], >= 0) into
    bins of ``capacity`` (>= 1) tokens."""
    lengths = check_lengths("lengths", lengths).astype(np.int64, copy=False)
    capacity = check_int("capacity", capacity, 1)
    whole = lengths // capacity
    remainder = lengths - whole * capacity
    full_count = int(whole.sum())
    del whole
    per_size = np.bincount(remainder, minlength=capacity)
    key = _sort_key(remainder, capacity)
    del remainder
    sizes = np.repeat(np.arange(capacity - 1, 0, -1, dtype=np.int64), per_size[:0:-1])
    piece_bin, rank, bins = _place(sizes, capacity, full_count)
    # Bin b's pieces go to rows bin_offsets[b] + rank (rank: placement order in the bin).
    filled = np.bincount(piece_bin, minlength=bins)
    filled[:full_count] += 1  # a full bin holds its one capacity-sized piece
    bin_offsets = np.zeros(bins + 1, dtype=np.int64)
    np.cumsum(filled, out=bin_offsets[1:])
    del filled
    row = bin_offsets[piece_bin]
    row += rank
    del piece_bin, rank
    piece_length = np.empty(int(bin_offsets[-1]), dtype=np.int64)
    piece_length[:full_count] = capacity  # full bins are bins 0 .. F-1, one row each
    piece_length[row] = sizes
    return PackLayout(
        capacity, lengths, key, len(sizes), full_count, row, piece_length, bin_offsets
    )


def fill_documents(
    layout: PackLayout, order: np.ndarray, out: np.ndarray | None = None
) -> np.ndarray:
    """The document of every piece row when equal pieces go in ``order``.

    A piece's offset follows from its row and document: the capacity-sized pieces of a
    document sit in consecutive rows of 0 .. F-1 (offsets 0, capacity, ...), and a
    remainder piece starts at ``(length // capacity) * capacity`` (0 unless cut).

    Args:
        layout: from :func:`pack_layout`.
        order: int [D] a permutation of ``[0, D)`` (checked by the caller).
        out: optional integer [P] array to write (values are cast).

    Returns:
        ``out``, or int64 [P].
    """
    if out is None:
        out = np.empty(len(layout.piece_length), dtype=np.int64)
    # Remainders, longest first, equal lengths in ``order`` (a stable sort; the empty
    # remainders sort last and are cut off).
    sort = np.argsort(layout.key[order], kind="stable")[: layout.remainders]
    out[layout.row] = order[sort]
    full = layout.full_count
    if full:
        cut = order[np.flatnonzero(layout.lengths[order] >= layout.capacity)]
        out[:full] = np.repeat(cut, layout.lengths[cut] // layout.capacity)
    return out


def full_offsets(documents: np.ndarray, capacity: int) -> np.ndarray:
    """int64 [F] offsets of the capacity-sized pieces of rows 0 .. F-1 (their documents
    ``documents``, each document's pieces in consecutive rows): 0, capacity, ..."""
    full = len(documents)
    run = np.ones(full, dtype=bool)
    run[1:] = documents[1:] != documents[:-1]
    starts = np.flatnonzero(run)
    offsets = np.arange(full, dtype=np.int64)
    offsets -= np.repeat(starts, np.diff(starts, append=full))
    offsets *= capacity
    return offsets


def piece_offsets(layout: PackLayout, documents: np.ndarray) -> np.ndarray:
    """int64 [P] the first token of every piece inside its document (see
    :func:`fill_documents`)."""
    capacity, full = layout.capacity, layout.full_count
    offsets = layout.lengths[documents] // capacity
    offsets *= capacity
    offsets[:full] = full_offsets(documents[:full], capacity)
    return offsets


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
    layout = pack_layout(lengths, capacity)
    count = len(layout.lengths)
    order = np.arange(count, dtype=np.int64) if order is None else check_order(order, count)
    document = fill_documents(layout, order)
    offset = piece_offsets(layout, document)
    return PackedBins(document, offset, layout.piece_length, layout.bin_offsets)


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
