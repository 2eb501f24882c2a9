"""Input validation shared by the index functions: every failure is a DataError."""

from __future__ import annotations

import numpy as np

from megadata_core.checks import check_int  # noqa: F401 (re-exported for the index functions)
from megadata_core.errors import DataError

INT32_MAX = int(np.iinfo(np.int32).max)


def check_int_array(field: str, values: object) -> np.ndarray:
    """Return ``values`` as a 1-D integer ndarray (no copy when it already is one; a
    Python ``range`` becomes ``np.arange``, never a Python-level iteration)."""
    if isinstance(values, range):
        return np.arange(values.start, values.stop, values.step, dtype=np.int64)
    array = np.asarray(values)
    if array.ndim != 1:
        raise DataError(f"{field}: expected a 1-D array, got shape {array.shape}")
    if array.size == 0 and array.dtype.kind == "f":
        array = array.astype(np.int64)
    if array.dtype.kind not in "iu":
        raise DataError(f"{field}: expected an integer array, got dtype {array.dtype}")
    return array


def check_lengths(field: str, values: object) -> np.ndarray:
    """A 1-D array of non-negative sequence lengths."""
    lengths = check_int_array(field, values)
    if lengths.size and int(lengths.min()) < 0:
        raise DataError(f"{field}: negative length {int(lengths.min())}")
    return lengths


def check_ids(field: str, ids: object, bound: int) -> np.ndarray:
    """A 1-D array of ids, each in ``[0, bound)``."""
    array = check_int_array(field, ids)
    if array.size:
        low, high = int(array.min()), int(array.max())
        if low < 0 or high >= bound:
            bad = low if low < 0 else high
            raise DataError(f"{field}: id {bad} is out of range [0, {bound})")
    return array


def id_range(field: str, ids: object, bound: int) -> range | None:
    """``ids`` as a step-1 ``range`` whose ids lie in ``[0, bound)`` (checked in O(1)),
    when ``ids`` is a Python ``range`` of consecutive ids (Megatron's splits); None for
    anything else (arrays go through :func:`check_ids`). Same errors as check_ids."""
    if not isinstance(ids, range) or (ids.step != 1 and len(ids) > 1):
        return None
    span = range(ids.start, ids.start + len(ids))
    if span and (span.start < 0 or span.stop > bound):
        bad = span.start if span.start < 0 else span.stop - 1
        raise DataError(f"{field}: id {bad} is out of range [0, {bound})")
    return span


def narrow_int(high: int) -> type:
    """``np.int32`` when values up to ``high`` fit it, else ``np.int64``."""
    return np.int32 if high <= INT32_MAX else np.int64
