"""Index cache files: written as .npy with a CRC-32 of every byte, checked whole before
use and remembered as good per file identity (the policy is described in
:mod:`megadata_core.cache.entries`); many small arrays packed as two.

A warm start of a blend of 10,000 corpora reads the index arrays of 30,000 small
datasets; as files they would cost 30,000 opens and maps. :func:`pack_arrays` packs them
into ``table`` and ``blob``, one cache entry (a build bundle's); :class:`PackedArrays`
hands each one out as a view of the (memory-mapped) blob, made at first access.
"""

from __future__ import annotations

import io
import os
import threading
import time
import zlib
from collections.abc import Mapping, Sequence

import numpy as np

from megadata_core.errors import DataError
from megadata_core.files.identity import identity, settled

CHECKSUM_CHUNK_BYTES = 1 << 22  # zlib.crc32 is fed 4 MiB at a time
_NPY_ERRORS = (ValueError, TypeError, SyntaxError, OSError, EOFError)

#: (device, inode, size, mtime_ns, ctime_ns) -> CRC-32 of the files of that identity
#: checked whole in this process.
_CHECKED: dict[tuple[int, ...], str] = {}


def byte_view(array: np.ndarray) -> np.ndarray:
    """uint8 [nbytes] view of a C-contiguous array (a copy otherwise)."""
    return np.ascontiguousarray(array).reshape(-1).view(np.uint8)


def _crc_hex(crc: int) -> str:
    return f"{crc & 0xFFFFFFFF:08x}"


def _array_crc(array: np.ndarray, crc: int = 0) -> int:
    """zlib.crc32 of all the bytes of an array (C order) continuing from ``crc``, fed
    ``CHECKSUM_CHUNK_BYTES`` at a time."""
    raw = byte_view(array)
    for start in range(0, raw.size, CHECKSUM_CHUNK_BYTES):
        # numpy types ndarray.__buffer__ for Python 3.12+ only:
        crc = zlib.crc32(raw[start : start + CHECKSUM_CHUNK_BYTES], crc)  # type: ignore[arg-type]
    return crc


def npy_header(array: np.ndarray) -> bytes:
    """The .npy header (format 1.0, C order) ``np.save`` writes before ``array``."""
    stream = io.BytesIO()
    data = np.lib.format.header_data_from_array_1_0(np.ascontiguousarray(array))
    np.lib.format.write_array_header_1_0(stream, data)
    return stream.getvalue()


def write_npy(stream, header: bytes, array: np.ndarray) -> None:
    """``header`` then the array's bytes: the file ``np.save`` writes."""
    stream.write(header)
    stream.write(byte_view(array))


def file_crc(header: bytes, array: np.ndarray) -> str:
    """CRC-32 (8 hex digits) of the file :func:`write_npy` writes, from memory."""
    return _crc_hex(_array_crc(array, zlib.crc32(header)))


def file_checksum(array: np.ndarray) -> str:
    """CRC-32 (8 hex digits) of the whole .npy file of ``array`` (header included): the
    checksum a cache entry records for each file and checks on load."""
    return file_crc(npy_header(array), array)


def stream_crc(stream) -> str:
    """CRC-32 (8 hex digits) of every byte of an open binary file."""
    stream.seek(0)
    buffer = bytearray(CHECKSUM_CHUNK_BYTES)
    view = memoryview(buffer)
    crc = 0
    while True:
        count = stream.readinto(buffer)
        if not count:
            return _crc_hex(crc)
        crc = zlib.crc32(view[:count], crc)


# numpy parses a .npy header with ast.literal_eval; CPython 3.11's AST builder keeps its
# recursion count in per-interpreter state, so compiles on several threads at once can
# fail with "SystemError: AST constructor recursion depth mismatch" (seen in CI here;
# CPython gh-106905). The builder loads cache entries on threads: parse one at a time.
_HEADER_PARSE = threading.Lock()


def _read_npy_header(stream, path: str) -> tuple[tuple, bool, np.dtype]:
    try:
        version = np.lib.format.read_magic(stream)
        with _HEADER_PARSE:
            if version == (1, 0):
                return np.lib.format.read_array_header_1_0(stream)
            if version == (2, 0):
                return np.lib.format.read_array_header_2_0(stream)
    except _NPY_ERRORS as error:
        raise DataError(f"{path}: unreadable cache file ({error})") from None
    raise DataError(f"{path}: unreadable cache file (.npy format {version})")


