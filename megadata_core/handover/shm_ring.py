"""A ring of reused shared-memory slots for handing arrays from a worker process over.

Pickling a batch through a worker's pipe copies it twice and costs context switches on
every 64 KiB; fresh shared memory per batch costs page faults on both sides. A ring is
made once: the producer (a worker) copies each array into its next slot and sends a
small :class:`SlotRef` instead of the bytes; the consumer maps the ring once and reads
the slot in place.

The ring is a file in ``/dev/shm`` (memory, where it exists; else the temp directory),
memory-mapped by both sides: no ``multiprocessing`` resource tracker is involved. The
producer creates it on its first :meth:`ProducerRing.put` and removes it when its process
exits (or its parent died); the consumer removes the name as soon as it has mapped it
(the memory stays while either side maps it). Names and the clean-up of killed producers'
rings: :mod:`~megadata_core.handover.shm_names`.

Reuse is the caller's contract: ``put`` number k overwrites slot ``k % slots``, so the
consumer must be done with the array put ``slots`` puts earlier before the producer is
asked for put k -- and that "done, then ask" must travel over a channel that orders
memory (a pipe or queue between the processes does). The torch adapter gets this from
the DataLoader's request protocol.
"""

from __future__ import annotations

import mmap
import os
import threading
from dataclasses import dataclass
from multiprocessing import util

import numpy as np

from megadata_core.handover.shm_names import alive, new_path, owner, remove


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
        path = new_path("ring")
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
        # removed when this ring goes or at its process's exit (shm_names.remove_own too)
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
    """The producer's pid, from the ring's name (:func:`shm_names.owner`)."""
    made_by = owner(path)
    return -1 if made_by is None else made_by[1]
