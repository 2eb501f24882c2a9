"""Arrays handed from a worker process to its consumer in shared memory, and the clean-up.

Files are ``/dev/shm/megadata-{kind}-{namespace}-{pid}-{random}`` (the temp directory
where there is no ``/dev/shm``): ``pid`` made it and ``namespace`` is the inode of its pid
namespace (0 where /proc does not say), so a process tells its own files, and those of
dead processes of its namespace, from anyone else's. No ``multiprocessing`` resource
tracker and no ``__del__`` is involved. Three clean-ups:

* the consumer removes a file's name as soon as it has mapped it (the memory stays while
  a map lives);
* :func:`remove_own`, at a producer's exit and when its parent died
  (:mod:`~megadata_core.handover.orphans`), removes what it made that no consumer took;
* :func:`sweep_dead`, once per producer process at its first file, removes the files of
  producers of this namespace that no longer run (killed with ``kill -9``).

Two transports. A segment (:func:`write_segment`) is one fresh file per batch, written
with one ``writev``; the consumer gets read-only arrays that view its mapping. A full
``/dev/shm`` fails the write (``ENOSPC``), not a later page fault: the caller then ships
the bytes. A ring (:class:`ProducerRing`) is made once: the producer copies each array
into its next slot and sends a small :class:`SlotRef`; the consumer maps the ring once
and reads the slot in place. Reuse is the caller's contract: ``put`` number k overwrites
slot ``k % slots``, so the consumer must be done with the array put ``slots`` puts
earlier before the producer is asked for put k, and that "done, then ask" must travel
over a channel that orders memory (a pipe or queue between the processes does; the torch
adapter gets it from the DataLoader's request protocol).
"""

from __future__ import annotations

import mmap
import os
import tempfile
import threading
import uuid
from dataclasses import dataclass
from multiprocessing import util

import numpy as np

from megadata_core.errors import DataError

#: Where the files go: memory-backed on Linux.
_SHM_DIR = "/dev/shm"
PREFIX = "megadata-"

_LOCK = threading.Lock()
_PREPARED: int | None = None  # the pid that swept and registered its exit clean-up


def shm_dir() -> str:
    """``/dev/shm`` where it exists and is writable, else the temp directory."""
    if os.path.isdir(_SHM_DIR) and os.access(_SHM_DIR, os.W_OK):
        return _SHM_DIR
    return tempfile.gettempdir()


def namespace() -> int:
    """The inode of this process's pid namespace (0 where /proc does not say)."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


def _new_path(kind: str) -> str:
    """A fresh file name of this process, ``kind`` in ``[a-z]+`` (``batch``, ``ring``).
    The first call of a process sweeps dead producers' files and arranges for this
    process's own to go at its exit."""
    _prepare()
    name = f"{PREFIX}{kind}-{namespace()}-{os.getpid()}-{uuid.uuid4().hex}"
    return os.path.join(shm_dir(), name)


