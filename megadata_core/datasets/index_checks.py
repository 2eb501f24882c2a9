"""Read-time range checks of index arrays: a value out of range met while reading a batch
is a DataError naming the array and where it came from (its cache file, the build
bundle, or memory), never an IndexError or a negative value counted from the end.

The checks cost next to nothing per batch (the gathers index with unsigned views and
turn an IndexError into a DataError; a blend compares the few values a batch touches):
the cache checks every byte on load, so these catch indices that were wrong when
written (or handed in through ``arrays=``), not damage on disk.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from megadata_core.errors import DataError

IN_MEMORY = "indices built in memory"


def origin(arrays: Mapping[str, object], name: str, entry: str | None) -> str:
    """Where index array ``name`` came from: its memory-mapped cache file, else
    ``entry`` (e.g. the build bundle that held it), else memory."""
    filename = getattr(arrays.get(name), "filename", None)
    if filename:
        return f"cache file {filename}"
    return entry or IN_MEMORY


def out_of_range(
    name: str, what: str, value: int, high: int, where: str | None = None
) -> DataError:
    """``name: what value is out of range [0, high) (in where)``; no ``(in ...)`` when
    ``where`` is None (the caller adds it, see :func:`with_origin`)."""
    suffix = "" if where is None else f" (in {where})"
    return DataError(f"{name}: {what} {value} is out of range [0, {high}){suffix}")


_UNSIGNED = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def unsigned(values: np.ndarray) -> np.ndarray:
    """A signed integer array as the unsigned view of its bytes: negative values become
    huge, so indexing or comparing with them fails as a value too large does."""
    if values.dtype.kind != "i":
        return values
    return values.view(_UNSIGNED[values.dtype.itemsize])


def first_outside(values: np.ndarray, high: int | np.ndarray) -> int | None:
    """The first value outside ``[0, high)`` (``high`` a bound per value or one for
    all), or None."""
    bad = (values < 0) | (values >= high)
    if not bad.any():
        return None
    return int(values[int(np.argmax(bad))])


def with_origin(error: DataError, arrays: Mapping[str, object], entry: str | None) -> DataError:
    """``error`` with the source of the index array its message starts with (unchanged
    when it names no index array)."""
    name = str(error).split(":", 1)[0]
    if name not in arrays:
        return error
    return DataError(f"{error} (in {origin(arrays, name, entry)})")
