"""What identifies a GPT index in the cache key: the split's document ids and the corpus.

The corpus is identified by its content, never its path: the .idx size and header fields
plus sampled sha256 digests of the .idx arrays (lengths, pointers, document boundaries),
a fixed ~768 KiB read whatever the corpus size. Pointers are cumulative sums of lengths,
so a changed document length shifts every later pointer and shows in the sampled pointer
bytes even when the length itself is not sampled.
"""

from __future__ import annotations

import numpy as np

from megadata_core.errors import DataError
from megadata_core.format import idx_layout
from megadata_core.indices.cache import full_digest, sampled_digest


def document_ids(indexed, indices: object) -> tuple[np.ndarray, dict]:
    """The split's document ids, range-checked, and their description for the cache key:
    ``{"count", "range": [lo, hi]}`` for consecutive ids (Megatron's splits), else
    ``{"count", "sha256"}`` of the ids as int64 (exact, never sampled)."""
    ids = np.asarray(indices)
    if ids.ndim != 1 or (ids.size and ids.dtype.kind not in "iu"):
        raise DataError(f"indices: expected a 1-D integer array, got {ids.dtype} {ids.shape}")
    if ids.size == 0:
        return ids.astype(np.int64), {"count": 0}
    first, last = int(ids[0]), int(ids[-1])
    consecutive = last - first == ids.size - 1 and (ids.size < 2 or not (np.diff(ids) != 1).any())
    low, high = (first, last) if consecutive else (int(ids.min()), int(ids.max()))
    if low < 0 or high >= len(indexed):
        bad = low if low < 0 else high
        raise DataError(f"indices: document {bad} is out of range [0, {len(indexed)})")
    if consecutive:
        return ids, {"count": int(ids.size), "range": [first, last + 1]}
    return ids, {"count": int(ids.size), "sha256": full_digest(ids.astype("<i8"))}


def data_identity(indexed) -> dict:
    """The corpus identity in a cache key: .idx size and header fields, plus sampled
    hashes of the .idx arrays (not the path). Pointers are cumulative, so a changed length
    shifts every later pointer and shows in the sampled pointer bytes."""
    count = len(indexed.sequence_lengths)
    boundaries = len(indexed.document_indices)
    multimodal = bool(indexed.multimodal)
    arrays = [indexed.sequence_lengths, indexed.sequence_pointers, indexed.document_indices]
    if multimodal:
        arrays.append(indexed.sequence_modes)
    return {
        "idx_size": idx_layout.expected_idx_size(count, boundaries, multimodal),
        "dtype": np.dtype(indexed.dtype).str,
        "sequences": count,
        "document_boundaries": boundaries,
        "multimodal": multimodal,
        "bin_size": int(indexed.bin_size),
        "idx_arrays_sampled_sha256": [sampled_digest(array) for array in arrays],
    }
