"""Byte sources: where the bytes of a .bin/.idx come from.

A byte source answers ``size()`` and ``read(offset, length)``. Local paths and
``file://`` URLs are built in; other URL schemes (``s3://``, ``gs://``, ...) are
looked up in a registry that adapters fill, either by calling
:func:`register_scheme` or through the entry-point group ``megadata.storage``
(each entry point is named after a scheme and loads a factory
``factory(url: str) -> ByteSource``).

Remote sources may also offer, and readers use when present:

* ``read_ranges(offsets, lengths)``: many ranges at once (one list of buffers in the
  caller's order), so a source can issue them together and coalesce neighbours;
* ``local_copy()``: the path of a local file holding the whole object (fetched once
  and cached), which readers memory-map instead of reading it into memory;
* ``check_size(minimum)``: confirm the object holds at least ``minimum`` bytes and
  return its size as far as known, for stores where an exact size costs requests.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from importlib import metadata
from typing import Protocol, runtime_checkable

from megadata_core.errors import DataError

ENTRY_POINT_GROUP = "megadata.storage"

# Which extra provides a scheme, for the error message when none is installed.
_EXTRA_FOR_SCHEME = {
    "s3": "tensorstore",
    "gs": "tensorstore",
    "gcs": "tensorstore",
    "http": "tensorstore",
    "https": "tensorstore",
    "msc": "msc",
}


@runtime_checkable
class ByteSource(Protocol):
    """Random access to the bytes of one object."""

    path: str

    def size(self) -> int:
        """Total number of bytes."""

    def read(self, offset: int, length: int) -> bytes | bytearray | memoryview:
        """Exactly ``length`` bytes starting at ``offset``."""

    def close(self) -> None:
        """Release handles; the source may be reopened lazily afterwards."""


SourceFactory = Callable[[str], ByteSource]

_registry: dict[str, SourceFactory] = {}
_registry_lock = threading.Lock()


def split_scheme(path: str) -> tuple[str | None, str]:
    """``("s3", "bucket/key")`` for ``s3://bucket/key``; ``(None, path)`` for plain paths."""
    head, sep, rest = path.partition("://")
    if sep and head and head.replace("+", "").replace("-", "").replace(".", "").isalnum():
        return head.lower(), rest
    return None, path


def is_local(path: str) -> bool:
    """True for plain paths and ``file://`` URLs."""
    scheme, _ = split_scheme(path)
    return scheme in (None, "file")


def local_path(path: str) -> str:
    """The filesystem path of a plain path or ``file://`` URL."""
    scheme, rest = split_scheme(path)
    if scheme == "file":
        return rest if rest.startswith("/") else "/" + rest
    return path


def register_scheme(scheme: str, factory: SourceFactory) -> None:
    """Make ``scheme://...`` paths open through ``factory``."""
    with _registry_lock:
        _registry[scheme.lower()] = factory


def has_scheme(scheme: str) -> bool:
    """Whether ``scheme://`` paths have a byte source (registered, or an entry point)."""
    scheme = scheme.lower()
    with _registry_lock:
        if scheme in _registry:
            return True
    return any(entry_point.name.lower() == scheme
               for entry_point in metadata.entry_points(group=ENTRY_POINT_GROUP))


def _factory_for(scheme: str, path: str) -> SourceFactory:
    with _registry_lock:
        if scheme in _registry:
            return _registry[scheme]
    for entry_point in metadata.entry_points(group=ENTRY_POINT_GROUP):
        if entry_point.name.lower() == scheme:
            factory = entry_point.load()
            register_scheme(scheme, factory)
            return factory
    extra = _EXTRA_FOR_SCHEME.get(scheme)
    hint = (
        f"install it with: pip install 'megadata-core[{extra}]'"
        if extra
        else f"install a package that provides the '{ENTRY_POINT_GROUP}' entry point '{scheme}'"
    )
    raise DataError(f"{path}: no byte source for URL scheme '{scheme}://'; {hint}")


class LocalFileSource:
    """A local file read with ``os.pread`` (thread-safe, no shared file position)."""

    def __init__(self, path: str) -> None:
        self.path = local_path(path)
        self._fd: int | None = None
        self._size: int | None = None

    def _open(self) -> int:
        if self._fd is None:
            try:
                self._fd = os.open(self.path, os.O_RDONLY)
            except FileNotFoundError as error:
                raise DataError(f"{self.path}: file not found") from error
            except IsADirectoryError as error:
                raise DataError(f"{self.path}: is a directory, not a file") from error
            self._size = os.fstat(self._fd).st_size
        return self._fd

    @property
    def is_open(self) -> bool:
        """Whether the descriptor is open (it opens at the first ``size`` or ``read``)."""
        return self._fd is not None

    def size(self) -> int:
        self._open()
        assert self._size is not None  # taken when the descriptor opened
        return int(self._size)

    def read(self, offset: int, length: int) -> bytes:
        fd = self._open()
        data = os.pread(fd, length, offset)
        while len(data) < length:  # pread may return short reads on some filesystems
            more = os.pread(fd, length - len(data), offset + len(data))
            if not more:
                raise DataError(
                    f"{self.path}: wanted {length} bytes at offset {offset}, "
                    f"the file ends after {len(data)}"
                )
            data += more
        return data

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __getstate__(self) -> dict:
        return {"path": self.path}

    def __setstate__(self, state: dict) -> None:
        type(self).__init__(self, state["path"])

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown
            pass


def open_source(path: str) -> ByteSource:
    """A byte source for a local path, ``file://`` URL, or a registered scheme."""
    scheme, _ = split_scheme(path)
    if scheme in (None, "file"):
        return LocalFileSource(path)
    return _factory_for(scheme, path)(path)