def open_checked(
    path: str, meta: Mapping, verify: str, known: object = None
) -> tuple[np.ndarray, list | None]:
    """The array of one cache file, checked against its recorded ``meta`` (``file_size``,
    ``file_crc32``, ``shape``, ``dtype``) and memory-mapped from the descriptor that
    was checked (read-only; an empty array is read).

    With ``verify="full"`` every byte's CRC-32 is checked, unless this file identity is
    already known good: checked in this process, or ``known`` (its record from the
    entry's verified-files list) is its current record. Returns the array and the
    file's record ``[*identity, crc]`` to remember (None: not checked whole, or changed
    too recently to be remembered, see :func:`megadata_core.files.identity.settled`).

    Raises:
        DataError: naming the file, when it is missing, unreadable, or differs from
            ``meta`` in size, checksum, shape or dtype.
    """
    try:
        stream = open(path, "rb")
    except FileNotFoundError:
        raise DataError(f"{path}: cache file missing") from None
    except OSError as error:
        raise DataError(f"{path}: unreadable cache file ({error})") from None
    with stream:
        status = os.fstat(stream.fileno())
        if status.st_size != meta.get("file_size"):
            raise DataError(
                f"{path}: size {status.st_size} != recorded {meta.get('file_size')} "
                "(truncated?)"
            )
        record = None
        if verify == "full":
            record = _check_whole(stream, path, status, meta.get("file_crc32"), known)
        stream.seek(0)
        shape, fortran, dtype = _read_npy_header(stream, path)
        if fortran or list(shape) != meta.get("shape") or dtype.str != meta.get("dtype"):
            raise DataError(
                f"{path}: shape {list(shape)} dtype {dtype.str}"
                f"{' (Fortran order)' if fortran else ''} != recorded "
                f"{meta.get('shape')} {meta.get('dtype')}"
            )
        offset = stream.tell()
        if offset + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize != status.st_size:
            raise DataError(f"{path}: {status.st_size} bytes do not hold {shape} {dtype}")
        if 0 in shape:  # empty arrays cannot be mapped
            array = np.empty(shape, dtype)
        else:
            array = np.memmap(stream, dtype=dtype, mode="r", offset=offset, shape=shape)
    return array, record


def _check_whole(stream, path: str, status, expected: object, known: object) -> list | None:
    """Check the CRC-32 of every byte of ``stream`` unless its identity is known good;
    the record to remember, or None."""
    if not isinstance(expected, str):
        raise DataError(f"{path}: no checksum recorded for it")
    key = identity(status)
    record = [*key, expected]
    if _CHECKED.get(key) == expected:
        return record
    if known == record:
        _CHECKED[key] = expected
        return record
    began = time.time_ns()
    if stream_crc(stream) != expected:
        raise DataError(f"{path}: checksum does not match its description (damaged)")
    if not settled([status], began):
        return None
    _CHECKED[key] = expected
    return record


def is_file_map(array: object) -> bool:
    """Whether ``array`` is a memory map of a whole cache file (what :func:`pickled_map`
    packs as its file name; it holds a descriptor on Python < 3.13)."""
    return isinstance(array, np.memmap) and bool(array.filename)


def pickled_map(array: np.ndarray) -> np.ndarray | tuple:
    """How a cache array travels to a worker: a whole-file memory map as
    ``("mmap", path, identity)`` (reopened by :func:`reopened_map`), anything else as
    itself."""
    path = array.filename if isinstance(array, np.memmap) else None
    if not path:  # not a file map (as is_file_map says)
        return array
    return ("mmap", path, identity(os.stat(path)))


def reopened_map(value: np.ndarray | tuple) -> np.ndarray:
    """The array :func:`pickled_map` packed. A file is mapped only if it is still the
    file the sending process had checked (same identity: not replaced, not written
    since), so a worker never maps a cache file that changed after its check.

    Raises:
        DataError: naming the file, when it is missing or changed.
    """
    if not isinstance(value, tuple):
        return value
    path, expected = value[1], (tuple(value[2]) if len(value) > 2 else None)
    try:
        stream = open(path, "rb")
    except OSError as error:
        raise DataError(f"{path}: cache file unreadable in a worker ({error})") from None
    with stream:
        if expected is not None and identity(os.fstat(stream.fileno())) != expected:
            raise DataError(
                f"{path}: cache file changed after the sending process checked it; "
                "rebuild the dataset"
            )
        shape, fortran, dtype = _read_npy_header(stream, path)
        if 0 in shape:
            return np.empty(shape, dtype)
        return np.memmap(
            stream, dtype=dtype, mode="r", offset=stream.tell(), shape=shape,
            order="F" if fortran else "C",
        )


