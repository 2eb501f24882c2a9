"""Index arrays built straight into the cache directory ("spilled"), then renamed in.

An index of a billion documents is gigabytes; built in anonymous memory it would need
that much RAM, and the cache would then write it out again. :func:`spill_arrays` gives
the build an allocator (:mod:`megadata_core.indices.allocate`) whose arrays are ``.npy``
memory maps (``numpy.lib.format.open_memmap``) on temporary files of the entry, named as
:mod:`megadata_core.files.temporary` names them: their pages belong to the page cache, which
the kernel can write back and reclaim. When the entry is saved,
:func:`take_spilled` hands the cache such a file (flushed; its CRC-32 is then read from
the file, as every cache file's is recorded) to ``os.replace`` into place: the files an
entry holds are complete before they get their final names, as before. Leftover
temporaries (a failed build) are removed on exit; a crashed writer's are removed by the
next writer of the same file (``temp_files.remove_stale``).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import numpy as np

from megadata_core.files import temporary as temp_files
from megadata_core.indices.allocate import Allocate, in_memory

#: temporary path -> (data address, shape, dtype) of the arrays spilled by this process
#: and not yet taken or removed.
_SPILLED: dict[str, tuple[int, tuple[int, ...], np.dtype]] = {}
#: Arrays of fewer bytes are made in memory: a shuffle on a fresh file mapping pays
#: page faults and writeback, worth it only where the array is a real share of RAM.
SPILL_ABOVE = 1 << 28
#: Names of working arrays (not cache files) that a build may spill: each becomes an
#: anonymous temporary of the entry's directory, removed when the build ends.
SCRATCH_PREFIX = "scratch-"


@contextlib.contextmanager
def spill_arrays(
    directory: str | None, file_names: dict[str, str], spill_above: int = SPILL_ABOVE
) -> Iterator[Allocate]:
    """An allocator making array ``name`` of more than ``spill_above`` bytes as a
    memory-mapped temporary of ``file_names[name]`` (a file name in ``directory``), or
    of a working file when ``name`` starts with :data:`SCRATCH_PREFIX`; smaller arrays,
    other names without a file, no directory or a directory that cannot be written give
    memory. Temporaries not taken by :func:`take_spilled` are removed on exit."""
    if directory is None:
        yield in_memory
        return
    made: list[str] = []

    def empty(name: str, shape: tuple[int, ...], dtype: np.typing.DTypeLike) -> np.ndarray:
        label = file_names.get(name)
        if label is None and name.startswith(SCRATCH_PREFIX):
            label = f"{name}.npy"
        nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        if label is None or nbytes <= spill_above or 0 in shape:
            return np.empty(shape, dtype)
        try:
            os.makedirs(directory, exist_ok=True)
            temp_files.remove_stale(directory, [label])
            handle, temporary = temp_files.create_file(directory, label)
            os.close(handle)
            made.append(temporary)
            array = np.lib.format.open_memmap(temporary, mode="w+", dtype=dtype, shape=shape)
        except OSError:  # the cache warns when it cannot save; the build goes on
            return np.empty(shape, dtype)
        _SPILLED[os.path.abspath(temporary)] = (array.ctypes.data, array.shape, array.dtype)
        return array

    try:
        yield empty
    finally:
        for temporary in made:
            _SPILLED.pop(os.path.abspath(temporary), None)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)


def take_spilled(array: object, path: str) -> str | None:
    """The temporary file holding all of ``array`` when it was spilled for ``path``
    (same directory, labelled with its file name) and is still whole and untaken: then
    its pages are flushed and it is no longer tracked (the caller renames it); else
    None."""
    if not isinstance(array, np.memmap) or not array.filename:
        return None
    temporary = os.path.abspath(array.filename)
    known = _SPILLED.get(temporary)
    if known is None or known != (array.ctypes.data, array.shape, array.dtype):
        return None  # a view of part of it, or not spilled by us
    directory, name = os.path.split(temporary)
    if directory != os.path.dirname(os.path.abspath(path)) or not name.startswith(
        f".{os.path.basename(path)}."
    ):
        return None
    array.flush()
    del _SPILLED[temporary]
    return temporary
