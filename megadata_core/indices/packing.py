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
the numpy work is over the classes >= s. In memory the placement runs once, recording
its steps (the bins and the pieces each takes), and the rows are written from the record
once the bin offsets are known; a build that spills places twice (once for the pieces per
bin, then again writing each piece's row, in placement order, into ``row``, a working
file), so that no record grows with the corpus. Memory the build owns: the open
bins' ids and pieces per bin (~6 bytes a bin) and blocks of ``_BLOCK`` documents; what
grows with the corpus (``row``, the results) can be file mappings.

Which document of a size takes which place is a sort of the documents by (remainder
size, rank in ``order``), one per order (epoch), done as a counting sort a block of
``order`` at a time: :func:`fill_documents`. The layout keeps every document's 16-bit
sort key (2 bytes a document; capacities below 2**15), so a fill gathers those instead
of the lengths.

The padding fraction of a packing is ``1 - sum(lengths) / (B * capacity)``: B bins, each
padded at its end.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from megadata_core.checks import INT32_MAX, check_int, check_lengths, narrow_int
from megadata_core.cores import usable_threads
from megadata_core.errors import DataError
from megadata_core.indices.arrays import SCRATCH_PREFIX, Allocate, in_memory, is_spilled


@dataclass(frozen=True)
class _PackedBins:
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
        remainders: R, documents with a non-empty remainder piece.
        full_count: F, capacity-sized pieces (bins 0 .. F-1, piece rows 0 .. F-1).
        row: int32 (int64 past 2**31 - 1 pieces) [R] the piece row of the k-th remainder
            piece in (size desc, order); may be memory-mapped (a working file).
        per_key: int64 [capacity] remainder pieces per key (key k: size capacity - 1 - k).
        bin_offsets: int64 [B + 1]; P = ``bin_offsets[-1]`` piece rows.
        keys: uint16 [D] or None: every document's sort key, with :data:`_LONG_FLAG` set
            when it also has capacity-sized pieces (when the capacity is below that
            flag: the fills then gather 2 bytes a document instead of its length).
    """

    capacity: int
    lengths: np.ndarray
    remainders: int
    full_count: int
    row: np.ndarray
    per_key: np.ndarray
    bin_offsets: np.ndarray
    keys: np.ndarray | None = None

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


#: Documents read per step where the layout or a fill walks the lengths.
_BLOCK = 1 << 20
#: Bytes of a fill's scatter buffer when its output is a file mapping: the output is
#: written in row ranges of this size, in order (random writes to a file mapping much
#: larger than the dirty-page limit would be written back over and over).
FILL_SCRATCH = 1 << 30


#: Set in :attr:`PackLayout.keys` for a document longer than the capacity.
_LONG_FLAG = 1 << 15


def _remainder_counts(
    lengths: np.ndarray, capacity: int, keys: np.ndarray | None = None
) -> tuple[np.ndarray, int]:
    """``(per_key, full_count)``: int64 [capacity] remainder pieces per key (key
    ``capacity - 1 - size``; key capacity - 1 counts documents without one) and F;
    writes every document's key (flagged, see :class:`PackLayout`) into ``keys``."""
    per_key = np.zeros(capacity, dtype=np.int64)
    full = 0
    for lo in range(0, len(lengths), _BLOCK):
        part = lengths[lo : lo + _BLOCK]
        remainder = np.remainder(part, capacity)
        full += (int(part.sum(dtype=np.int64)) - int(remainder.sum(dtype=np.int64))) // capacity
        key = _sort_keys(remainder, capacity)
        per_key += np.bincount(key, minlength=capacity)
        if keys is not None:
            flagged = keys[lo : lo + len(part)]
            flagged[...] = key
            flagged[part >= capacity] |= _LONG_FLAG
    return per_key, full


