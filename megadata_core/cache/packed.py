"""Many small arrays stored as two: a table and one byte blob (a build bundle's entry).

A warm start of a blend of 10,000 corpora reads the index arrays of 30,000 small
datasets; as files they would cost 30,000 opens and maps. :func:`pack_arrays` packs
them into ``table`` and ``blob``, one cache entry; :class:`PackedArrays` hands each one
out as a view of the (memory-mapped) blob, made at first access.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from megadata_core.cache import npy_files
from megadata_core.cache.npy_files import byte_view
from megadata_core.errors import DataError

#: dtypes :func:`pack_arrays` stores (the table holds a position in this tuple).
PACK_DTYPES = ("|b1", "|i1", "|u1", "<i2", "<u2", "<i4", "<u4", "<i8", "<u8", "<f4", "<f8")
PACK_ALIGN = 8  # every array starts at a multiple of this many bytes of the blob
_PACK_CODES = {np.dtype(name): code for code, name in enumerate(PACK_DTYPES)}


def pack_arrays(arrays: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
    """Many small arrays as two: ``table`` int64 [M, 4] (byte offset in the blob, dtype
    code in :data:`PACK_DTYPES`, rows, columns or -1 for a 1-D array) and ``blob``
    uint8 [bytes] (each array's bytes, C order, ``PACK_ALIGN``-aligned). Arrays are
    1-D or 2-D of a dtype in :data:`PACK_DTYPES` (little-endian as stored)."""
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
        self._blob = blob  # a memory map pickles as its file name (npy_files.pickled_map)
        table, blob = np.asarray(table), np.asarray(blob)
        if table.ndim != 2 or table.shape[1] != 4 or table.dtype != np.int64:
            raise DataError(
                f"{where}: table of shape {table.shape} {table.dtype}, not int64 [M, 4]"
            )
        if blob.ndim != 1 or blob.dtype != np.uint8 or blob.size % PACK_ALIGN:
            raise DataError(f"{where}: blob of shape {blob.shape} {blob.dtype}, not uint8 [8 k]")
        offsets, codes, rows, columns = table.T
        itemsizes = np.array([np.dtype(name).itemsize for name in PACK_DTYPES], dtype=np.int64)
        valid_codes = (codes >= 0) & (codes < len(PACK_DTYPES))
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
        self._typed = [blob.view(name) for name in PACK_DTYPES]

    def __getstate__(self) -> dict:
        return {"table": self.table, "blob": npy_files.pickled_map(self._blob)}

    def __setstate__(self, state: dict) -> None:
        type(self).__init__(self, state["table"], npy_files.reopened_map(state["blob"]))

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
