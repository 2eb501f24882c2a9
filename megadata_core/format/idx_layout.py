"""The .idx layout (MMIDIDX version 1), its token dtype codes, and its validation.

Layout, little-endian, no padding::

    b"MMIDIDX\\x00\\x00"  u64 version=1  u8 dtype code  u64 N  u64 D
    int32[N] sequence lengths
    int64[N] sequence byte pointers into the .bin
    int64[D] document boundaries (sequence indices, starting at 0, ending at N)
    int8[N]  sequence modes (multimodal only; the flag is not stored)
"""

from __future__ import annotations

import mmap
import struct
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from megadata_core.cores import usable_threads
from megadata_core.errors import DataError

MAGIC = b"MMIDIDX\x00\x00"
VERSION = 1
HEADER_SIZE = 34
_HEADER = struct.Struct("<9sQBQQ")

DTYPE_BY_CODE: dict[int, np.dtype] = {
    1: np.dtype(np.uint8),
    2: np.dtype(np.int8),
    3: np.dtype(np.int16),
    4: np.dtype(np.int32),
    5: np.dtype(np.int64),
    6: np.dtype(np.float64),
    7: np.dtype(np.float32),
    8: np.dtype(np.uint16),
}
_CODE_BY_DTYPE: dict[np.dtype, int] = {dtype: code for code, dtype in DTYPE_BY_CODE.items()}


def code_of(dtype: np.typing.DTypeLike, *, field: str = "dtype") -> int:
    """The MMIDIDX code of a numpy dtype; DataError if the format cannot store it."""
    try:
        normalized = np.dtype(dtype)
    except TypeError as error:
        raise DataError(f"{field}: {dtype!r} is not a numpy dtype") from error
    normalized = normalized.newbyteorder("=")
    if normalized not in _CODE_BY_DTYPE:
        names = ", ".join(str(d) for d in _CODE_BY_DTYPE)
        raise DataError(f"{field}: {normalized} cannot be stored in a .bin (one of: {names})")
    return _CODE_BY_DTYPE[normalized]


def dtype_of(code: int, *, path: str = "<idx>") -> np.dtype:
    """The numpy dtype for an MMIDIDX code; DataError naming the file if unknown."""
    if code not in DTYPE_BY_CODE:
        raise DataError(f"{path}: unknown dtype code {code} in header (known: 1..8)")
    return DTYPE_BY_CODE[code]


def optimal_dtype(vocab_size: int | None) -> type[np.number]:
    """Smallest token dtype for a vocabulary, as Megatron chooses it.

    uint16 when the vocabulary has fewer than 65500 entries, int32 otherwise
    (or when the size is unknown).
    """
    if vocab_size is not None and vocab_size < 65500:
        return np.uint16
    return np.int32


# Arrays are validated in chunks so that opening needs O(1) extra memory. The fast pass
# (every check, a yes/no answer; ~1 MiB per array per chunk, a few threads) reads each
# .idx byte once and is bound by memory bandwidth; only when it says no does the
# reference pass (VALIDATION_CHUNK, the original algorithm) run, to name the first error.
VALIDATION_CHUNK = 1 << 20
FAST_CHUNK = 1 << 17


@dataclass(frozen=True)
class IdxHeader:
    """What the 34-byte header says, plus the layout it implies."""

    dtype: np.dtype
    sequence_count: int
    document_count: int  # entries in the boundaries array (documents + 1)
    multimodal: bool

    @property
    def lengths_offset(self) -> int:
        return HEADER_SIZE

    @property
    def pointers_offset(self) -> int:
        return HEADER_SIZE + 4 * self.sequence_count

    @property
    def documents_offset(self) -> int:
        return HEADER_SIZE + 12 * self.sequence_count

    @property
    def modes_offset(self) -> int:
        return HEADER_SIZE + 12 * self.sequence_count + 8 * self.document_count


def pack_header(dtype_code: int, sequence_count: int, document_count: int) -> bytes:
    """The 34 header bytes."""
    return _HEADER.pack(MAGIC, VERSION, dtype_code, sequence_count, document_count)


def expected_idx_size(sequence_count: int, document_count: int, multimodal: bool) -> int:
    """Bytes of a well-formed .idx with these counts."""
    return (
        HEADER_SIZE
        + 12 * sequence_count
        + 8 * document_count
        + (sequence_count if multimodal else 0)
    )