def pack_layout(lengths: np.ndarray, capacity: int, empty: Allocate = in_memory) -> PackLayout:
    """The :class:`PackLayout` of BFD over documents of ``lengths`` (int [D], >= 0) into
    bins of ``capacity`` (>= 1) tokens; ``bin_offsets`` and the working ``row`` come from
    ``empty`` (memory, or files the build spills to)."""
    lengths = check_lengths("lengths", lengths)
    capacity = check_int("capacity", capacity, 1)
    # int32 intermediates where the values fit (a corpus's lengths are int32): half the
    # memory traffic of int64.
    if lengths.dtype != np.int64 and (lengths.dtype != np.int32 or capacity > INT32_MAX):
        lengths = lengths.astype(np.int64)
    keys = None  # written in order, read by gathers: a spilled file serves as well
    if capacity < _LONG_FLAG:
        keys = empty(SCRATCH_PREFIX + "pack-keys", (len(lengths),), np.uint16)
    per_key, full_count = _remainder_counts(lengths, capacity, keys)
    remainders = int(per_key[:-1].sum())
    # One placement pass when ``row`` is in memory (not a spilled file): the placements are
    # recorded (the bins of each step, ~6 bytes a bin) and turned into rows once the bin
    # offsets are known. A build that spills places twice instead (first for the pieces
    # per bin, then writing each piece's row straight into ``row``): no record grows
    # with the corpus.
    # P = F + R piece rows (one per full piece, one per remainder piece): ``row``'s
    # dtype is known before the placement.
    row = empty(SCRATCH_PREFIX + "pack-rows", (remainders,), narrow_int(full_count + remainders))
    record: list[tuple[np.ndarray, int, np.ndarray]] | None = (
        None if is_spilled(empty, row) else []
    )
    emit = None if record is None else (lambda *placed: record.append(placed))
    filled, opened = _place(per_key[:-1], capacity, emit)
    bin_offsets = empty("bin_offsets", (full_count + opened + 1,), np.int64)
    bin_offsets[0] = 0
    bin_offsets[1 : full_count + 1] = 1  # a full bin holds its one capacity-sized piece
    bin_offsets[full_count + 1 :] = filled[:opened]
    del filled
    np.cumsum(bin_offsets, out=bin_offsets)
    writer = _RowWriter(row, bin_offsets, full_count)
    if record is None:
        _place(per_key[:-1], capacity, writer)
    else:
        for placed in record:
            writer(*placed)
        del record[:]
    return PackLayout(capacity, lengths, remainders, full_count, row, per_key, bin_offsets, keys)


