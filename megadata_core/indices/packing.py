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
the numpy work is over the classes >= s. The placement is kept as runs (these bins take
k pieces each), and every piece's row comes from them at the end in one cumsum. Memory
is O(documents + bins + capacity), never documents x capacity.

Which document of a size takes which place is a sort of the documents by (remainder
size, rank in ``order``), one per order (epoch): :func:`fill_documents`.

The padding fraction of a packing is ``1 - sum(lengths) / (B * capacity)``: B bins, each
padded at its end.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np

from megadata_core.errors import DataError
from megadata_core.indices._checks import INT32_MAX, check_int, check_lengths


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


def _sort_keys(remainder: np.ndarray, capacity: int) -> np.ndarray:
    """``capacity - 1 - remainder``: sorts remainders in [1, capacity) decreasingly and 0
    (no remainder piece) last. 16-bit where it fits, which numpy's stable sort handles as
    a radix sort (linear time)."""
    dtype = np.uint16 if capacity <= 1 << 16 else remainder.dtype
    return np.subtract(capacity - 1, remainder, dtype=dtype, casting="unsafe")


@dataclass(frozen=True)
class PackLayout:
    """What BFD decides from the lengths alone: where the k-th piece of every size goes.

    The bins' shapes (which sizes sit where) depend only on the multiset of piece sizes;
    ``order`` only decides which of the equal-sized pieces takes which place. So one
    layout serves every epoch (:func:`fill_documents`).

    Attributes:
        capacity: tokens per bin.
        lengths: int [D] the document lengths (as given: int32 stays int32).
        key: [D] sort key of each document's remainder piece (decreasing size, empty last).
        cut: bool [D] documents of at least ``capacity`` tokens (they have full pieces).
        remainders: R, documents with a non-empty remainder piece.
        full_count: F, capacity-sized pieces (bins 0 .. F-1, piece rows 0 .. F-1).
        row: intp [R] the piece row of the k-th remainder piece in (size desc, order).
        per_key: int64 [capacity] remainder pieces per key (key k: size capacity - 1 - k).
        bin_offsets: int64 [B + 1]; P = ``bin_offsets[-1]`` piece rows.
    """

    capacity: int
    lengths: np.ndarray
    key: np.ndarray
    cut: np.ndarray
    remainders: int
    full_count: int
    row: np.ndarray
    per_key: np.ndarray
    bin_offsets: np.ndarray

    @property
    def num_pieces(self) -> int:
        """P, piece rows."""
        return int(self.bin_offsets[-1])

    def piece_lengths(self) -> np.ndarray:
        """int64 [P] tokens of each piece row."""
        capacity, full = self.capacity, self.full_count
        lengths = np.empty(self.num_pieces, dtype=np.int64)
        lengths[:full] = capacity  # full bins are bins 0 .. F-1, one row each
        sizes = np.arange(capacity - 1, 0, -1, dtype=np.int64)
        lengths[self.row] = np.repeat(sizes, self.per_key[:-1])
        return lengths


