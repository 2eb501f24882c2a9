"""``msc://`` corpora: byte sources over NVIDIA's Multi-Storage Client (``pip install
megadata-core[msc]``; Megatron's ``--enable-msc`` path).

``msc://PROFILE/path/corpus`` names an object of the profile's store, configured as
Megatron users configure it (``MSC_CONFIG`` pointing at a YAML file of profiles: ``file``,
``s3``, ``gcs``, ...). :class:`MSCSource` is the core's byte source for it (registered
for the ``msc`` scheme through the ``megadata.storage`` entry point), so
``mdc.IndexedDataset("msc://...")`` reads through the same path as ``s3://``: the .idx
validated at open (a local copy of it, memory-mapped), batches read as coalesced byte
ranges issued together (:data:`MAX_IN_FLIGHT` at a time), every range checked for its
length. A ``file`` profile's object is mapped where it lies (its POSIX path).

Of the storage client, only ``read(path=..., byte_range=Range(offset=..., size=...))`` is
required, the one method Megatron's own MSC reader calls (so a client that offers only
that, as Megatron's tests' double does, serves too). ``get_posix_path`` and ``info`` are
used when the client has them: without ``get_posix_path`` no object counts as a local
file; without ``info`` sizes are found by single-byte reads and an .idx copy is named
after its content.
"""

from __future__ import annotations

import hashlib
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from megadata_core.errors import DataError
from megadata_core.files import atomic as temporary
from megadata_core.files.atomic import write_atomically

MAX_IN_FLIGHT = 32  # ranges read at once (the Multi-Storage Client reads one per call)
CACHE_ENV = "MEGADATA_MSC_CACHE"  # where local copies of .idx objects go


def _client_module():
    try:
        import multistorageclient
        from multistorageclient.types import Range
    except ModuleNotFoundError:
        raise DataError(
            "msc:// paths need the Multi-Storage Client: pip install 'megadata-core[msc]' "
            "(multi-storage-client)"
        ) from None
    return multistorageclient, Range


