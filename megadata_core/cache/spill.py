"""Index arrays built straight into the cache directory ("spilled"), then renamed in.

An index of a billion documents is gigabytes; built in anonymous memory it would need
that much RAM, and the cache would then write it out again. :func:`spill_arrays` gives
the build an allocator (the protocol of :mod:`megadata_core.indices.allocate`) whose
arrays are ``.npy`` memory maps (``numpy.lib.format.open_memmap``) on temporary files of
the entry, named as :mod:`megadata_core.files.temporary` names them, and whose
in-place shuffles run in anonymous memory when it fits (:mod:`.scratch`). Their pages
belong to the page cache, which the kernel can write back and reclaim. When the entry is saved,
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

from megadata_core.cache.scratch import file_backed, shuffle_scratch
from megadata_core.files import temporary as temporary_files

#: temporary path -> (data address, shape, dtype) of the arrays spilled by this process
#: and not yet taken or removed.
_SPILLED: dict[str, tuple[int, tuple[int, ...], np.dtype]] = {}
#: Arrays of fewer bytes are made in memory: a shuffle on a fresh file mapping pays
#: page faults and writeback, worth it only where the array is a real share of RAM.
SPILL_ABOVE = 1 << 28


class Spill:
    """The allocator of :func:`spill_arrays` (the index functions' ``empty``, see
    :mod:`megadata_core.indices.allocate`): ``spill(name, shape, dtype)`` makes an array,
    ``shuffle_space(target)`` says where a part of a result is shuffled and
    ``is_spilled(array)`` whether writes to it should go through a buffer."""

    def __init__(
        self,
        directory: str | None,
        file_names: dict[str, str],
        spill_above: int,
        working_prefix: str | None,
    ) -> None:
        self.directory, self.file_names = directory, file_names
        self.spill_above, self.working_prefix = spill_above, working_prefix
        self.made: list[str] = []

    def _label(self, name: str) -> str | None:
        label = self.file_names.get(name)
        if label is None and self.working_prefix and name.startswith(self.working_prefix):
            label = f"{name}.npy"
        return label

    def __call__(
        self, name: str, shape: tuple[int, ...], dtype: np.typing.DTypeLike
    ) -> np.ndarray:
        directory = self.directory
        label = None if directory is None else self._label(name)
        nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        if directory is None or label is None or nbytes <= self.spill_above or 0 in shape:
            return np.empty(shape, dtype)
        try:
            os.makedirs(directory, exist_ok=True)
            temporary_files.remove_stale(directory, [label])
            handle, temporary = temporary_files.create_file(directory, label)
            os.close(handle)
            self.made.append(temporary)
            array = np.lib.format.open_memmap(temporary, mode="w+", dtype=dtype, shape=shape)
        except OSError:  # the cache warns when it cannot save; the build goes on
            return np.empty(shape, dtype)
        _SPILLED[os.path.abspath(temporary)] = (array.ctypes.data, array.shape, array.dtype)
        return array

    def shuffle_space(self, target: np.ndarray):
        """Where ``target`` (a part of a result) is filled and shuffled: anonymous memory
        when it is file-backed and fits (:func:`.scratch.shuffle_scratch`)."""
        return shuffle_scratch(target)

    @staticmethod
    def is_spilled(array: np.ndarray) -> bool:
        """Whether ``array`` lives in a file mapping."""
        return file_backed(array)

    def remove_untaken(self) -> None:
        for temporary in self.made:
            _SPILLED.pop(os.path.abspath(temporary), None)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)


@contextlib.contextmanager
def spill_arrays(
    directory: str | None,
    file_names: dict[str, str],
    spill_above: int = SPILL_ABOVE,
    working_prefix: str | None = None,
) -> Iterator[Spill]:
    """An allocator making array ``name`` of more than ``spill_above`` bytes as a
    memory-mapped temporary of ``file_names[name]`` (a file name in ``directory``), or
    of a working file when ``name`` starts with ``working_prefix`` (the index functions'
    ``SCRATCH_PREFIX``); smaller arrays, other names without a file, no directory or a
    directory that cannot be written give memory. Temporaries not taken by
    :func:`take_spilled` are removed on exit."""
    spill = Spill(directory, file_names, spill_above, working_prefix)
    try:
        yield spill
    finally:
        spill.remove_untaken()


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
