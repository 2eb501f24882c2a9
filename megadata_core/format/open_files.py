"""A bound on the files a group of corpora holds open: least recently used closed first.

A blend of 10,000 corpora read in shuffled order would map every member's .bin, its .idx
and its index cache files (on Python < 3.13 every memory map holds a duplicated
descriptor) and run into the process's ``ulimit -n`` ("Too many open files",
Megatron-LM #929/#930). Corpora and datasets that share an :class:`OpenFiles` (the
builder gives one to every corpus of a build, sized by ``GPTDataConfig.max_open_files``;
a dataset uses its corpus's) count each descriptor or map they open; past the limit the
least recently used holders are asked to :meth:`release_open_files`, which only drops
their references and re-maps at the next access. A reader in flight keeps what it holds
(its local reference, or a view of the map) and the descriptor closes when the last
reference goes, so an eviction never closes a file under a read. Bookkeeping is one
dict operation per opened map and per batch read, under a lock.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict

from megadata_core.errors import DataError

#: The default bound (``GPTDataConfig.max_open_files``): well below the usual soft
#: ``ulimit -n`` of 1,024, leaving room for the cache's and the framework's own files.
DEFAULT_MAX_OPEN_FILES = 512


def check_limit(field: str, limit: object) -> int:
    """``limit`` as an int >= 1; DataError naming ``field`` otherwise."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise DataError(f"{field}: {limit!r} must be an int >= 1")
    return int(limit)


class OpenFiles:
    """At most ``limit`` descriptors open at once between the holders that share it
    (least recently used holders released first; one holder alone may keep more, what
    a single read of it needs).

    A holder is any object with ``release_open_files()`` (which drops every descriptor
    it counted here); it calls :meth:`opened` right after opening files and :meth:`used`
    when it reads from the ones it holds.
    """

    def __init__(self, limit: int = DEFAULT_MAX_OPEN_FILES) -> None:
        self.limit = check_limit("max_open_files", limit)
        # id -> [weakref to holder, descriptors]: a strong reference would be a cycle
        # (holder -> OpenFiles -> holder) holding a dropped dataset's files until collected
        self._held: OrderedDict[int, list] = OrderedDict()
        self._count = 0
        self._lock = threading.Lock()

    def opened(self, holder: object, files: int = 1) -> None:
        """``holder`` opened ``files`` more descriptors: count them, releasing the least
        recently used other holders past the limit (outside the lock: a release may take
        a holder's own lock)."""
        released = []
        with self._lock:
            entry = self._held.get(id(holder))
            if entry is None or entry[0]() is not holder:  # new, or a dead holder's id
                self._count -= entry[1] if entry else 0
                entry = self._held[id(holder)] = [weakref.ref(holder), 0]
            self._held.move_to_end(id(holder))
            entry[1] += files
            self._count += files
            while self._count > self.limit and len(self._held) > 1:
                other, count = self._held.popitem(last=False)[1]
                self._count -= count
                released.append(other())
        for other in released:
            if other is not None:  # a dead holder's files closed with it
                other.release_open_files()

    def used(self, holder: object) -> None:
        """``holder`` read from its open files: it becomes the most recently used."""
        with self._lock:
            if id(holder) in self._held:
                self._held.move_to_end(id(holder))

    def closed(self, holder: object) -> None:
        """``holder`` closed every file it counted here itself."""
        with self._lock:
            entry = self._held.pop(id(holder), None)
            if entry is not None:
                self._count -= entry[1]

    def held(self, holder: object) -> int:
        """The descriptors ``holder`` is counted for."""
        with self._lock:
            entry = self._held.get(id(holder))
            return 0 if entry is None or entry[0]() is not holder else entry[1]

    def __len__(self) -> int:
        """The descriptors counted (all holders)."""
        return self._count

    def __getstate__(self) -> dict:
        return {"limit": self.limit}  # a worker starts with nothing open

    def __setstate__(self, state: dict) -> None:
        type(self).__init__(self, state["limit"])

    def __repr__(self) -> str:
        return f"OpenFiles(limit={self.limit}, open={self._count}, holders={len(self._held)})"
