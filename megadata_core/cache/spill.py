"""Index arrays built straight into the cache directory ("spilled"), then renamed in.

An index of a billion documents is gigabytes; built in anonymous memory it would need
that much RAM, and the cache would then write it out again. :func:`spill_arrays` gives
the build an allocator (the protocol of :mod:`megadata_core.indices.arrays`) whose
arrays are ``.npy`` memory maps (``numpy.lib.format.open_memmap``) on temporary files of
the entry, named as :mod:`megadata_core.files.atomic` names them, and whose in-place
shuffles run in anonymous memory when it fits (:func:`shuffle_scratch`). Their pages
belong to the page cache, which the kernel can write back and reclaim. When the entry is
saved, :func:`take_spilled` hands the cache such a file (flushed; its CRC-32 is then read
from the file, as every cache file's is recorded) to ``os.replace`` into place: the files
an entry holds are complete before they get their final names. Leftover temporaries (a
failed build) are removed on exit; a crashed writer's are removed by the next writer of
the same file (``remove_stale``).

``RandomState.shuffle`` swaps entries at random positions over the whole array. On a
spilled file each swap can dirty another page, and once the array passes the kernel's
dirty-page limit the pages are re-dirtied faster than they are written back: a
1B-document index (8 GB) barely progresses. :func:`shuffle_scratch` gives
such a target an anonymous buffer of its size when the memory the kernel reports
available leaves ``SCRATCH_MARGIN`` to spare; the caller fills and shuffles the buffer,
which is then copied into the target once, in order (sequential writeback). Otherwise,
and for a target in memory already, it gives the target itself. The draws and values
are the same either way.
"""

from __future__ import annotations

import contextlib
import mmap
import os
from collections.abc import Iterator

import numpy as np

from megadata_core.files import atomic as temporary_files

#: temporary path -> (data address, shape, dtype) of the arrays spilled by this process
#: and not yet taken or removed.
_SPILLED: dict[str, tuple[int, tuple[int, ...], np.dtype]] = {}
#: Arrays of fewer bytes are made in memory: a shuffle on a fresh file mapping pays
#: page faults and writeback, worth it only where the array is a real share of RAM.
_SPILL_ABOVE = 1 << 28


class _Spill:
    """The allocator of :func:`spill_arrays` (the index functions' ``empty``, see
    :mod:`megadata_core.indices.arrays`): ``spill(name, shape, dtype)`` makes an array,
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
        when it is file-backed and fits (:func:`shuffle_scratch`)."""
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
    spill_above: int = _SPILL_ABOVE,
    working_prefix: str | None = None,
) -> Iterator[_Spill]:
    """An allocator making array ``name`` of more than ``spill_above`` bytes as a
    memory-mapped temporary of ``file_names[name]`` (a file name in ``directory``), or
    of a working file when ``name`` starts with ``working_prefix`` (the index functions'
    ``SCRATCH_PREFIX``); smaller arrays, other names without a file, no directory or a
    directory that cannot be written give memory. Temporaries not taken by
    :func:`take_spilled` are removed on exit."""
    spill = _Spill(directory, file_names, spill_above, working_prefix)
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


#: Memory left to the rest of the machine beyond a scratch buffer (bytes).
SCRATCH_MARGIN = 2 << 30
_COPY_BLOCK = 1 << 26  # bytes copied into the target per step
_MEMINFO = "/proc/meminfo"
_CGROUP = "/sys/fs/cgroup/"  # cgroup v2: memory.max, memory.current


def available_memory() -> int:
    """Bytes the kernel reports available (``MemAvailable``: free plus reclaimable page
    cache), capped by a cgroup v2 ``memory.max`` of this process's namespace; 0 when
    unknown (then nothing is made in memory)."""
    available = 0
    with contextlib.suppress(OSError, ValueError):
        with open(_MEMINFO) as stream:
            for line in stream:
                if line.startswith("MemAvailable:"):
                    available = int(line.split()[1]) * 1024
    with contextlib.suppress(OSError, ValueError):
        with open(_CGROUP + "memory.max") as limit, open(_CGROUP + "memory.current") as used:
            text = limit.read().strip()
            if text != "max":
                available = min(available, int(text) - int(used.read()))
    return available


def file_backed(array: np.ndarray) -> bool:
    """Whether ``array``'s memory is a file mapping (a ``numpy.memmap`` or a view of one)."""
    holder: object = array
    while isinstance(holder, np.ndarray):
        if isinstance(holder, np.memmap):
            return True
        holder = holder.base
    return isinstance(holder, mmap.mmap)


@contextlib.contextmanager
def shuffle_scratch(target: np.ndarray, margin: int | None = None) -> Iterator[np.ndarray]:
    """A writable 1-D array of ``target``'s size and dtype to fill and shuffle in; its
    contents are in ``target`` on a normal exit (nothing is copied when the block
    raises).

    Args:
        target: a 1-D array (the spilled result, or a part of it).
        margin: bytes to leave available beyond the buffer (default ``SCRATCH_MARGIN``).

    Yields:
        an anonymous buffer when ``target`` is file-backed and
        ``target.nbytes + margin <= available_memory()``; else ``target`` itself.
    """
    margin = SCRATCH_MARGIN if margin is None else margin
    if not file_backed(target) or target.nbytes + margin > available_memory():
        yield target
        return
    work = np.empty(target.shape, target.dtype)
    yield work
    step = max(1, _COPY_BLOCK // target.itemsize)
    for start in range(0, len(target), step):  # in order: the kernel writes it back
        target[start : start + step] = work[start : start + step]