def parse_header(header: bytes, file_size: int, path: str, multimodal: bool | None) -> IdxHeader:
    """Check the header bytes against the file size; infer the multimodal flag if None."""
    if file_size == 0:
        raise DataError(f"{path}: empty file, not a MMIDIDX index")
    if len(header) < 9 or header[:9] != MAGIC:
        raise DataError(f"{path}: bad magic {bytes(header[:9])!r}, expected {MAGIC!r}")
    if len(header) < HEADER_SIZE:
        raise DataError(
            f"{path}: truncated header, {len(header)} bytes where {HEADER_SIZE} are needed"
        )
    _, version, code, sequence_count, document_count = _HEADER.unpack(header[:HEADER_SIZE])
    if version != VERSION:
        raise DataError(f"{path}: unknown version {version} in header (only {VERSION} is known)")
    dtype = dtype_of(code, path=path)
    if document_count < 1:
        raise DataError(
            f"{path}: document count field is {document_count}; it must be at least 1 "
            "(the boundaries array starts with 0)"
        )
    plain = expected_idx_size(sequence_count, document_count, False)
    with_modes = expected_idx_size(sequence_count, document_count, True)
    if multimodal is None:
        if file_size == plain:
            multimodal = False
        elif file_size == with_modes:
            multimodal = True
    if multimodal is None or file_size != (with_modes if multimodal else plain):
        wanted = with_modes if multimodal else plain
        counts = f"sequence count {sequence_count} and document count {document_count}"
        if file_size < plain:
            raise DataError(
                f"{path}: truncated arrays: {counts} need {wanted if multimodal else plain} "
                f"bytes, the file has {file_size}"
            )
        if multimodal is None:
            raise DataError(
                f"{path}: {file_size} bytes fit no layout for {counts} "
                f"({plain} plain or {with_modes} multimodal): trailing bytes or wrong counts"
            )
        raise DataError(
            f"{path}: {file_size} bytes, but {counts} with multimodal={multimodal} "
            f"need exactly {wanted}"
        )
    return IdxHeader(dtype, sequence_count, document_count, multimodal)


def validate_arrays(
    lengths: np.ndarray,
    pointers: np.ndarray,
    document_indices: np.ndarray,
    itemsize: int,
    bin_size: int,
    idx_path: str,
    bin_path: str,
) -> None:
    """Vectorized checks of the three index arrays against each other and the .bin size.

    lengths: int32[N]; pointers: int64[N]; document_indices: int64[D].

    Two passes with the same checks: :func:`_arrays_are_valid` answers yes/no quickly
    (small chunks, on a few threads, no cumulative sum); only on a no does
    :func:`_raise_first_error` walk the arrays again to name the first error.
    """
    count = len(lengths)
    if document_indices[0] != 0:
        raise DataError(
            f"{idx_path}: document_indices must start at 0, found {int(document_indices[0])}"
        )
    if document_indices[-1] != count:
        raise DataError(
            f"{idx_path}: document_indices must end at the sequence count {count}, "
            f"found {int(document_indices[-1])}"
        )
    if not _arrays_are_valid(lengths, pointers, document_indices, itemsize, bin_size):
        _raise_first_error(
            lengths, pointers, document_indices, itemsize, bin_size, idx_path, bin_path
        )


_DROP_BYTES = 8 << 20  # pages are dropped 8 MiB at a time: few syscalls, little RSS


