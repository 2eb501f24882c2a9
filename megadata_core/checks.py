"""Floor 0: argument checks shared by every floor; each failure is a DataError naming the
field (or the index array) and the value.

Scalars (:func:`check_int`), integer arrays, lengths and ids (the index functions'
inputs), and the read-time range checks of index values (:func:`unsigned`,
:func:`first_outside`, :func:`out_of_range`).
"""

from __future__ import annotations

import operator
from typing import SupportsIndex, cast

import numpy as np

from megadata_core.errors import DataError


def position_in(index: int, size: int, where: str) -> int:
    """``index`` in ``[0, size)``, a negative one counted from the end (as for
    sequences); an IndexError saying ``where`` otherwise."""
    if index < 0:
        index += size
    if not 0 <= index < size:
        raise IndexError(f"{where} out of range [0, {size})")
    return index


def check_int(field: str, value: object, minimum: int | None = None) -> int:
    """``value`` as a Python int (bools and floats refused), at least ``minimum``."""
    if isinstance(value, (bool, np.bool_, float, np.floating)):
        raise DataError(f"{field}: {value!r} is not an integer")
    try:
        number = operator.index(cast(SupportsIndex, value))  # a TypeError if it is not
    except TypeError:
        raise DataError(f"{field}: {value!r} is not an integer") from None
    if minimum is not None and number < minimum:
        raise DataError(f"{field}: {number} must be >= {minimum}")
    return number


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


#: Megatron's count suffixes (``--step-batch-size-schedule`` thresholds: "250B").
_COUNT_SUFFIXES = {"K": 10**3, "M": 10**6, "B": 10**9, "T": 10**12}


def megatron_count(text: str) -> int:
    """A count as megatron-core reads one: strip, upper-case, an optional K/M/B/T suffix,
    then ``int(float(rest) * multiplier)``. ValueError / OverflowError for what is not a
    finite number (the callers name the field)."""
    value = text.strip().upper()
    multiplier = _COUNT_SUFFIXES.get(value[-1:], 1)
    if multiplier != 1:
        value = value[:-1]
    return int(float(value) * multiplier)