def pack_layout(lengths: np.ndarray, capacity: int) -> PackLayout:
    """The :class:`PackLayout` of BFD over documents of ``lengths`` (int [D], >= 0) into
    bins of ``capacity`` (>= 1) tokens."""
    lengths = check_lengths("lengths", lengths)
    capacity = check_int("capacity", capacity, 1)
    # int32 intermediates where the values fit (a corpus's lengths are int32): half the
    # memory traffic of int64.
    if lengths.dtype != np.int64 and (lengths.dtype != np.int32 or capacity > INT32_MAX):
        lengths = lengths.astype(np.int64)
    remainder = np.remainder(lengths, capacity)
    full_count = (int(lengths.sum(dtype=np.int64)) - int(remainder.sum(dtype=np.int64))) // capacity
    key = _sort_keys(remainder, capacity)
    del remainder
    # per_key[k]: remainders of size capacity - 1 - k (k = capacity - 1: none)
    per_key = np.bincount(key, minlength=capacity)
    runs = _place(per_key[:-1], capacity)
    row, bin_offsets = runs.rows(full_count)
    return PackLayout(
        capacity, lengths, key, lengths >= capacity, len(row), full_count, row, per_key,
        bin_offsets,
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
        out = np.empty(layout.num_pieces, dtype=np.int64)
    # Remainders, longest first, equal lengths in ``order`` (a stable sort; the empty
    # remainders sort last and are cut off).
    sort = _stable_argsort(layout.key, order)[: layout.remainders]
    out[layout.row] = order[sort]
    del sort
    full = layout.full_count
    if full:
        cut = order[np.flatnonzero(layout.cut[order])]
        out[:full] = np.repeat(cut, layout.lengths[cut] // layout.capacity)
    return out


def _stable_argsort(key: np.ndarray, order: np.ndarray) -> np.ndarray:
    """int64 [D] ``np.argsort(key[order], kind="stable")``.

    Sorted as the uint64 values ``key[order[i]] << 32 | i``: they are distinct, so numpy's
    unstable sort (SIMD where the CPU has it) gives the stable order, faster than the
    radix argsort of 16-bit keys; the positions are extracted in place.
    """
    count = len(order)
    if count > 1 << 32 or key.dtype.itemsize > 4:
        return np.argsort(key[order], kind="stable")
    packed = np.empty(count, dtype=np.uint64)
    halves = packed.view(np.uint32)
    low, high = (0, 1) if sys.byteorder == "little" else (1, 0)
    halves[high::2] = key[order]
    halves[low::2] = np.arange(count, dtype=np.uint32)
    packed.sort()
    packed &= np.uint64(0xFFFFFFFF)
    return packed.view(np.int64)


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
    offsets = layout.lengths[documents].astype(np.int64)
    offsets //= capacity
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
    return PackedBins(document, offset, layout.piece_lengths(), layout.bin_offsets)


@dataclass(frozen=True)
class _Runs:
    """The placement as runs: run i puts ``takes[i]`` consecutive pieces into each bin of
    ``taken[i]`` (bins counted from the first remainder bin), after ``bases[i]`` pieces
    it already holds; runs are in placement order. ``filled[:opened]``: pieces per bin."""

    taken: list
    takes: list
    bases: list
    filled: np.ndarray
    opened: int

    def rows(self, full_count: int) -> tuple[np.ndarray, np.ndarray]:
        """``(row, bin_offsets)``: intp [R] the piece row of every placed piece, in
        placement order, and int64 [B + 1] with the ``full_count`` one-piece bins first."""
        bins = full_count + self.opened
        bin_offsets = np.zeros(bins + 1, dtype=np.int64)
        bin_offsets[1 : full_count + 1] = 1  # a full bin holds its one capacity-sized piece
        bin_offsets[full_count + 1 :] = self.filled[: self.opened]
        np.cumsum(bin_offsets, out=bin_offsets)
        if not self.taken:
            return np.empty(0, dtype=np.intp), bin_offsets
        taken = np.concatenate(self.taken)
        repeats = np.repeat(np.asarray(self.takes, dtype=np.int64), [len(t) for t in self.taken])
        # The pieces of one (bin, run) entry take consecutive rows from bin_offsets[bin] +
        # base: rows are a cumsum of ones with a jump at each entry's first piece (one
        # [R] array, written in place; no per-piece gather).
        start = bin_offsets[taken + full_count]
        start += np.concatenate(self.bases)
        jump = start.copy()
        jump[1:] -= start[:-1] + repeats[:-1] - 1
        row = np.ones(int(repeats.sum()), dtype=np.intp)
        row[np.cumsum(repeats) - repeats] = jump
        np.cumsum(row, out=row)
        return row, bin_offsets


def _place(per_size: np.ndarray, capacity: int) -> _Runs:
    """BFD with FIFO ties of ``per_size[k]`` pieces of size ``capacity - 1 - k`` (largest
    first; every size in ``[1, capacity)``) into bins numbered from 0."""
    count = np.zeros(capacity, dtype=np.int64)  # open bins per remaining capacity
    queues: list[list[np.ndarray]] = [[] for _ in range(capacity)]
    # pieces per bin so far (< capacity); there are at most as many bins as pieces
    filled = np.zeros(int(per_size.sum()), dtype=np.int32 if capacity <= INT32_MAX else np.int64)
    taken: list[np.ndarray] = []  # bins that took pieces, in order
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

    present = np.flatnonzero(per_size)
    for size, left in zip((capacity - 1 - present).tolist(), per_size[present].tolist()):
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
    return _Runs(taken, takes, bases, filled, next_bin)