class _PageDropper:
    """Drops the pages under the parts of an array that validation has read from this
    process's page tables (``MADV_DONTNEED``), ``_DROP_BYTES`` at a time; a no-op
    unless the array lies in a read-only ``np.memmap``.

    Validation reads every byte of the .idx once; through a file mapping each page read
    would stay resident in this process (RSS, ~20 bytes per sequence) until unmapped.
    Dropped pages stay in the page cache and fault back in (the same bytes) when read
    again. Only read-only shared mappings qualify: there the call cannot lose data.
    """

    def __init__(self, array: np.ndarray) -> None:
        self._mapping = None
        self._pending = None  # [first byte, end byte) read but not yet dropped
        advice = getattr(mmap, "MADV_DONTNEED", None)
        holder: np.ndarray | None = array
        while isinstance(holder, np.ndarray) and not isinstance(holder.base, mmap.mmap):
            holder = holder.base
        if (
            advice is None
            or not isinstance(holder, np.memmap)
            or getattr(holder, "mode", None) != "r"
            or not hasattr(holder.base, "madvise")
            or len(holder.base) == 0
        ):
            return
        self._mapping, self._advice = holder.base, advice
        self._start = np.frombuffer(self._mapping, dtype=np.uint8, count=1).ctypes.data

    def read(self, part: np.ndarray) -> None:
        """``part`` (a contiguous piece, after the previous one) has been read."""
        if self._mapping is None or not part.size:
            return
        offset = part.ctypes.data - self._start
        end = offset + part.nbytes
        if self._pending is None:
            self._pending = [offset, end]
        else:
            self._pending[1] = end
        if self._pending[1] - self._pending[0] >= _DROP_BYTES:
            self.flush()

    def flush(self) -> None:
        if self._mapping is None or self._pending is None:
            return
        offset, end = self._pending
        self._pending = None
        aligned = offset - offset % mmap.PAGESIZE
        try:
            self._mapping.madvise(self._advice, aligned, min(end, len(self._mapping)) - aligned)
        except (OSError, ValueError):  # pragma: no cover - an advisory call only
            pass


def drop_mapped_pages(array: np.ndarray) -> None:
    """Drop the pages under ``array`` from this process's page tables when it lies in a
    read-only ``np.memmap`` (else nothing): after a scattered read, e.g. a sampled digest,
    which on kernels with large page-cache folios maps ~1 MiB per touch. The bytes stay
    in the page cache; reading them again faults them back in."""
    pages = _PageDropper(array)
    pages.read(array)
    pages.flush()


def _boundaries_ok(document_indices: np.ndarray, lo: int, hi: int) -> bool:
    """``document_indices[lo:hi + 1]`` is non-decreasing."""
    bad = np.empty(FAST_CHUNK, dtype=np.bool_)
    pages = _PageDropper(document_indices)
    try:
        for start in range(lo, hi, FAST_CHUNK):
            chunk = document_indices[start : min(start + FAST_CHUNK, hi) + 1]
            steps = len(chunk) - 1
            if np.less(chunk[1:], chunk[:-1], out=bad[:steps]).any():
                return False
            pages.read(chunk)
    finally:
        pages.flush()
    return True


def _sequences_ok(lengths: np.ndarray, pointers: np.ndarray, itemsize: int, lo: int, hi: int):
    """Over ``[lo, hi)``: lengths >= 0 and ``pointers[i + 1] - pointers[i] ==
    lengths[i] * itemsize`` (int64) for every i whose i + 1 is a sequence. With
    ``pointers[0] == 0`` that is the reference pass's ``pointers == exclusive cumsum``."""
    count = len(lengths)
    sizes = np.empty(FAST_CHUNK, dtype=np.int64)
    steps = np.empty(FAST_CHUNK, dtype=np.int64)
    bad = np.empty(FAST_CHUNK, dtype=np.bool_)
    length_pages, pointer_pages = _PageDropper(lengths), _PageDropper(pointers)
    try:
        for start in range(lo, hi, FAST_CHUNK):
            stop = min(start + FAST_CHUNK, hi)
            chunk_lengths = lengths[start:stop]
            if chunk_lengths.min() < 0:
                return False
            chunk_pointers = pointers[start : min(stop + 1, count)]
            pairs = len(chunk_pointers) - 1
            if pairs:
                np.multiply(chunk_lengths[:pairs], itemsize, out=sizes[:pairs], dtype=np.int64)
                np.subtract(chunk_pointers[1:], chunk_pointers[:-1], out=steps[:pairs])
                if np.not_equal(steps[:pairs], sizes[:pairs], out=bad[:pairs]).any():
                    return False
            length_pages.read(chunk_lengths)
            pointer_pages.read(chunk_pointers[: stop - start])
    finally:
        length_pages.flush()
        pointer_pages.flush()
    return True


def _fast_threads(entries: int) -> int:
    return 1 if entries < 16 * FAST_CHUNK else usable_threads()


