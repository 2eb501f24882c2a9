"""A bound on the files a group of corpora holds open: least recently used closed first.

A blend of 10,000 corpora read in shuffled order would map every member's .bin (on
Python < 3.13 a memory map holds a duplicated descriptor) and run into the process's
``ulimit -n`` ("Too many open files", Megatron-LM #929/#930). Corpora that share an
:class:`OpenFiles` (the builder gives one to every corpus of a build, sized by
``GPTDataConfig.max_open_files``) register each map or descriptor they open; past the
limit the least recently used holder is asked to :meth:`release_open_files`, which only
drops its references. A reader in flight keeps what it holds (its local reference, or a
token view of the map) and the descriptor closes when the last reference goes, so an
eviction never closes a file under a read. Bookkeeping is one dict operation per opened
map and per batch read, under a lock.
"""

from __future__ import annotations

import threading
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
    """At most ``limit`` holders with a file open at once (least recently used released).

    A holder is any object with ``release_open_files()``; it calls :meth:`opened` right
    after opening a file and :meth:`used` when it reads from one it holds.
    """

    def __init__(self, limit: int = DEFAULT_MAX_OPEN_FILES) -> None:
        self.limit = check_limit("max_open_files", limit)
        self._held: OrderedDict[int, object] = OrderedDict()
        self._lock = threading.Lock()

    def opened(self, holder: object) -> None:
        """``holder`` opened a file: count it, releasing the least recently used holders
        past the limit (outside the lock: a release may take a holder's own lock)."""
        released = []
        with self._lock:
            self._held[id(holder)] = holder
            self._held.move_to_end(id(holder))
            while len(self._held) > self.limit:
                released.append(self._held.popitem(last=False)[1])
        for other in released:
            other.release_open_files()

    def used(self, holder: object) -> None:
        """``holder`` read from its open file: it becomes the most recently used."""
        with self._lock:
            if id(holder) in self._held:
                self._held.move_to_end(id(holder))

    def closed(self, holder: object) -> None:
        """``holder`` closed its file itself."""
        with self._lock:
            self._held.pop(id(holder), None)

    def __len__(self) -> int:
        return len(self._held)

    def __getstate__(self) -> dict:
        return {"limit": self.limit}  # a worker starts with nothing open

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["limit"])

    def __repr__(self) -> str:
        return f"OpenFiles(limit={self.limit}, open={len(self._held)})"
