"""Reading the tokens of a batch of GPT samples in one vectorized pass.

The pieces of a batch's samples (:mod:`.pieces`: their documents, offsets and lengths)
are copied by :func:`gather_tokens` into a [B, width] array:

* from a memory-mapped .bin: straight from a flat token view of the whole file by
  :func:`spill_copy`: every piece as whole 256-token rows of a sliding-window view, in
  one fancy-indexed read and one write whose rows are in output order, so a piece's
  last row may spill into the pieces after it (they overwrite it) or into slack at the
  end of the buffer; no per-piece Python work. A batch with a piece whose last block
  would pass the end of the .bin, and a padded batch, goes through :func:`copy_ranges`
  instead (rows per block size, the last row of a piece aligned to its end: no spill).
  At a batch's size the number of numpy calls costs more than the copy, so both
  copies keep them few (docs/benchmarks.md, "Figures behind design choices");
* otherwise (pread / remote byte sources): the piece byte ranges are sorted and merged
  where they touch or overlap (consecutive samples share a token; samples of one long
  document are adjacent), each merged range is read once, and the same vectorized
  gather runs on the concatenated reads. All merged ranges go to the reader in one
  ``read_ranges`` call, so a remote source can issue them together;
* a .bin whose pointers are not multiples of the token size (no writer makes one) is
  read one piece at a time.

Checking the sample positions a batch asks for.

Where a dataset's index arrays came from, for errors met while reading a batch.

A value out of range met while reading (the range checks of :mod:`megadata_core.checks`)
is a DataError naming the array and its source: its cache file, the entry that held it
(a build bundle), or memory. The cache checks every byte on load, so such errors mean
indices that were wrong when written (or handed in through ``arrays=``), not damage on
disk.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from megadata_core.checks import position_in
from megadata_core.errors import DataError
from megadata_core.modes import Pieces, counting


def flat_tokens(indexed) -> np.ndarray | None:
    """A flat view of every token of a memory-mapped .bin, or None (not memory-mapped)."""
    return indexed.token_view()


def _merged_reads(
    indexed, token_start: np.ndarray, length: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Read the pieces' token ranges with one read per merged range.

    Returns ``(staging, offsets)``: the concatenated reads (corpus dtype) and int64 [P]
    the offset of each piece's first token in ``staging``.
    """
    offsets = np.zeros(len(length), dtype=np.int64)
    live = np.flatnonzero(length > 0)
    if live.size == 0:
        return np.empty(0, dtype=indexed.dtype), offsets
    starts, stops = token_start[live], token_start[live] + length[live]
    order = np.argsort(starts, kind="stable")
    starts, stops = starts[order], stops[order]
    reach = np.maximum.accumulate(stops)
    opens = np.ones(len(starts), dtype=bool)
    opens[1:] = starts[1:] > reach[:-1]
    range_start = starts[opens]
    range_stop = np.maximum.reduceat(stops, np.flatnonzero(opens))
    sizes = range_stop - range_start
    staged_at = np.cumsum(sizes) - sizes
    group = np.cumsum(opens) - 1
    offsets[live[order]] = staged_at[group] + (starts - range_start[group])
    itemsize = indexed.dtype.itemsize
    read_ranges = getattr(indexed, "read_ranges", None)
    if read_ranges is not None:  # all ranges in one call: remote sources issue them together
        return read_ranges(range_start * itemsize, sizes), offsets
    reads = [
        indexed.read_bytes(int(begin) * itemsize, int(size))
        for begin, size in zip(range_start.tolist(), sizes.tolist())
    ]
    return np.concatenate(reads), offsets


def _piece_reads(indexed, byte_start: np.ndarray, length: np.ndarray):
    """One read per piece (for .bin files whose pointers are not token-aligned)."""
    reads = [
        indexed.read_bytes(int(begin), int(size))
        for begin, size in zip(byte_start.tolist(), length.tolist())
    ]
    offsets = np.cumsum(length) - length
    staging = np.concatenate(reads) if reads else np.empty(0, dtype=indexed.dtype)
    return staging, offsets


