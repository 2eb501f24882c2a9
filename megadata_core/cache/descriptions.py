"""The descriptions that key every cache entry: every input of its arrays, as JSON.

One function per kind of entry; the key is the sha256 of the canonical JSON
(:mod:`.hashing`), and every version in it comes from :mod:`.versions`. A description
must hold everything that changes the arrays (Megatron's key misses
``add_extra_token_to_sequence`` and the data; ours must not) and nothing that does not
(a path, a worker count), so that equal inputs share an entry wherever they come from.
Changing what a description holds changes every key of its kind: existing caches then
miss (``tests/cache/test_keys_stable.py`` pins them).

The config is read by field (any object with :class:`~megadata_core.GPTDataConfig`'s
fields): this room sits below the datasets.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from megadata_core.cache.hashing import array_digest, json_digest
from megadata_core.cache.versions import (
    BLEND_ALGORITHM_VERSION,
    BLEND_RECORD_VERSION,
    BUNDLE_VERSION,
    INDEX_ALGORITHM_VERSION,
    MEGATRON_BLEND_VERSION,
    SCHEDULE_ALGORITHM_VERSION,
)


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
        documents: the split's document ids, described (:func:`.keys.document_ids`).
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
