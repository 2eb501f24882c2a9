"""One index cache file: written as .npy with a CRC-32 of every byte, checked whole
before use and remembered as good per file identity (the policy is described in
:mod:`megadata_core.cache.entries`)."""

from __future__ import annotations

import io
import os
import threading
import time
import zlib
from collections.abc import Mapping

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


def crc_hex(crc: int) -> str:
    return f"{crc & 0xFFFFFFFF:08x}"


def array_crc(array: np.ndarray, crc: int = 0) -> int:
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
    return crc_hex(array_crc(array, zlib.crc32(header)))


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
            return crc_hex(crc)
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