#: Block sizes (tokens) of the vectorized copy, smallest first, starting at 1 (a fixed
#: list: the copy loops over these levels, never over pieces). A piece is copied in
#: blocks of the largest size that fits it.
_BLOCK_SIZES = (1, 32, 256)
_WIDTHS = np.array(_BLOCK_SIZES, dtype=np.int64)
_VOIDS: dict[int, np.dtype] = {}  # itemsize -> opaque dtype of that many bytes


def _blocks(array: np.ndarray, width: int, raw: bool) -> np.ndarray:
    """Sliding windows of ``width`` items of a contiguous 1-D ``array``: element (or row)
    r is ``array[r : r + width]``. ``raw``: a 1-D view whose elements are the windows'
    bytes (one opaque item per window: fancy indexing then copies whole windows with
    one memmove each); else [len - width + 1, width] of ``array.dtype``."""
    if width == 1 and not raw:
        return array
    step = array.itemsize
    count = max(len(array) - width + 1, 0)
    if raw:
        size = width * step
        dtype = _VOIDS.get(size)
        if dtype is None:
            dtype = _VOIDS[size] = np.dtype((np.void, size))
        return np.ndarray((count,), dtype, array, 0, (step,))
    return np.ndarray((count, width), array.dtype, array, 0, (step, step))


def copy_ranges(
    source: np.ndarray,
    source_start: np.ndarray,
    out: np.ndarray,
    out_start: np.ndarray,
    length: np.ndarray,
) -> None:
    """``out[o:o + n] = source[s:s + n]`` for every (s, o, n), vectorized.

    A range of n tokens is copied in blocks of K tokens, K the largest of
    :data:`_BLOCK_SIZES` not above n: ``ceil(n / K)`` rows of a K-wide sliding-window view,
    the last row aligned to the range's end (rows overlap inside the range, never outside
    it), with one fancy-indexed assignment per K. When ``out`` has the dtype of
    ``source``, the windows are viewed as opaque K-token items (one memmove per block,
    no per-token cast); otherwise values are cast as they are copied. Ranges must not
    overlap in ``out``.

    Args:
        source: contiguous 1-D array to read.
        source_start, out_start, length: int64 [P].
        out: contiguous 1-D array to write (its dtype may differ: values are cast).
    """
    count = len(length)
    if count == 0:
        return
    raw = out.dtype == source.dtype
    level = _WIDTHS[1:].searchsorted(length, side="right").astype(np.int8)  # largest K <= n
    width = _WIDTHS[level]
    rows = length + width
    rows -= 1
    rows //= width  # ceil(n / K); 0 for an empty range
    bounds = np.bincount(level, rows, len(_BLOCK_SIZES)).cumsum().tolist()  # rows per K
    order = level.argsort(kind="stable")  # the rows of one K together
    rows = rows[order]
    first_row = np.zeros(count + 1, dtype=np.int64)
    np.add.accumulate(rows, out=first_row[1:])
    total = int(first_row[-1])
    piece = order.repeat(rows)
    step = first_row[:-1].repeat(rows)
    np.subtract(counting(total), step, out=step)  # row within its piece
    width = width[piece]
    step *= width
    np.minimum(step, (length - _WIDTHS[level])[piece], out=step)  # last row ends at the end
    out_rows = out_start[piece]
    out_rows += step
    source_rows = source_start[piece]
    source_rows += step
    begin = 0
    for size, end in zip(_BLOCK_SIZES, bounds):
        end = int(end)
        if end > begin:
            _blocks(out, size, raw)[out_rows[begin:end]] = _blocks(source, size, raw)[
                source_rows[begin:end]
            ]
        begin = end


#: Block size (tokens) of :func:`spill_copy`; the arrays it writes need SPILL - 1 items of
#: slack after the last range. 256 measured fastest of 64 .. 512 (32 x 4097 tokens).
SPILL = 256
_in_order: list[bool] = []  # [whether _assign_blocks writes its rows in index order]


