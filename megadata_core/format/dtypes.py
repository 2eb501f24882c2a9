"""Token dtypes of the MMIDIDX format and their one-byte codes."""

from __future__ import annotations

import numpy as np

from megadata_core.errors import DataError

DTYPE_BY_CODE: dict[int, np.dtype] = {
    1: np.dtype(np.uint8),
    2: np.dtype(np.int8),
    3: np.dtype(np.int16),
    4: np.dtype(np.int32),
    5: np.dtype(np.int64),
    6: np.dtype(np.float64),
    7: np.dtype(np.float32),
    8: np.dtype(np.uint16),
}
CODE_BY_DTYPE: dict[np.dtype, int] = {dtype: code for code, dtype in DTYPE_BY_CODE.items()}


def code_of(dtype: np.typing.DTypeLike, *, field: str = "dtype") -> int:
    """The MMIDIDX code of a numpy dtype; DataError if the format cannot store it."""
    try:
        normalized = np.dtype(dtype)
    except TypeError as error:
        raise DataError(f"{field}: {dtype!r} is not a numpy dtype") from error
    normalized = normalized.newbyteorder("=")
    if normalized not in CODE_BY_DTYPE:
        names = ", ".join(str(d) for d in CODE_BY_DTYPE)
        raise DataError(f"{field}: {normalized} cannot be stored in a .bin (one of: {names})")
    return CODE_BY_DTYPE[normalized]


def dtype_of(code: int, *, path: str = "<idx>") -> np.dtype:
    """The numpy dtype for an MMIDIDX code; DataError naming the file if unknown."""
    if code not in DTYPE_BY_CODE:
        raise DataError(f"{path}: unknown dtype code {code} in header (known: 1..8)")
    return DTYPE_BY_CODE[code]


def optimal_dtype(vocab_size: int | None) -> type[np.number]:
    """Smallest token dtype for a vocabulary, as Megatron chooses it.

    uint16 when the vocabulary has fewer than 65500 entries, int32 otherwise
    (or when the size is unknown).
    """
    if vocab_size is not None and vocab_size < 65500:
        return np.uint16
    return np.int32
