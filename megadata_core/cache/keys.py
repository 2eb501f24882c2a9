"""What keys a cache entry: its description, the hash of it, the versions in it, and the
identities of its inputs.

A key is the sha256 of the canonical JSON of a *description*, one function per kind of
entry: every input of its arrays (Megatron's key misses ``add_extra_token_to_sequence``
and the data; ours must not) and nothing that does not change them (a path, a worker
count), so that equal inputs share an entry wherever they come from. Long lists and
arrays inside a description are stored as digests (:func:`json_digest`,
:func:`array_digest`). Changing what a description holds changes every key of its kind:
existing caches then miss (``tests/cache/test_keys_stable.py`` pins them). The config is
read by field (any object with :class:`~megadata_core.GPTDataConfig`'s fields): this
room sits below the datasets.

Inputs are identified by content, never by path: the split's document ids
(:func:`document_ids`) and the corpus (:func:`data_identity`: the .idx size and header
fields plus sampled sha256 digests of the .idx arrays, a fixed ~768 KiB read whatever
the corpus size; pointers are cumulative sums of lengths, so a changed document length
shifts every later pointer and shows in the sampled pointer bytes even when the length
itself is not sampled).

Every version of what megadata writes under ``path_to_cache`` is in the one table
below. A version is part of the description (so of the key) or of the record it
versions: bumping one makes the entries or records of the old version miss (they are
rebuilt, or read again, never served as if they were of this version). Bump the one
whose output changes, say why beside it, and expect ``tests/cache/test_keys_stable.py``
to fail until its table of keys is updated on purpose.
"""

from __future__ import annotations

import hashlib
import json
import weakref
from collections.abc import Mapping, Sequence

import numpy as np

from megadata_core.cache.npy_files import byte_view
from megadata_core.errors import DataError
from megadata_core.format import idx_layout

#: The entry format: a description record and one .npy file per array.
CACHE_FORMAT = "megadata-index-cache"
#: 3: a CRC-32 of each whole file, checked before use (2 checked sampled bytes only: an
#: entry of version 2 is rebuilt rather than served unverified).
CACHE_VERSION = 3
#: An entry's list of files verified whole, by file identity (unversioned: a list it
#: does not understand vouches for nothing).
VERIFIED_FORMAT = "megadata-verified-files"

#: A GPT dataset's index arrays (document, sample and shuffle index; Feistel's sample
#: index and split): bumped whenever an index algorithm changes its output.
INDEX_ALGORITHM_VERSION = 3
#: The best_fit index (in best_fit keys only: concat keys stay as they were).
PACKING_ALGORITHM_VERSION = 1
#: A blend's dataset_index / dataset_sample_index / dataset_counts.
BLEND_ALGORITHM_VERSION = 4
#: A blend schedule's dataset_index / dataset_sample_index / dataset_counts.
SCHEDULE_ALGORITHM_VERSION = 1
#: The build bundle (one entry per build with a blend). 2: per-prefix lists as digests.
BUNDLE_VERSION = 2
#: The blend record (every corpus of a blend in one file). 2: identities as an array,
#: prefixes as a digest.
BLEND_RECORD_VERSION = 2
#: A corpus's record of a full .idx validation; bumped whenever validation checks more
#: (older records then vouch for nothing).
CORPUS_RECORD_FORMAT = "megadata-validated-corpus"
CORPUS_RECORD_VERSION = 1
#: The Megatron drop-in's blend of mid-level datasets that are not GPT datasets.
MEGATRON_BLEND_VERSION = 1

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


def _sampled_digest(array: np.ndarray) -> str:
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
#: describes each member twice (its own cache key, the blend's).
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
        digests.append(_sampled_digest(array))
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


def gpt_description(
    config,
    split: str,
    documents: dict,
    num_samples: int | None,
    data: dict,
    *,
    drop_last: bool,
) -> dict:
    """A GPT dataset's index arrays.

    Args:
        config: the dataset's config (seed, sequence length, extra token, and what its
            shuffle and packing modes add: ``describe()``).
        split: ``"train"``, ``"valid"`` or ``"test"``.
        documents: the split's document ids, described (:func:`document_ids`).
        num_samples: samples requested, or None for one epoch.
        data: the corpus's identity (:func:`.keys.data_identity`).
        drop_last: whether a last partial sample is dropped.
    """
    description = {
        "kind": "megadata.GPTDataset",
        "algorithm": INDEX_ALGORITHM_VERSION,
        "split": split,
        "random_seed": config.random_seed,
        "sequence_length": config.sequence_length,
        "add_extra_token_to_sequence": config.add_extra_token_to_sequence,
        "num_samples": num_samples,
        "shuffle": config.shuffle_mode.name,
        "documents": documents,
        "data": data,
    }
    description.update(config.shuffle_mode.describe())
    description.update(config.packing_mode.describe(drop_last))
    return description