def _assign_blocks(
    source: np.ndarray, source_rows: np.ndarray, out: np.ndarray, out_rows: np.ndarray
) -> None:
    """``out[o:o + K] = source[s:s + K]`` for every (s, o) of the two int64 [R] row
    arrays, in one fancy-indexed read and one fancy-indexed write (K = :data:`SPILL`).
    The read takes each block as one opaque item (one memmove); the write casts when
    ``out`` has another dtype."""
    blocks = _blocks(source, SPILL, True)[source_rows]
    raw = out.dtype == source.dtype
    if not raw:
        blocks = blocks.view(source.dtype).reshape(len(source_rows), SPILL)
    _blocks(out, SPILL, raw)[out_rows] = blocks


def _writes_in_order() -> bool:
    """Whether :func:`_assign_blocks` writes overlapping rows in index order, later rows
    over earlier ones: numpy's fancy-indexed assignment walks a 1-D index array from first
    to last, which :func:`spill_copy` relies on, so it is checked once here (against
    slice copies, for both the same-dtype and the casting write)."""
    if not _in_order:
        rng = np.random.default_rng(0)
        source = rng.integers(0, 60000, 8 * SPILL).astype(np.uint16)
        out_rows = np.arange(0, 64 * (SPILL - 3), SPILL - 3, dtype=np.int64)  # overlapping
        source_rows = rng.integers(0, len(source) - SPILL, len(out_rows))
        expected = np.zeros(int(out_rows[-1]) + SPILL, dtype=np.int64)
        for at, start in zip(out_rows.tolist(), source_rows.tolist()):
            expected[at : at + SPILL] = source[start : start + SPILL]
        good = True
        for dtype in (source.dtype, np.dtype(np.int32)):
            out = np.zeros(len(expected), dtype=dtype)
            _assign_blocks(source, source_rows, out, out_rows)
            good = good and bool((out == expected).all())
        _in_order.append(good)
    return _in_order[0]


def spill_copy(
    source: np.ndarray,
    source_start: np.ndarray,
    out: np.ndarray,
    out_start: np.ndarray,
    length: np.ndarray,
) -> bool:
    """:func:`copy_ranges` for ranges in increasing ``out`` order, with fewer, whole blocks.

    Range i is copied as ``ceil(n / SPILL)`` blocks of :data:`SPILL` tokens from its start,
    all ranges in one :func:`_assign_blocks` whose rows are in range order: a range's last
    block spills past its end into the ranges after it, which are written later and
    overwrite the spill, or into the slack after the last range. No levels, no clamping:
    about half the numpy calls of :func:`copy_ranges`, fewer rows, one write.

    Args:
        source: contiguous 1-D array to read.
        source_start, out_start, length: int64 [P], with
            ``out_start[i] + length[i] <= out_start[i + 1]``.
        out: contiguous 1-D array, at least ``SPILL - 1`` items longer than the last
            range's end (its dtype may differ: values are cast). Items between ranges
            and in the slack end up arbitrary.

    Returns:
        False, having copied nothing, where a block would read past the end of
        ``source`` (a piece near the end of the .bin) or the write order is not
        guaranteed: use :func:`copy_ranges` then.
    """
    if len(source) < SPILL or not _writes_in_order():
        return False
    rows = length + (SPILL - 1)
    rows //= SPILL  # ceil(n / SPILL); 0 for an empty range
    base = np.add.accumulate(rows)
    total = int(base[-1]) if len(base) else 0
    base -= rows
    base *= SPILL  # SPILL x the position of each range's first block among all blocks
    steps = counting(total, SPILL)
    source_rows = (source_start - base).repeat(rows)
    source_rows += steps
    if total and int(source_rows.max()) > len(source) - SPILL:
        return False
    out_rows = (out_start - base).repeat(rows)
    out_rows += steps
    _assign_blocks(source, source_rows, out, out_rows)
    return True


