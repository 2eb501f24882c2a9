"""Reading the tokens of a batch of GPT samples in one vectorized pass.

A sample is a run of *pieces*: its first document from an offset, whole documents, and
its last document up to an offset (Megatron's ``_query_document_sample_shuffle_indices``).
:func:`locate_pieces` finds every piece of every sample of a batch at once from the
sample index rows; :func:`gather_tokens` copies them into a [B, width] array:

* from a memory-mapped .bin: straight from a flat token view of the whole file by
  :func:`copy_ranges` (fancy-indexed rows of sliding-window views, one assignment per
  block size; no per-piece Python work). Measured against the alternatives on 32 x 4097
  tokens: a per-token fancy gather is ~2.5x slower, a Python loop of slice copies ~20%
  faster (but a loop over pieces);
* otherwise (pread / remote byte sources): the piece byte ranges are sorted and merged
  where they touch or overlap (consecutive samples share a token; samples of one long
  document are adjacent), each merged range is read once, and the same vectorized
  gather runs on the concatenated reads. All merged ranges go to the reader in one
  ``read_ranges`` call, so a remote source can issue them together;
* a .bin whose pointers are not multiples of the token size (no writer makes one) is
  read one piece at a time.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from megadata_core.errors import DataError

_BEGIN_END = np.array([0, 1], dtype=np.int64)


@dataclass(frozen=True)
class Pieces:
    """The pieces of a batch of B samples, P pieces in all (every sample has >= 1).

    Attributes:
        document: int64 [P] sequence id of each piece.
        start: int64 [P] first token of the piece within its document.
        length: int64 [P] tokens in the piece (>= 0).
        first: int64 [B] index of each sample's first piece.
    """

    document: np.ndarray
    start: np.ndarray
    length: np.ndarray
    first: np.ndarray


def locate_pieces(
    sample_index: np.ndarray,
    document_index: np.ndarray,
    sequence_lengths: np.ndarray,
    rows: np.ndarray,
    extra: int,
) -> Pieces:
    """Every piece of the samples at ``rows`` of the sample index.

    Sample r runs from ``sample_index[r]`` = (position b, offset o) to
    ``sample_index[r + 1]`` = (position e, offset f): document ``document_index[b]`` from
    o, whole documents at positions b+1 .. e-1, and document ``document_index[e]`` up to
    f + extra (exclusive); when b == e, tokens o .. f + extra of that one document.

    Args:
        sample_index: int [n + 1, 2].
        document_index: int [m].
        sequence_lengths: int [N].
        rows: int64 [B] sample positions (already shuffled), each in ``[0, n)``.
        extra: 1 with ``add_extra_token_to_sequence``, else 0.
    """
    bounds = sample_index[rows[:, None] + _BEGIN_END].astype(np.int64)  # [B, 2, 2]
    counts = bounds[:, 1, 0] - bounds[:, 0, 0] + 1
    if counts.size and int(counts.min()) < 1:
        raise DataError("sample_index: rows are not increasing (corrupt index)")
    last = np.cumsum(counts)
    first = last - counts
    last -= 1
    total = int(last[-1]) + 1 if counts.size else 0
    position = np.repeat(bounds[:, 0, 0] - first, counts)
    position += np.arange(total, dtype=np.int64)
    document = document_index[position].astype(np.int64)
    stop = sequence_lengths[document].astype(np.int64)
    stop[last] = bounds[:, 1, 1] + extra
    start = np.zeros(total, dtype=np.int64)
    start[first] = bounds[:, 0, 1]
    stop -= start
    np.maximum(stop, 0, out=stop)
    return Pieces(document, start, stop, first)


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


#: Block sizes of the vectorized copy, largest first (a fixed list: the copy loops over
#: these levels, never over pieces). Pieces shorter than the last go token by token.
BLOCK_SIZES = (256, 32)


def _window(array: np.ndarray, width: int) -> np.ndarray:
    """[len - width + 1, width] sliding-window view: row r is ``array[r : r + width]``."""
    step = array.itemsize
    return np.ndarray((len(array) - width + 1, width), array.dtype, array, 0, (step, step))


def copy_ranges(
    source: np.ndarray,
    source_start: np.ndarray,
    out: np.ndarray,
    out_start: np.ndarray,
    length: np.ndarray,
) -> None:
    """``out[o:o + n] = source[s:s + n]`` for every (s, o, n), vectorized.

    A range of at least K tokens (K from :data:`BLOCK_SIZES`) is copied as
    ``ceil(n / K)`` rows of a K-wide sliding-window view, the last row aligned to its end
    (rows overlap inside the range, never outside it), with one fancy-indexed assignment
    per K; shorter ranges are copied token by token with one more. Ranges must not
    overlap in ``out``.

    Args:
        source: 1-D array to read.
        source_start, out_start, length: int64 [P].
        out: 1-D array to write (its dtype may differ: values are cast).
    """
    todo = length > 0
    for width in BLOCK_SIZES:
        chosen = np.flatnonzero(todo & (length >= width))
        if chosen.size == 0 or len(out) < width or len(source) < width:
            continue
        todo[chosen] = False
        size = length[chosen]
        rows = -(-size // width)
        piece = np.repeat(np.arange(chosen.size, dtype=np.int64), rows)
        step = np.arange(piece.size, dtype=np.int64)
        step -= (np.cumsum(rows) - rows)[piece]
        step *= width
        np.minimum(step, (size - width)[piece], out=step)
        chosen = chosen[piece]
        _window(out, width)[out_start[chosen] + step] = _window(source, width)[
            source_start[chosen] + step
        ]
    rest = np.flatnonzero(todo)
    if rest.size:
        size = length[rest]
        shift = np.repeat(source_start[rest] - out_start[rest], size)
        where = np.repeat(out_start[rest] - (np.cumsum(size) - size), size)
        where += np.arange(len(where), dtype=np.int64)
        out[where] = source[where + shift]


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
        dtype: dtype of the result (int32 or int64; values are cast while copied).
        flat: :func:`flat_tokens` of ``indexed`` when memory-mapped.
        empty: ``empty(shape, dtype)`` allocator of the result (e.g. a BufferPool's).

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
        source_start += pieces.start
        if flat is not None:
            source = flat
        else:
            source, source_start = _merged_reads(indexed, source_start, length)
    else:
        source, source_start = _piece_reads(indexed, pointer + pieces.start * itemsize, length)
    placed = np.cumsum(length)
    total = int(placed[-1])
    placed -= length  # where each piece starts in the dense stream of all samples
    padded = total < batch * width
    if padded:  # short samples: each piece goes to its sample's row, the rest is pad_id
        per_sample = np.add.reduceat(length, pieces.first)
        if int(per_sample.max()) > width:
            raise DataError(f"sample_index: a sample spans {int(per_sample.max())} > {width}")
        text = empty((batch, width), dtype)
        text.fill(pad_id)
        pieces_per_sample = np.diff(pieces.first, append=len(length))
        placed += np.repeat(np.arange(batch) * width - placed[pieces.first], pieces_per_sample)
    elif total > batch * width:
        raise DataError(f"sample_index: {batch} samples span {total} > {batch * width} tokens")
    else:
        text = empty((batch, width), dtype)
    copy_ranges(source, source_start, text.reshape(-1), placed, length)
    return text, padded
