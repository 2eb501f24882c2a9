"""Floor 0: argument checks shared by every floor; each failure is a DataError naming the field."""

from __future__ import annotations

import operator

import numpy as np

from megadata_core.errors import DataError


def check_int(field: str, value: object, minimum: int | None = None) -> int:
    """``value`` as a Python int (bools and floats refused), at least ``minimum``."""
    if isinstance(value, (bool, np.bool_, float, np.floating)):
        raise DataError(f"{field}: {value!r} is not an integer")
    try:
        number = operator.index(value)
    except TypeError:
        raise DataError(f"{field}: {value!r} is not an integer") from None
    if minimum is not None and number < minimum:
        raise DataError(f"{field}: {number} must be >= {minimum}")
    return number