class MSCSource:
    """One object of a Multi-Storage Client profile, read by byte ranges. Pickles as its
    URL (the client is resolved again in a worker)."""

    def __init__(self, url: str) -> None:
        self.path = str(url)
        self._resolved = None
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    def _client(self):
        if self._resolved is None:
            msc, _ = _client_module()
            try:
                self._resolved = msc.resolve_storage_client(self.path)
            except Exception as error:  # the client's own errors: a config or profile
                raise DataError(f"{self.path}: {type(error).__name__}: {error}") from None
        return self._resolved

    def _call(self, what: str, function, *args, **kwargs):
        try:
            return function(*args, **kwargs)
        except FileNotFoundError:
            raise DataError(f"{self.path}: not found ({what})") from None
        except DataError:
            raise
        except Exception as error:
            raise DataError(
                f"{self.path}: {what} failed: {type(error).__name__}: {error}"
            ) from None

    def _info(self):
        """The client's ``info`` method, or None where it has none (a client that only
        reads, as Megatron's reader needs)."""
        return getattr(self._client()[0], "info", None)

    def size(self) -> int:
        """The object's size: one metadata request, or, from a client without ``info``,
        about 2 log2(size) single-byte reads."""
        info = self._info()
        if info is None:
            return self._probed_size()
        return int(self._call("reading its size", info, self._client()[1]).content_length)

    def check_size(self, minimum: int) -> int:
        """The size, after checking the object holds at least ``minimum`` bytes (from a
        client without ``info``: ``minimum``, after one single-byte read)."""
        if self._info() is None:
            if minimum <= 0:
                self._read_range(0, 0)  # not found: a DataError
                return 0
            if not self._has_byte(minimum - 1):
                raise DataError(
                    f"{self.path}: the object is shorter than the {minimum} bytes its "
                    "index refers to"
                )
            return minimum
        size = self.size()
        if size < minimum:
            raise DataError(
                f"{self.path}: {size} bytes, shorter than the {minimum} its index refers to"
            )
        return size

    def _read_range(self, offset: int, length: int) -> bytes:
        """What the client answers for ``length`` bytes at ``offset`` (fewer past the end),
        asked as Megatron's reader asks: ``read(path=..., byte_range=Range(...))``."""
        client, key = self._client()
        _, byte_range = _client_module()
        return self._call(
            f"reading {length} bytes at {offset}", client.read, path=key,
            byte_range=byte_range(offset=int(offset), size=int(length)),
        )

    def _has_byte(self, offset: int) -> bool:
        return len(self._read_range(offset, 1)) == 1

    def _probed_size(self) -> int:
        """The size found by single-byte reads (for a client without ``info``)."""
        if not self._has_byte(0):  # a missing object raises
            return 0
        low, high = 1, 2  # the object holds at least `low` bytes and fewer than `high`
        while self._has_byte(high - 1):
            low, high = high, high * 2
        while high - low > 1:
            middle = (low + high) // 2
            low, high = (middle, high) if self._has_byte(middle - 1) else (low, middle)
        return low

    def read(self, offset: int, length: int) -> bytes:
        """``length`` bytes at ``offset`` (one request)."""
        if length == 0:
            return b""
        data = self._read_range(offset, length)
        if len(data) != length:
            raise DataError(f"{self.path}: wanted {length} bytes at {offset}, got {len(data)}")
        return data

    def read_ranges(self, offsets: np.ndarray, lengths: np.ndarray) -> list[bytes]:
        """The bytes of every range, in the order given, :data:`MAX_IN_FLIGHT` at a time."""
        pairs = list(zip(np.asarray(offsets, np.int64).tolist(),
                         np.asarray(lengths, np.int64).tolist()))
        if len(pairs) <= 1:
            return [self.read(offset, length) for offset, length in pairs]
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(MAX_IN_FLIGHT, thread_name_prefix="megadata-msc")
            pool = self._pool
        return list(pool.map(lambda pair: self.read(*pair), pairs))

    def local_copy(self) -> str:
        """A local file with the whole object: a ``file`` profile's object itself, else a
        copy fetched once per object version (size and ETag or modification time) into
        ``$MEGADATA_MSC_CACHE`` (default ``~/.cache/megadata/msc``). A client without
        ``get_posix_path`` has no local objects; from one without ``info`` the object is
        read whole at every call and its copy named after its content."""
        client, key = self._client()
        get_posix_path = getattr(client, "get_posix_path", None)
        if get_posix_path is not None:
            posix = self._call("finding its path", get_posix_path, key)
            if posix and os.path.isfile(posix):
                return posix
        info = self._info()
        data = None
        if info is None:
            data = self.read(0, self._probed_size())
            size, stamp = len(data), hashlib.sha256(data).hexdigest()
        else:
            found = self._call("reading its metadata", info, key)
            size = int(found.content_length)
            stamp = f"{size}-{found.etag or found.last_modified}"
        directory = os.environ.get(CACHE_ENV) or os.path.join(
            os.path.expanduser("~"), ".cache", "megadata", "msc"
        )
        name = hashlib.sha256(f"{self.path}\0{stamp}".encode()).hexdigest()[:40] + ".bin"
        path = os.path.join(directory, name)
        if os.path.isfile(path) and os.path.getsize(path) == size:
            return path
        os.makedirs(directory, exist_ok=True)
        temporary.remove_stale(directory, [name])
        if data is None:
            data = self.read(0, size)
        write_atomically(path, lambda stream: stream.write(data))
        return path

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False)

    def __getstate__(self) -> dict:
        return {"path": self.path}

    def __setstate__(self, state: dict) -> None:
        type(self).__init__(self, state["path"])

    def __repr__(self) -> str:
        return f"MSCSource({self.path!r})"


def open_source(url: str) -> MSCSource:
    """The ``megadata.storage`` entry point for ``msc://``."""
    _client_module()  # a clear error when the package is missing
    return MSCSource(url)
