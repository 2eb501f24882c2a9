"""A batch's arrays in one shared-memory file, handed from a worker to its consumer by name.

The producer (a worker) writes every array of a batch into a fresh file of its own
(:func:`~megadata_core.handover.shm_names.new_path`, in ``/dev/shm``) with one ``writev``
and sends the small :class:`SegmentRef`; the consumer maps the file read-only, removes its
name at once, and gets read-only arrays that view the mapping (it is unmapped when the
last of them goes). No ``multiprocessing`` resource tracker and no object with a
``__del__`` is involved, so nothing is left to run at interpreter exit; names that no
consumer took are removed by their producer (at its exit, or when its parent died) or,
if it was killed first, by the next producer of the same pid namespace
(:mod:`~megadata_core.handover.shm_names`).

A full ``/dev/shm`` fails the write (``ENOSPC``), not a later page fault:
:func:`write_segment` then returns None and the caller ships the bytes.
"""

from __future__ import annotations

import mmap
import os

import numpy as np

from megadata_core.errors import DataError
from megadata_core.handover.shm_names import new_path, remove

#: Every array starts at a multiple of this many bytes of the file.
ALIGN = 64


class SegmentRef:
    """Where a batch waits: file ``path`` holding ``entries`` ``(key, offset, shape,
    dtype str)``. A plain object, not a tuple or dataclass, so tree-walking libraries
    (Grain) take it as one leaf."""

    __slots__ = ("path", "entries")

    def __init__(self, path: str, entries: tuple) -> None:
        self.path = path
        self.entries = entries

    def __getstate__(self) -> tuple:
        return (self.path, self.entries)

    def __setstate__(self, state: tuple) -> None:
        self.path, self.entries = state

    def __repr__(self) -> str:
        return f"SegmentRef({self.path!r}, {[entry[0] for entry in self.entries]})"


def write_segment(arrays: dict[str, np.ndarray]) -> SegmentRef | None:
    """Write ``arrays`` into a new file; None when there is no room (the caller ships
    the bytes itself)."""
    entries, buffers, offset = [], [], 0
    for key, value in arrays.items():
        array = np.asarray(value)
        if not array.flags.c_contiguous:  # (ascontiguousarray would make a 0-d array 1-d)
            array = array.copy(order="C")
        padding = -offset % ALIGN
        if padding:
            buffers.append(bytes(padding))
            offset += padding
        entries.append((key, offset, tuple(array.shape), array.dtype.str))
        if array.nbytes:
            # numpy types ndarray.__buffer__ for Python 3.12+ only:
            buffers.append(memoryview(array.reshape(-1).view(np.uint8)))  # type: ignore[arg-type]
        offset += array.nbytes
    path = new_path("batch")
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        _write_all(descriptor, buffers)
    except OSError:  # ENOSPC, EFBIG...: the caller ships the bytes
        remove(path)
        return None
    except BaseException:
        remove(path)
        raise
    finally:
        os.close(descriptor)
    return SegmentRef(path, tuple(entries))


def _write_all(descriptor: int, buffers: list) -> None:
    pending = [memoryview(buffer) for buffer in buffers if len(buffer)]
    while pending:
        written = os.writev(descriptor, pending[:512])  # IOV_MAX is at least 1024
        while written:
            if written >= len(pending[0]):
                written -= len(pending.pop(0))
            else:
                pending[0] = pending[0][written:]
                written = 0


def read_segment(ref: SegmentRef) -> dict[str, np.ndarray]:
    """The arrays at ``ref``, read-only views of the mapped file (whose name is removed
    here: only the mapping keeps the memory)."""
    try:
        descriptor = os.open(ref.path, os.O_RDONLY)
    except FileNotFoundError:
        raise DataError(
            f"{ref.path}: a batch's shared memory is gone before it was read (its worker "
            "was killed, or the file was removed by hand)"
        ) from None
    try:
        size = os.fstat(descriptor).st_size
        mapping = mmap.mmap(descriptor, size, prot=mmap.PROT_READ) if size else b""
    finally:
        os.close(descriptor)
        remove(ref.path)
    out = {}
    for key, offset, shape, dtype in ref.entries:
        array = np.ndarray(shape, np.dtype(dtype), buffer=mapping, offset=offset)
        array.flags.writeable = False
        out[key] = array
    return out
