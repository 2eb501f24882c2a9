"""The .idx layout (MMIDIDX version 1) and its validation.

Layout, little-endian, no padding::

    b"MMIDIDX\\x00\\x00"  u64 version=1  u8 dtype code  u64 N  u64 D
    int32[N] sequence lengths
    int64[N] sequence byte pointers into the .bin
    int64[D] document boundaries (sequence indices, starting at 0, ending at N)
    int8[N]  sequence modes (multimodal only; the flag is not stored)
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from megadata_core.errors import DataError
from megadata_core.format.dtypes import dtype_of

MAGIC = b"MMIDIDX\x00\x00"
VERSION = 1
HEADER_SIZE = 34
_HEADER = struct.Struct("<9sQBQQ")

# Arrays are validated in chunks so that opening needs O(1) extra memory.
VALIDATION_CHUNK = 1 << 20


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