def owner(path: str) -> tuple[int, int] | None:
    """``(namespace, pid)`` of the process that made ``path``, or None for other names."""
    parts = os.path.basename(path).split("-")
    if len(parts) != 5 or f"{parts[0]}-" != PREFIX:
        return None
    try:
        return int(parts[2]), int(parts[3])
    except ValueError:
        return None


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (in this pid namespace)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def remove(path: str) -> None:
    """Unlink ``path``; gone already is fine."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _names() -> list[str]:
    try:
        return [name for name in os.listdir(shm_dir()) if name.startswith(PREFIX)]
    except OSError:
        return []


def remove_own() -> None:
    """Remove every file this process made that is still named (no consumer took it)."""
    mine = (namespace(), os.getpid())
    directory = shm_dir()
    for name in _names():
        if owner(name) == mine:
            remove(os.path.join(directory, name))


def sweep_dead() -> list[str]:
    """Remove the files of producers of this pid namespace that no longer run; returns
    their paths."""
    space = namespace()
    directory = shm_dir()
    removed = []
    for name in _names():
        made_by = owner(name)
        if made_by is not None and made_by[0] == space and not alive(made_by[1]):
            remove(os.path.join(directory, name))
            removed.append(os.path.join(directory, name))
    return removed


def _prepare() -> None:
    global _PREPARED
    with _LOCK:
        if _PREPARED == os.getpid():
            return
        _PREPARED = os.getpid()
        sweep_dead()
        util.Finalize(None, remove_own, exitpriority=10)  # at this process's normal exit


#: Every array starts at a multiple of this many bytes of the file.
ALIGN = 64


class _SegmentRef:
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


def write_segment(arrays: dict[str, np.ndarray]) -> _SegmentRef | None:
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
    path = _new_path("batch")
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
    return _SegmentRef(path, tuple(entries))


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


def read_segment(ref: _SegmentRef) -> dict[str, np.ndarray]:
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


@dataclass(frozen=True)
class SlotRef:
    """Where an array waits: ring file ``path``, ``slot`` of ``slot_bytes`` bytes."""

    path: str
    slot: int
    slot_bytes: int
    shape: tuple[int, ...]
    dtype: str


class ProducerRing:
    """The producer's side: ``slots`` slots, each as large as the first array put."""

    def __init__(self, slots: int) -> None:
        if slots < 1:
            raise ValueError(f"slots: {slots} must be >= 1")
        self.slots = int(slots)
        self.path: str | None = None
        self.slot_bytes = 0
        self._map: mmap.mmap | None = None
        self._next = 0
        self.failed = False  # the ring could not be made (no room): put returns None

    def __getstate__(self) -> dict:  # a copy pickled to another process starts empty
        return {"slots": self.slots}

    def __setstate__(self, state: dict) -> None:
        type(self).__init__(self, state["slots"])

    def _create(self, nbytes: int) -> None:
        self.slot_bytes = max(int(nbytes), 1)
        path = _new_path("ring")
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        size = self.slot_bytes * self.slots
        try:
            if hasattr(os, "posix_fallocate"):  # a full /dev/shm fails here, not as SIGBUS
                os.posix_fallocate(descriptor, 0, size)
            else:
                os.ftruncate(descriptor, size)
            self._map = mmap.mmap(descriptor, size)
        except OSError:
            self.failed = True  # no room: the caller ships bytes
            remove(path)
            return
        except BaseException:
            remove(path)
            raise
        finally:
            os.close(descriptor)
        self.path = path
        # removed when this ring goes or at its process's exit (remove_own too)
        util.Finalize(self, remove, args=(path,), exitpriority=10)

    def put(self, array: np.ndarray) -> SlotRef | None:
        """Copy ``array`` into the next slot; None when it is larger than a slot or the
        ring could not be made (no room in ``/dev/shm``): the caller then ships the bytes."""
        array = np.asarray(array)
        if self._map is None and not self.failed:
            self._create(array.nbytes)
        if self._map is None or self.path is None or array.nbytes > self.slot_bytes:
            return None  # (path and map are set together)
        slot = self._next
        self._next = (slot + 1) % self.slots
        offset = slot * self.slot_bytes
        np.ndarray(array.shape, array.dtype, buffer=self._map, offset=offset)[...] = array
        return SlotRef(self.path, slot, self.slot_bytes, tuple(array.shape), array.dtype.str)


class ConsumerRings:
    """The consumer's side: rings mapped by path, each kept while its producer lives (a
    ring's name is removed once mapped, so a live ring must never be dropped here)."""

    def __init__(self) -> None:
        self._maps: dict[str, tuple[int, mmap.mmap]] = {}
        self._lock = threading.Lock()  # torch's pin-memory thread reads rings too

    def view(self, ref: SlotRef) -> np.ndarray:
        """The array at ``ref``, read-only, in the ring's memory (valid until the
        producer reuses the slot)."""
        with self._lock:
            entry = self._maps.get(ref.path)
            if entry is None:
                with open(ref.path, "rb") as file:
                    ring = mmap.mmap(file.fileno(), 0, prot=mmap.PROT_READ)
                remove(ref.path)  # mapped on both sides now: the name is no longer needed
                self._drop_dead()
                entry = self._maps[ref.path] = (_producer_pid(ref.path), ring)
        array = np.ndarray(
            ref.shape, np.dtype(ref.dtype), buffer=entry[1], offset=ref.slot * ref.slot_bytes
        )
        array.flags.writeable = False
        return array

    def forget(self, pids) -> None:
        """Forget the rings of producers ``pids`` (ones that were stopped): each is
        unmapped once no array views it."""
        pids = {int(pid) for pid in pids}
        with self._lock:
            for path, (pid, _) in list(self._maps.items()):
                if pid in pids:
                    del self._maps[path]

    def _drop_dead(self) -> None:
        """Forget rings whose producer exited (unmapped once no array views them)."""
        for path, (pid, _) in list(self._maps.items()):
            if not alive(pid):
                del self._maps[path]

    def __len__(self) -> int:
        return len(self._maps)


def _producer_pid(path: str) -> int:
    """The producer's pid, from the ring's name (:func:`owner`)."""
    made_by = owner(path)
    return -1 if made_by is None else made_by[1]