#: dtypes :func:`pack_arrays` stores (the table holds a position in this tuple).
_PACK_DTYPES = ("|b1", "|i1", "|u1", "<i2", "<u2", "<i4", "<u4", "<i8", "<u8", "<f4", "<f8")
PACK_ALIGN = 8  # every array starts at a multiple of this many bytes of the blob
_PACK_CODES = {np.dtype(name): code for code, name in enumerate(_PACK_DTYPES)}


def pack_arrays(arrays: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
    """Many small arrays as two: ``table`` int64 [M, 4] (byte offset in the blob, dtype
    code in :data:`_PACK_DTYPES`, rows, columns or -1 for a 1-D array) and ``blob``
    uint8 [bytes] (each array's bytes, C order, ``PACK_ALIGN``-aligned). Arrays are
    1-D or 2-D of a dtype in :data:`_PACK_DTYPES` (little-endian as stored)."""
    table = np.empty((len(arrays), 4), dtype=np.int64)
    parts = []
    offset = 0
    for row, array in enumerate(arrays):
        array = np.asarray(array)
        code = _PACK_CODES.get(array.dtype)
        if code is None or array.ndim not in (1, 2):
            raise DataError(
                f"pack_arrays: array {row} ({array.dtype} {array.shape}) cannot be packed"
            )
        raw = byte_view(array)
        table[row] = (offset, code, array.shape[0], array.shape[1] if array.ndim == 2 else -1)
        parts.append((offset, raw))
        offset += -(-raw.size // PACK_ALIGN) * PACK_ALIGN
    blob = np.zeros(offset, dtype=np.uint8)
    for start, raw in parts:
        blob[start : start + raw.size] = raw
    return {"table": table, "blob": blob}


class PackedArrays(Sequence):
    """The arrays of :func:`pack_arrays` as read-only views of ``blob``, each made at
    first access (a bundle of 10,000 members holds 30,000: a start reads only the table
    and the ones it uses). The table is checked whole up front.

    Raises:
        DataError: naming ``where``, when the table does not describe arrays inside the
            blob (a damaged entry).
    """

    def __init__(self, table: np.ndarray, blob: np.ndarray, where: str = "packed arrays"):
        self._blob = blob  # a memory map pickles as its file name (pickled_map)
        table, blob = np.asarray(table), np.asarray(blob)
        if table.ndim != 2 or table.shape[1] != 4 or table.dtype != np.int64:
            raise DataError(
                f"{where}: table of shape {table.shape} {table.dtype}, not int64 [M, 4]"
            )
        if blob.ndim != 1 or blob.dtype != np.uint8 or blob.size % PACK_ALIGN:
            raise DataError(f"{where}: blob of shape {blob.shape} {blob.dtype}, not uint8 [8 k]")
        offsets, codes, rows, columns = table.T
        itemsizes = np.array([np.dtype(name).itemsize for name in _PACK_DTYPES], dtype=np.int64)
        valid_codes = (codes >= 0) & (codes < len(_PACK_DTYPES))
        nbytes = (
            itemsizes[np.where(valid_codes, codes, 0)] * rows * np.where(columns < 0, 1, columns)
        )
        if (
            not valid_codes.all()
            or (rows < 0).any()
            or (columns < -1).any()
            or (offsets < 0).any()
            or (offsets % PACK_ALIGN).any()
            or (offsets + nbytes > blob.size).any()
        ):
            raise DataError(f"{where}: the table points outside the blob ({blob.size} bytes)")
        self.table = table
        # One typed view of the whole blob per dtype (its size is a multiple of
        # PACK_ALIGN), then a slice per array: cheaper than an ndarray constructor each.
        self._typed = [blob.view(name) for name in _PACK_DTYPES]

    def __getstate__(self) -> dict:
        return {"table": self.table, "blob": pickled_map(self._blob)}

    def __setstate__(self, state: dict) -> None:
        type(self).__init__(self, state["table"], reopened_map(state["blob"]))

    @property
    def rows(self) -> np.ndarray:
        """int64 [M]: the first dimension of every array (no view made)."""
        return self.table[:, 2]

    def __len__(self) -> int:
        return len(self.table)

    def __getitem__(self, number):
        if isinstance(number, slice):
            return [self[n] for n in range(*number.indices(len(self)))]
        offset, code, count, width = self.table[number].tolist()
        view = self._typed[code]
        start = offset // view.itemsize
        if width < 0:
            return view[start : start + count]
        return view[start : start + count * width].reshape(count, width)


def unpack_arrays(table: np.ndarray, blob: np.ndarray, where: str = "packed arrays") -> list:
    """The arrays of :func:`pack_arrays` as read-only views of ``blob`` (no copy); see
    :class:`PackedArrays` (DataError naming ``where`` for a damaged table)."""
    return list(PackedArrays(table, blob, where))
