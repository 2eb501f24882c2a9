"""Hashes that name cache entries and identify their inputs.

A cache key is the sha256 of the canonical JSON of a *description* (every input of an
entry's arrays, see :mod:`.descriptions`). Long lists and arrays inside a description
are stored as digests: :func:`json_digest`, :func:`array_digest`; a corpus too large to
read at every start is identified by :func:`sampled_digest` of its .idx arrays.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping

import numpy as np

from megadata_core.cache.npy_files import byte_view
from megadata_core.errors import DataError

SAMPLE_CHUNKS = 64
SAMPLE_CHUNK_BYTES = 4096


def canonical_json(description: Mapping) -> str:
    """The description as canonical JSON (sorted keys, no spaces); DataError if a value
    is not JSON (NaN included)."""
    try:
        return json.dumps(description, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as error:
        raise DataError(f"description: not JSON-serializable ({error})") from None


def text_key(canonical: str) -> str:
    """sha256 (hex) of a description's canonical JSON: its cache key."""
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def description_key(description: Mapping) -> str:
    """The cache key: sha256 (hex, 64 characters) of :func:`canonical_json`."""
    return text_key(canonical_json(description))


def json_digest(value: object) -> dict:
    """``{"sha256": ...}`` of a JSON value's :func:`canonical_json` (a long list in a
    description, stored elsewhere)."""
    return {"sha256": text_key(canonical_json({"value": value}))}


def array_digest(array: np.ndarray) -> dict:
    """``{"dtype", "shape", "sha256"}`` of an array's bytes (C order)."""
    array = np.ascontiguousarray(array)
    return {
        "dtype": array.dtype.str,
        "shape": list(array.shape),
        # numpy types ndarray.__buffer__ for Python 3.12+ only:
        "sha256": hashlib.sha256(byte_view(array)).hexdigest(),  # type: ignore[arg-type]
    }


def sampled_digest(array: np.ndarray) -> str:
    """sha256 of the byte size and a fixed sample of an array's bytes: all of them up to
    ``SAMPLE_CHUNKS * SAMPLE_CHUNK_BYTES`` (256 KiB), else ``SAMPLE_CHUNKS`` chunks of
    ``SAMPLE_CHUNK_BYTES`` at evenly spaced offsets (first and last chunk included).

    Reads at most 256 KiB, so it is cheap on memory-mapped arrays of any size.
    """
    raw = byte_view(array)
    digest = hashlib.sha256(str(raw.size).encode("ascii"))
    if raw.size <= SAMPLE_CHUNKS * SAMPLE_CHUNK_BYTES:
        # numpy types ndarray.__buffer__ for Python 3.12+ only:
        digest.update(raw)  # type: ignore[arg-type]
    else:
        span = raw.size - SAMPLE_CHUNK_BYTES
        for k in range(SAMPLE_CHUNKS):  # fixed trip count, independent of the size
            start = span * k // (SAMPLE_CHUNKS - 1)
            # numpy types ndarray.__buffer__ for Python 3.12+ only:
            digest.update(raw[start : start + SAMPLE_CHUNK_BYTES])  # type: ignore[arg-type]
    return digest.hexdigest()


def full_digest(array: np.ndarray) -> str:
    """sha256 of all the bytes of an array (C order)."""
    # numpy types ndarray.__buffer__ for Python 3.12+ only:
    return hashlib.sha256(byte_view(array)).hexdigest()  # type: ignore[arg-type]