def blend_description(
    split: str, blend_order: str, weights: list, size: int | None, members: list[dict]
) -> dict:
    """A blend's dataset_index, dataset_sample_index and dataset_counts, over members
    described by their own descriptions."""
    return {
        "kind": "megadata.BlendedDataset",
        "algorithm": BLEND_ALGORITHM_VERSION,
        "split": split,
        "blend_order": blend_order,
        "weights": weights,
        "size": size,
        "datasets": members,
    }


def schedule_description(
    split: str, blend_order: str, starts: np.ndarray, weights: np.ndarray, size: int
) -> dict:
    """A blend schedule's dataset_index, dataset_sample_index and dataset_counts: the
    stages' starts (int64 [K]) and weights (float64 [K, n]), the order and the size are
    all their inputs (the members are not: their lengths are checked at every load)."""
    return {
        "kind": "megadata.BlendSchedule",
        "algorithm": SCHEDULE_ALGORITHM_VERSION,
        "blend_algorithm": BLEND_ALGORITHM_VERSION,
        "split": split,
        "blend_order": blend_order,
        "starts": array_digest(np.asarray(starts, dtype=np.int64)),
        "weights": array_digest(np.asarray(weights, dtype=np.float64)),
        "size": size,
    }


def bundle_description(
    config,
    *,
    in_memory_below: int,
    feistel: Sequence,
    corpora: list | None,
    jobs: list,
    recipes: list,
) -> dict:
    """A build bundle: the index arrays of a build's small members and blends.

    Args:
        config: the build's config.
        in_memory_below: the builder's bound below which a member is bundled.
        feistel: ``(rounds, algorithm)`` of the Feistel network.
        corpora: every corpus's identity, in prefix order (a digest of the list is
            kept: 10,000 prefixes would be ~5 MB of JSON to write, hash and read at every
            start; the list itself is in the blend record), or None (not known yet).
        jobs: the jobs' digest (corpus numbers, splits, samples, document fractions).
        recipes: per split, None or ``[kind, jobs digest, weights digest, size]``.
    """
    description = {
        "kind": "megadata.BuildBundle",
        "version": BUNDLE_VERSION,
        "gpt_algorithm": INDEX_ALGORITHM_VERSION,
        "blend_algorithm": BLEND_ALGORITHM_VERSION,
        "random_seed": config.random_seed,
        "sequence_length": config.sequence_length,
        "add_extra_token_to_sequence": config.add_extra_token_to_sequence,
        "drop_last_partial_validation_sequence": config.drop_last_partial_validation_sequence,
        "shuffle": config.shuffle_mode.name,
        "feistel": list(feistel),
        "blend_order": config.blend_order_mode.name,
        "in_memory_below": in_memory_below,
        "corpora": None if corpora is None else json_digest(corpora),
        "jobs": jobs,
        "recipes": recipes,
    }
    packing = config.packing_mode.describe(True)
    if "packing" in packing:  # the packed key's values as a list (concat bundles: none)
        description["packing"] = list(packing.values())
    return description


def with_corpora(bundle: dict, corpora: list) -> dict:
    """A bundle's description (made with ``corpora=None``) with every corpus's identity."""
    return {**bundle, "corpora": json_digest(corpora)}


def blend_record_description(bundle: dict, prefixes: list[str]) -> dict:
    """A blend record: the bundle's description without the corpora's identities, plus
    the prefixes as given (the record maps paths to identities)."""
    build = {key: value for key, value in bundle.items() if key != "corpora"}
    return {
        "kind": "megadata.BlendRecord",
        "version": BLEND_RECORD_VERSION,
        "build": build,
        "prefixes": json_digest(list(prefixes)),
    }


def megatron_blend_description(unique_identifiers: dict) -> dict:
    """The Megatron drop-in's blend of datasets that are not GPT datasets, keyed by
    Megatron's own ``unique_identifiers`` of the blend."""
    return {
        "kind": "megadata.megatron_datasets.BlendedDataset",
        "version": MEGATRON_BLEND_VERSION,
        "megatron": unique_identifiers,
    }
