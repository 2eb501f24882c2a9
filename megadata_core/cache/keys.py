"""What identifies a GPT index in the cache key: the split's document ids and the corpus.

The corpus is identified by its content, never its path: the .idx size and header fields
plus sampled sha256 digests of the .idx arrays (lengths, pointers, document boundaries),
a fixed ~768 KiB read whatever the corpus size. Pointers are cumulative sums of lengths,
so a changed document length shifts every later pointer and shows in the sampled pointer
bytes even when the length itself is not sampled.
"""

from __future__ import annotations

import weakref

import numpy as np

from megadata_core.cache.hashing import full_digest, sampled_digest
from megadata_core.errors import DataError
from megadata_core.format import idx_layout

_CHUNK = 1 << 16  # ids compared per step: the slices and the flags stay in L2


def _consecutive(ids: np.ndarray) -> bool:
    """Whether ``ids[i] == ids[0] + i`` for every i (1-D, non-empty): the span is
    ``len - 1`` and every step is positive (strictly increasing integers over that span
    are consecutive). One comparison per pair, chunk by chunk, in the ids' own dtype: no
    int64 copy, no difference array."""
    size = ids.size
    if int(ids[-1]) - int(ids[0]) != size - 1:
        return False
    rising = np.empty(min(_CHUNK, size), dtype=np.bool_)
    for start in range(0, size - 1, _CHUNK):
        chunk = ids[start : start + _CHUNK + 1]
        pairs = len(chunk) - 1
        if not np.greater(chunk[1:], chunk[:-1], out=rising[:pairs]).all():
            return False
    return True


def _out_of_range(bad: int, count: int) -> DataError:
    return DataError(f"indices: document {bad} is out of range [0, {count})")


def document_ids(indexed, indices: object) -> tuple[np.ndarray | range, dict]:
    """The split's document ids, range-checked, and their description for the cache key:
    ``{"count", "range": [lo, hi]}`` for consecutive ids (Megatron's splits), else
    ``{"count", "sha256"}`` of the ids as int64 (exact, never sampled).

    ``indices`` is an integer array or a Python ``range``; a step-1 range is checked and
    described in O(1) and returned as is (the index build reads it as a range: no id
    array at all); an array is returned as given (no copy).
    """
    if isinstance(indices, range):
        if indices.step == 1 or len(indices) <= 1:
            span = range(indices.start, indices.start + len(indices))
            if not span:
                return span, {"count": 0}
            if span.start < 0 or span.stop > len(indexed):
                raise _out_of_range(span.start if span.start < 0 else span.stop - 1, len(indexed))
            return span, {"count": len(span), "range": [span.start, span.stop]}
        indices = np.arange(indices.start, indices.stop, indices.step)
    ids = np.asarray(indices)
    if ids.ndim != 1 or (ids.size and ids.dtype.kind not in "iu"):
        raise DataError(f"indices: expected a 1-D integer array, got {ids.dtype} {ids.shape}")
    if ids.size == 0:
        return ids.astype(np.int64), {"count": 0}
    first, last = int(ids[0]), int(ids[-1])
    consecutive = _consecutive(ids)
    low, high = (first, last) if consecutive else (int(ids.min()), int(ids.max()))
    if low < 0 or high >= len(indexed):
        raise _out_of_range(low if low < 0 else high, len(indexed))
    if consecutive:
        return ids, {"count": int(ids.size), "range": [first, last + 1]}
    return ids, {"count": int(ids.size), "sha256": full_digest(ids.astype("<i8"))}


#: data_identity per open corpus object: a blend reads each corpus for 2-3 splits and
#: describes each member twice (its own cache key, the blend's), ~0.1 ms each time.
_IDENTITIES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def data_identity(indexed) -> dict:
    """The corpus identity in a cache key: .idx size and header fields, plus sampled
    hashes of the .idx arrays (not the path). Pointers are cumulative, so a changed length
    shifts every later pointer and shows in the sampled pointer bytes. Computed once per
    corpus object (a fresh copy is returned each time)."""
    try:
        known = _IDENTITIES.get(indexed)
    except TypeError:  # not weak-referenceable: computed every time
        known = None
    if known is None:
        known = _data_identity(indexed)
        try:
            _IDENTITIES[indexed] = known
        except TypeError:
            pass
    return {**known, "idx_arrays_sampled_sha256": list(known["idx_arrays_sampled_sha256"])}


def _data_identity(indexed) -> dict:
    count = len(indexed.sequence_lengths)
    boundaries = len(indexed.document_indices)
    multimodal = bool(indexed.multimodal)
    arrays = [indexed.sequence_lengths, indexed.sequence_pointers, indexed.document_indices]
    if multimodal:
        arrays.append(indexed.sequence_modes)
    digests = []
    for array in arrays:
        digests.append(sampled_digest(array))
        idx_layout.drop_mapped_pages(array)  # the sampled pages: not this process's RSS
    return {
        "idx_size": idx_layout.expected_idx_size(count, boundaries, multimodal),
        "dtype": np.dtype(indexed.dtype).str,
        "sequences": count,
        "document_boundaries": boundaries,
        "multimodal": multimodal,
        "bin_size": int(indexed.bin_size),
        "idx_arrays_sampled_sha256": digests,
    }


def corpus_identity(indexed) -> tuple[list | dict, bool]:
    """The corpus identity in a build bundle's key, and whether it is exact.

    Exact, ``["idx_sha256", digest, bin_size]``, when the whole .idx was read into
    memory (:meth:`IndexedDataset.open_deferred` of a small index): the digest covers
    every byte validation reads and the .bin size is the rest of what it checks, so an
    entry keyed by it was written after validating these very bytes. Otherwise the
    sampled :func:`data_identity` (not exact: the caller validates the corpus itself).
    """
    idx_sha256 = getattr(indexed, "idx_sha256", None)
    digest = idx_sha256() if idx_sha256 is not None else None
    if digest is not None:
        return ["idx_sha256", digest, int(indexed.bin_size)], True
    return data_identity(indexed), False