def gather_tokens(
    indexed,
    pieces: Pieces,
    width: int,
    pad_id: int,
    dtype: np.dtype,
    flat: np.ndarray | None = None,
    empty=np.empty,
) -> tuple[np.ndarray, bool]:
    """The tokens of every sample, padded with ``pad_id`` to ``width``.

    Args:
        indexed: the IndexedDataset (``sequence_pointers``, ``dtype``, ``read_bytes``).
        pieces: from :func:`locate_pieces`.
        width: tokens per sample (S + extra).
        pad_id: fills the tail of short (partial) samples.
        dtype: dtype of the result (int32 or int64).
        flat: :func:`flat_tokens` of ``indexed`` when memory-mapped.
        empty: ``empty(shape, dtype)`` allocator of the result and of scratch arrays
            (e.g. a BufferPool's).

    Returns:
        ``(text, padded)``: ``dtype`` [B, width] tokens, and whether any sample was
        padded.
    """
    batch = len(pieces.first)
    if batch == 0:
        return np.empty((0, width), dtype=dtype), False
    itemsize = indexed.dtype.itemsize
    pointer = indexed.sequence_pointers[pieces.document]
    length = pieces.length
    # IndexedDataset validates at open that pointers are whole tokens apart.
    aligned = getattr(indexed, "pointers_aligned", False) or itemsize == 1
    if aligned or not (pointer % itemsize).any():
        source_start = pointer // itemsize
        if pieces.starts is not None:
            source_start += pieces.starts
        else:
            source_start[pieces.first] += pieces.offset
        if flat is not None:
            source = flat
        else:
            source, source_start = _merged_reads(indexed, source_start, length)
    else:
        source, source_start = _piece_reads(indexed, pointer + pieces.start * itemsize, length)
    slot = length if pieces.slot is None else pieces.slot  # tokens a piece takes
    placed = np.add.accumulate(slot)
    total = int(placed[-1])
    placed -= slot  # where each piece starts in the dense stream of all samples
    padded = total < batch * width or slot is not length
    if padded:  # short samples: each piece goes to its sample's row, the rest is pad_id
        per_sample = np.add.reduceat(slot, pieces.first)
        if int(per_sample.max()) > width:
            raise DataError(f"sample_index: a sample spans {int(per_sample.max())} > {width}")
        text = empty((batch, width), dtype)
        text.fill(pad_id)
        pieces_per_sample = np.diff(pieces.first, append=len(length))
        placed += np.repeat(np.arange(batch) * width - placed[pieces.first], pieces_per_sample)
    elif total > batch * width:
        raise DataError(f"sample_index: {batch} samples span {total} > {batch * width} tokens")
    elif flat is not None:  # whole blocks may spill into the next pieces and the slack
        buffer = empty((batch * width + SPILL - 1,), dtype)
        text = buffer[: batch * width].reshape(batch, width)
        if spill_copy(source, source_start, buffer, placed, length):
            return text, padded
    else:
        text = empty((batch, width), dtype)
        if source.dtype != text.dtype:  # copy whole blocks, then cast in one pass
            staging = empty((batch * width,), source.dtype)
            copy_ranges(source, source_start, staging, placed, length)
            np.copyto(text.reshape(-1), staging)
            return text, padded
    copy_ranges(source, source_start, text.reshape(-1), placed, length)
    return text, padded


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


_IN_MEMORY = "indices built in memory"


def origin(arrays: Mapping[str, object], name: str, entry: str | None) -> str:
    """Where index array ``name`` came from: its memory-mapped cache file, else
    ``entry`` (e.g. the build bundle that held it), else memory."""
    filename = getattr(arrays.get(name), "filename", None)
    if filename:
        return f"cache file {filename}"
    return entry or _IN_MEMORY


def with_origin(error: DataError, arrays: Mapping[str, object], entry: str | None) -> DataError:
    """``error`` with the source of the index array its message starts with (unchanged
    when it names no index array)."""
    name = str(error).split(":", 1)[0]
    if name not in arrays:
        return error
    return DataError(f"{error} (in {origin(arrays, name, entry)})")
