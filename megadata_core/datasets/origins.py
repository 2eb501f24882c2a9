"""Where a dataset's index arrays came from, for errors met while reading a batch.

A value out of range met while reading (the range checks of :mod:`megadata_core.checks`)
is a DataError naming the array and its source: its cache file, the entry that held it
(a build bundle), or memory. The cache checks every byte on load, so such errors mean
indices that were wrong when written (or handed in through ``arrays=``), not damage on
disk.
"""

from __future__ import annotations

from collections.abc import Mapping

from megadata_core.errors import DataError

IN_MEMORY = "indices built in memory"


def origin(arrays: Mapping[str, object], name: str, entry: str | None) -> str:
    """Where index array ``name`` came from: its memory-mapped cache file, else
    ``entry`` (e.g. the build bundle that held it), else memory."""
    filename = getattr(arrays.get(name), "filename", None)
    if filename:
        return f"cache file {filename}"
    return entry or IN_MEMORY


def with_origin(error: DataError, arrays: Mapping[str, object], entry: str | None) -> DataError:
    """``error`` with the source of the index array its message starts with (unchanged
    when it names no index array)."""
    name = str(error).split(":", 1)[0]
    if name not in arrays:
        return error
    return DataError(f"{error} (in {origin(arrays, name, entry)})")