def _arrays_are_valid(
    lengths: np.ndarray,
    pointers: np.ndarray,
    document_indices: np.ndarray,
    itemsize: int,
    bin_size: int,
) -> bool:
    """Whether every check of :func:`_raise_first_error` passes (first and last
    boundary excluded: the caller checks them). Chunks are independent (no running
    sum), so the ranges run on threads (numpy releases the GIL)."""
    count, bounds = len(lengths), len(document_indices)
    if count:
        if int(pointers[0]) != 0:
            return False
        end = int(pointers[-1]) + int(lengths[-1]) * itemsize
        if int(lengths[-1]) < 0 or end > bin_size:
            return False
    if count <= FAST_CHUNK and bounds <= FAST_CHUNK:  # one chunk: whole-array operations
        return _small_arrays_are_valid(lengths, pointers, document_indices, itemsize)
    threads = _fast_threads(count + bounds)
    tasks = []
    for part in range(threads):
        lo, hi = count * part // threads, count * (part + 1) // threads
        tasks.append(lambda lo=lo, hi=hi: _sequences_ok(lengths, pointers, itemsize, lo, hi))
        lo, hi = (bounds - 1) * part // threads, (bounds - 1) * (part + 1) // threads
        tasks.append(lambda lo=lo, hi=hi: _boundaries_ok(document_indices, lo, hi))
    if threads == 1:
        return all(task() for task in tasks)
    with ThreadPoolExecutor(threads) as pool:
        return all(pool.map(lambda task: task(), tasks))


def _small_arrays_are_valid(
    lengths: np.ndarray, pointers: np.ndarray, document_indices: np.ndarray, itemsize: int
) -> bool:
    """The checks of :func:`_sequences_ok` and :func:`_boundaries_ok` over whole arrays
    of at most ``FAST_CHUNK`` entries (a small corpus: no chunking, no threads, no page
    dropping: each corpus of a blend of 1,000 small ones)."""
    if len(lengths):
        if lengths.min() < 0:
            return False
        sizes = np.multiply(lengths[:-1], itemsize, dtype=np.int64)
        if not np.array_equal(np.subtract(pointers[1:], pointers[:-1]), sizes):
            return False
    return not np.less(document_indices[1:], document_indices[:-1]).any()


def _raise_first_error(
    lengths: np.ndarray,
    pointers: np.ndarray,
    document_indices: np.ndarray,
    itemsize: int,
    bin_size: int,
    idx_path: str,
    bin_path: str,
) -> None:
    """The reference pass: walks the arrays in order and raises DataError for the first
    error (boundaries, then lengths, then pointers, chunk by chunk; then the .bin size)."""
    count = len(lengths)
    expected_pointer = 0
    for start in range(0, max(count, len(document_indices)), VALIDATION_CHUNK):
        stop = start + VALIDATION_CHUNK
        boundaries = np.asarray(document_indices[start : stop + 1])
        steps = np.diff(boundaries)
        if steps.size and steps.min() < 0:
            where = start + int(np.argmax(steps < 0)) + 1
            raise DataError(
                f"{idx_path}: document_indices must be non-decreasing; entry {where} is "
                f"{int(boundaries[where - start])} after {int(boundaries[where - start - 1])}"
            )
        if start >= count:
            continue
        chunk_lengths = np.asarray(lengths[start:stop], dtype=np.int64)
        chunk_pointers = np.asarray(pointers[start:stop])
        if chunk_lengths.min() < 0:
            where = start + int(np.argmax(chunk_lengths < 0))
            raise DataError(
                f"{idx_path}: sequence_lengths[{where}] is {int(lengths[where])}, negative"
            )
        ends = np.cumsum(chunk_lengths * itemsize) + expected_pointer
        expected = np.empty_like(ends)
        expected[0] = expected_pointer
        expected[1:] = ends[:-1]
        mismatch = chunk_pointers != expected
        if mismatch.any():
            where = int(np.argmax(mismatch))
            found, wanted = int(chunk_pointers[where]), int(expected[where])
            if found % itemsize:
                kind = f"misaligned for {itemsize}-byte tokens"
            elif found < wanted:
                kind = "overlapping the previous sequence"
            elif found + int(chunk_lengths[where]) * itemsize > bin_size:
                kind = f"past the end of {bin_path} ({bin_size} bytes)"
            else:
                kind = "leaving a gap after the previous sequence"
            raise DataError(
                f"{idx_path}: sequence_pointers[{start + where}] is {found}, {kind}; "
                f"the lengths put it at {wanted}"
            )
        expected_pointer = int(ends[-1])
    if expected_pointer > bin_size:
        raise DataError(
            f"{bin_path}: .bin has {bin_size} bytes but the index needs {expected_pointer} "
            "(the .bin is shorter than the index says)"
        )