class _RowWriter:
    """Writes the rows of placed pieces into ``row``, in placement order: bin b (numbered
    from the first remainder bin) starts at row ``bin_offsets[F + b]``."""

    def __init__(self, row: np.ndarray, bin_offsets: np.ndarray, full_count: int) -> None:
        self.row, self.bin_offsets, self.full = row, bin_offsets, full_count
        self.at = 0

    def __call__(self, bins: np.ndarray, pieces: int, bases: np.ndarray) -> None:
        step = max(1, _BLOCK // pieces)
        for lo in range(0, len(bins), step):
            start = self.bin_offsets[bins[lo : lo + step].astype(np.int64) + self.full]
            start += bases[lo : lo + step]
            rows = (start[:, None] + np.arange(pieces)).ravel()
            self.row[self.at : self.at + len(rows)] = rows
            self.at += len(rows)


def fill_documents(
    layout: PackLayout,
    order: np.ndarray | Callable[[int, int], np.ndarray],
    out: np.ndarray | None = None,
    scratch_bytes: int | None = None,
    empty: Allocate = in_memory,
) -> np.ndarray:
    """The document of every piece row when equal pieces go in ``order``.

    A piece's offset follows from its row and document: the capacity-sized pieces of a
    document sit in consecutive rows of 0 .. F-1 (offsets 0, capacity, ...), and a
    remainder piece starts at ``(length // capacity) * capacity`` (0 unless cut).

    Walked ``_BLOCK`` documents of ``order`` at a time: each remainder piece's place is
    its key's first place plus the pieces of its key before it (a counting sort, stable
    in ``order``); capacity-sized pieces take rows 0 .. F-1 in ``order``. An ``out``
    that its allocator ``empty`` spilled (:func:`.allocate.is_spilled`) and that is
    larger than ``scratch_bytes`` (default :data:`FILL_SCRATCH`) is filled in row ranges
    of that size through a buffer, each range written in order.

    Args:
        layout: from :func:`pack_layout`.
        order: int [D] a permutation of ``[0, D)`` (checked by the caller), or
            ``order(lo, hi)`` giving its entries ``lo .. hi - 1``.
        out: optional integer [P] array to write (values are cast).
        scratch_bytes: the buffer's bytes (tests make it small).
        empty: the allocator that made ``out``.

    Returns:
        ``out``, or int64 [P].
    """
    if out is None:
        out = np.empty(layout.num_pieces, dtype=np.int64)
    entries = order if callable(order) else (lambda lo, hi: order[lo:hi])
    budget = max(1, (FILL_SCRATCH if scratch_bytes is None else scratch_bytes) // out.itemsize)
    pieces = len(out)
    if pieces <= budget or (scratch_bytes is None and not is_spilled(empty, out)):
        _fill_rows(layout, entries, out, 0, pieces)
        return out
    buffer = np.empty(min(budget, pieces), out.dtype)
    for lo in range(0, pieces, budget):
        hi = min(pieces, lo + budget)
        _fill_rows(layout, entries, buffer[: hi - lo], lo, hi)
        out[lo:hi] = buffer[: hi - lo]
    return out


def _fill_rows(
    layout: PackLayout,
    entries: Callable[[int, int], np.ndarray],
    out: np.ndarray,
    first: int,
    stop: int,
) -> None:
    """Writes ``out[r - first]`` for the piece rows ``first <= r < stop``.

    Blocks of ``_BLOCK`` documents go in waves of :func:`fill_threads` blocks (threads:
    numpy's sorts, gathers and scatters release the GIL): each block's pieces are sorted
    by key at once, each block's first free place per key and first capacity-sized row
    follow from the blocks before it (running sums), and the blocks write their disjoint
    rows at once. One thread when only some rows are written (a spilled ``out``)."""
    capacity = layout.capacity
    key_starts = np.zeros(capacity, dtype=np.int64)  # the first place of each key
    np.cumsum(layout.per_key[:-2], out=key_starts[1:-1])
    placed = np.zeros(capacity, dtype=np.int64)  # places of each key taken so far
    full_at = 0  # capacity-sized piece rows taken so far
    documents_count = len(layout.lengths)
    threads = fill_threads() if (first, stop) == (0, layout.num_pieces) else 1
    starts = range(0, documents_count, _BLOCK)
    with contextlib.ExitStack() as stack:
        pool = stack.enter_context(ThreadPoolExecutor(threads)) if threads > 1 else None
        run = map if pool is None else pool.map
        for wave in range(0, len(starts), threads):
            blocks = [np.asarray(entries(lo, min(documents_count, lo + _BLOCK)))
                      for lo in starts[wave : wave + threads]]
            jobs = []
            for kept, counts, cut, pieces in run(lambda block: _block_sort(layout, block),
                                                 blocks):
                jobs.append((kept, counts, cut, pieces, key_starts + placed, full_at))
                placed += counts
                full_at += int(pieces.sum())
            list(run(lambda job: _block_write(layout, out, first, stop, *job), jobs))


def fill_threads() -> int:
    """Threads for filling piece rows: the usable cores, at most 4."""
    return usable_threads()


def _block_sort(layout: PackLayout, documents: np.ndarray):
    """``(kept, counts, cut, pieces)`` of a block of ``documents``: the documents with a
    remainder piece in key order (stable), pieces per key (the last slot, "no remainder",
    0), the documents cut into capacity-sized pieces and how many each."""
    capacity, flagged = layout.capacity, layout.keys
    if flagged is not None:  # 2 bytes a document gathered, not its length
        key = flagged[documents]
        long = np.flatnonzero(key >= _LONG_FLAG)
        if long.size:
            key[long] &= _LONG_FLAG - 1
        cut = documents[long]
        counts = np.bincount(key, minlength=capacity)
        by_key = np.argsort(key, kind="stable")  # 16-bit keys: a radix sort
        real = len(key) - int(counts[-1])  # key capacity - 1: no remainder piece, last
        counts[-1] = 0
        return documents[by_key[:real]], counts, cut, layout.lengths[cut] // capacity
    sizes = layout.lengths[documents]
    remainder = np.remainder(sizes, capacity)
    long = np.flatnonzero(sizes >= capacity)
    has = np.flatnonzero(remainder)
    key = _sort_keys(remainder[has], capacity)
    by_key = np.argsort(key, kind="stable")  # 16-bit keys: a radix sort
    counts = np.bincount(key, minlength=capacity)
    return documents[has[by_key]], counts, documents[long], sizes[long] // capacity


def _block_write(layout, out, first, stop, kept, counts, cut, pieces, bases, full_at) -> None:
    """Writes a block's pieces (from :func:`_block_sort`): capacity-sized ones from row
    ``full_at``; each remainder piece at its key's base (``bases``: the key's first free
    place) plus its rank among the block's equal keys (the keys sorted: one repeat)."""
    if full_at < layout.full_count:
        _full_rows(cut, pieces, out, first, stop, full_at)
    place = np.arange(len(kept), dtype=np.int64)
    place += np.repeat(bases - (np.cumsum(counts) - counts), counts)
    rows = layout.row[place]
    if (first, stop) != (0, layout.num_pieces):
        inside = (rows >= first) & (rows < stop)
        rows, kept = rows[inside] - first, kept[inside]
    out[rows] = kept


def _full_rows(cut, counts, out, first, stop, full_at) -> int:
    """Writes the capacity-sized pieces (``counts`` of each document of ``cut``) at rows
    ``full_at ..`` (those inside ``[first, stop)``); returns the next such row."""
    taken = int(counts.sum())
    if full_at < stop and full_at + taken > first:
        rows = np.repeat(cut, counts)
        low, high = max(first, full_at), min(stop, full_at + taken)
        out[low - first : high - first] = rows[low - full_at : high - full_at]
    return full_at + taken


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


def _piece_offsets(layout: PackLayout, documents: np.ndarray) -> np.ndarray:
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
) -> _PackedBins:
    """Best-fit-decreasing packing of documents into bins of ``capacity`` tokens.

    Args:
        lengths: int [D] document lengths, >= 0 (zero-length documents are skipped).
        capacity: tokens per bin (``sequence_length + add_extra_token``), >= 1.
        order: int [D] a permutation of ``[0, D)``: pieces of equal length are placed in
            this order (None: ``arange(D)``).

    Returns:
        :class:`_PackedBins`; bins are numbered in opening order (first the bins of
        capacity-sized pieces, in ``order``, then as BFD opens them).
    """
    layout = pack_layout(lengths, capacity)
    count = len(layout.lengths)
    order = np.arange(count, dtype=np.int64) if order is None else check_order(order, count)
    document = fill_documents(layout, order)
    offset = _piece_offsets(layout, document)
    return _PackedBins(document, offset, layout.piece_lengths(), layout.bin_offsets)


#: ``emit(bins, pieces, bases)``: each bin of ``bins`` takes ``pieces`` more pieces after
#: the ``bases`` it holds (placement order: the bins in turn, each's pieces together).
_Emit = Callable[[np.ndarray, int, np.ndarray], None]


def _place(
    per_size: np.ndarray, capacity: int, emit: _Emit | None = None
) -> tuple[np.ndarray, int]:
    """BFD with FIFO ties of ``per_size[k]`` pieces of size ``capacity - 1 - k`` (largest
    first; every size in ``[1, capacity)``) into bins numbered from 0.

    Returns:
        ``(filled, opened)``: pieces per bin in ``filled[:opened]`` (uint16 where the
        capacity allows), ``opened`` bins.
    """
    pieces_total = int(per_size.sum())
    count = np.zeros(capacity, dtype=np.int64)  # open bins per remaining capacity
    queues: list[list[np.ndarray]] = [[] for _ in range(capacity)]
    # pieces per bin so far (<= capacity); there are at most as many bins as pieces, and
    # zeroed pages of bins never opened are never touched
    filled = np.zeros(pieces_total, dtype=np.uint16 if capacity < 1 << 16 else np.int64)
    bin_dtype = np.uint32 if pieces_total < 1 << 32 else np.int64
    next_bin = 0

    def take(bins: np.ndarray, pieces: int, target: int) -> None:
        if emit is not None:
            emit(bins, pieces, filled[bins])
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
            left_open = held[used:]  # a copy once most is used: a view keeps it all alive
            queues[c] = [left_open.copy() if used > len(left_open) else left_open]
            count[c] -= used
            left = 0
            break
        if left:  # new bins, ``capacity // size`` pieces each, the last maybe fewer
            each = capacity // size
            filled_bins, rest = divmod(left, each)
            new = np.arange(next_bin, next_bin + filled_bins + (rest > 0), dtype=bin_dtype)
            next_bin += len(new)
            if filled_bins:
                take(new[:filled_bins], each, capacity - each * size)
            if rest:
                take(new[filled_bins:], rest, capacity - rest * size)
    return filled, next_bin
