"""Writing a file whole or not at all: a temporary of the writer, then ``os.replace``."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from typing import BinaryIO

from megadata_core.files import temporary


def write_atomically(
    path: str, write: Callable[[BinaryIO], object], *, durable: bool = False,
    clean: bool = True,
) -> None:
    """``write(stream)`` into a temporary file next to ``path``, renamed onto it.

    The rename is atomic for every running process: readers see the old file or the
    whole new one. With ``durable`` the data is fsync'ed before the rename (a record
    that must survive a crash); without, a file torn by a crash must be caught by its
    reader (the index cache checks a CRC of every file). Temporaries of ``path`` that
    dead writers on this host left behind are removed first
    (:func:`megadata_core.files.temporary.remove_stale`); this call's own is removed
    when ``write`` raises. A writer of many files in one directory passes ``clean=False``
    and removes the stale temporaries of all of them once (one scan of the directory
    instead of one per file).
    """
    directory, name = os.path.split(path)
    directory = directory or "."
    if clean:
        temporary.remove_stale(directory, [name])
    handle, temporary_path = temporary.create_file(directory, name)
    try:
        with os.fdopen(handle, "wb") as stream:
            write(stream)
            if durable:
                stream.flush()
                os.fsync(stream.fileno())
        os.replace(temporary_path, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary_path)
