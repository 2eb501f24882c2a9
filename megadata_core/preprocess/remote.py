"""Inputs named by URL (``s3://``, ``gs://``, ...): a seekable file over a byte source.

The byte source comes from the format's scheme registry (``adapters/storage/tensorstore_bins.py``
fills it for s3, gs and http(s) with the tensorstore extra). Every read is a ranged
request: planning a plain ``.jsonl`` reads one buffer per cut, a task reads its own
byte range, a ``.gz``/``.zst`` file streams whole, and pyarrow reads a parquet file's
footer and the column chunks of its row groups through :class:`RangedFile`.

An object's identity (for the plan's fingerprint) is ``[url, size, generation]``: the
generation is the store's version stamp (S3 ETag, GCS generation; hex), read with one
zero-length request, since objects have no modification time to stat. A size may cost
about ``2 log2(size)`` one-byte probes (TensorStore has no HEAD), so sizes are kept per
process for each (url, generation): the object under a generation never changes.
"""

from __future__ import annotations

import concurrent.futures
import io
import threading
from typing import BinaryIO, cast

from megadata_core.errors import DataError
from megadata_core.format.sources import ByteSource, is_local, open_source
from megadata_core.preprocess.threads import shared_pool

_BUFFER_SIZE = 4 << 20  # bytes per ranged request when reading lines
_READ_AHEAD_THREADS = 4  # ranges fetched ahead at once in a process (one per open file at most)

_sizes: dict[tuple[str, str | None], int] = {}
_sizes_lock = threading.Lock()


def is_remote(path: str) -> bool:
    """True for a URL that a registered byte source reads (not a local path or file://)."""
    return "://" in path and not is_local(path)


def _generation(source: ByteSource) -> str | None:
    stamp = getattr(source, "generation", None)
    return None if stamp is None else stamp()


def _stat(source: ByteSource) -> tuple[int, str | None]:
    generation = _generation(source)
    key = (source.path, generation)
    with _sizes_lock:
        size = _sizes.get(key) if generation is not None else None
    if size is None:
        size = int(source.size())
        if generation is not None:
            with _sizes_lock:
                _sizes[key] = size
    return size, generation


def remember_size(url: str, size: int, generation: str | None) -> None:
    """Record an object's size (from ``remote_identity`` in another process), so that
    opening it here sends no size probes; a size is only ever kept under its generation."""
    if generation is not None:
        with _sizes_lock:
            _sizes[(url, generation)] = int(size)


def bound_reads(stream: BinaryIO, stop: int) -> None:
    """Tell a stream of :func:`open_remote` that no byte at or past ``stop`` is wanted: its
    reads and read-ahead end there (a task reading its byte range fetches nothing of the
    next task's). Any other stream is left as it is."""
    raw = getattr(stream, "raw", stream)
    if isinstance(raw, RangedFile):
        raw.stop = min(int(stop), raw.size())


def remote_identity(url: str) -> list:
    """``[url, size, generation]`` of an object (generation None when the store has none)."""
    size, generation = _stat(open_source(url))
    return [url, size, generation]


class RangedFile(io.RawIOBase):
    """A read-only, seekable file over a byte source: each ``readinto`` is one ranged read.

    ``read_ahead``: after each read, the next range of the same size is requested on a
    background thread, so that reading the lines of an object overlaps the network with
    the work on the previous buffer; a read elsewhere discards it (its error too), and its
    error, when taken, is raised as a direct read's would be. ``stop`` (the size unless
    :func:`bound_reads` lowers it): reads from before it end there."""

    def __init__(self, source: ByteSource, size: int, read_ahead: bool = False) -> None:
        self.source = source
        self.name = source.path
        self._size = int(size)
        self._position = 0
        self._read_ahead = read_ahead
        self._ahead: tuple[int, int, concurrent.futures.Future] | None = None
        self.stop = self._size

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def size(self) -> int:
        return self._size

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self._size}[whence]
        if base + offset < 0:
            raise OSError(f"{self.name}: seek to {base + offset}, before the start")
        self._position = base + offset
        return self._position

    def readinto(self, buffer) -> int:
        end = self.stop if self._position < self.stop else self._size
        count = min(len(buffer), end - self._position)
        if count <= 0:
            return 0
        ahead = self._take_ahead(self._position, count)
        data = self.source.read(self._position, count) if ahead is None else ahead
        memoryview(buffer).cast("B")[:count] = data
        self._position += count
        if self._read_ahead and self._position < end:
            following = min(count, end - self._position)
            self._ahead = (self._position, following,
                           shared_pool("megadata-read-ahead", _READ_AHEAD_THREADS).submit(
                               self.source.read, self._position, following))
        return count

    def _take_ahead(self, position: int, count: int) -> bytes | bytearray | memoryview | None:
        """The bytes read ahead when they are [position, position + count), else None."""
        ahead, self._ahead = self._ahead, None
        if ahead is None:
            return None
        start, length, future = ahead
        if (start, length) != (position, count):
            _discard(future)
            return None
        return future.result()

    def close(self) -> None:
        if not self.closed:
            if self._ahead is not None:
                _discard(self._ahead[2])
                self._ahead = None
            self.source.close()
        super().close()


def _discard(future: concurrent.futures.Future) -> None:
    """Drop a read ahead: cancelled, or waited for (its source may be closed next)."""
    if not future.cancel():
        concurrent.futures.wait([future])


def open_remote(url: str, buffer_size: int | None = _BUFFER_SIZE) -> BinaryIO:
    """The object at ``url`` as a binary file (buffered; raw :class:`RangedFile` when
    ``buffer_size`` is None, for readers such as pyarrow that ask for exact ranges)."""
    if not is_remote(url):
        raise DataError(f"{url}: not a URL of a remote object")
    source = open_source(url)
    size, _ = _stat(source)
    if buffer_size is None:
        # a binary file, though io.RawIOBase is no typing.BinaryIO:
        return cast(BinaryIO, RangedFile(source, size))
    return io.BufferedReader(RangedFile(source, size, read_ahead=True), buffer_size=buffer_size)
