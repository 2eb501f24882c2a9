"""The index arrays of one GPT dataset, in one call: given, loaded from the cache, or built.

:func:`gpt_arrays` is what :class:`~megadata_core.datasets.gpt_dataset.GPTDataset` calls
once to get its arrays: their names and their build are the packing mode's
(:meth:`megadata_core.modes.Packing.array_names`, :meth:`~megadata_core.modes.Packing.build`;
Megatron's concat arrays for ``shuffle="megatron"``, the valid split honouring
``drop_last_partial_validation_sequence``). With
``config.path_to_cache`` they go through the on-disk cache
(:mod:`megadata_core.cache.entries`), keyed by :func:`describe`: cached arrays are
memory-mapped and name their file (see :mod:`megadata_core.datasets.reading`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import numpy as np

from megadata_core.cache.entries import entry_paths, load_or_build
from megadata_core.cache.keys import data_identity, description_key, gpt_description
from megadata_core.cache.spill import spill_arrays
from megadata_core.datasets.config import GPTDataConfig
from megadata_core.errors import DataError
from megadata_core.indices import tokens_per_epoch
from megadata_core.indices.arrays import SCRATCH_PREFIX, Allocate, in_memory
from megadata_core.indices.feistel import ALGORITHM as FEISTEL_ALGORITHM
from megadata_core.indices.feistel import ROUNDS as FEISTEL_ROUNDS

#: The Feistel network's identity, in the descriptions of its arrays.
FEISTEL = (FEISTEL_ROUNDS, FEISTEL_ALGORITHM)


def config_array_names(config: GPTDataConfig) -> tuple[str, ...]:
    """The arrays a dataset of this config stores (its packing's, for its shuffle)."""
    return config.packing_mode.array_names(config.shuffle_mode)


def drops_last(config: GPTDataConfig, split: str) -> bool:
    """Whether a last partial sample is dropped: always, but for the valid split when
    ``drop_last_partial_validation_sequence`` is False (as Megatron)."""
    return config.drop_last_partial_validation_sequence if split == "valid" else True


def no_documents(split: str) -> DataError:
    """The error of a split without documents (asked for samples)."""
    return DataError(f"indices: no documents in the {split} split")


def no_tokens(split: str, documents: int) -> DataError:
    """The error of a split whose documents hold no tokens."""
    return DataError(f"indices: the {documents} documents of the {split} split hold no tokens")


def describe(
    config: GPTDataConfig, indexed, documents: dict, num_samples: int | None, split: str
) -> dict:
    """Every input of the index arrays (the cache key is its sha256); ``documents`` is
    the ids' description (:func:`megadata_core.cache.keys.document_ids`)."""
    return gpt_description(
        config, split, documents, num_samples, data_identity(indexed),
        drop_last=drops_last(config, split),
    )


def build_arrays(
    config: GPTDataConfig,
    indexed,
    ids: np.ndarray | range,
    num_samples: int | None,
    split: str,
    empty: Allocate = in_memory,
) -> dict[str, np.ndarray]:
    """The arrays of :func:`config_array_names`, built from the split's ids (a range for
    consecutive ids: no id array is read, gathered or tiled) into arrays from ``empty``
    (memory, or the cache's spill files)."""
    lengths = indexed.sequence_lengths
    tokens = tokens_per_epoch(lengths, ids)
    if tokens == 0:
        raise no_tokens(split, len(ids))
    return config.packing_mode.build(
        lengths, ids, config, num_samples, drops_last(config, split), tokens, empty
    )


def gpt_arrays(
    config: GPTDataConfig,
    indexed,
    ids: np.ndarray | range,
    documents: dict,
    num_samples: int | None,
    split: str,
    *,
    given: Mapping[str, np.ndarray] | None = None,
) -> dict[str, np.ndarray]:
    """The index arrays of one GPT dataset (names: :func:`config_array_names`).

    Args:
        config: the dataset's :class:`GPTDataConfig`.
        indexed: the corpus (an :class:`megadata_core.IndexedDataset` or mock data).
        ids: the split's document ids, checked (``range(lo, hi)`` or an int [D] array).
        documents: their description (``{"count", "range"}`` or ``{"count", "sha256"}``).
        num_samples: samples requested, or None for one epoch.
        split: ``"train"``, ``"valid"`` or ``"test"``.
        given: precomputed arrays (e.g. from the builder's cache bundle, keyed by every
            input above): used as given after checking their names; nothing is built.

    Returns:
        ``{name: array}``: built in memory, or memory-mapped read-only from the cache.
    """
    names = config_array_names(config)
    if given is not None:
        given = dict(given)
        if sorted(given) != sorted(names):
            raise DataError(f"arrays: got {sorted(given)}, expected {sorted(names)}")
        return given
    if len(ids) == 0:
        if num_samples == 0:
            return config.packing_mode.empty_arrays(config.shuffle_mode)
        raise no_documents(split)
    span = documents.get("range")
    build_ids = range(*span) if span is not None else ids
    directory = config.path_to_cache
    description = {}  # no key is needed (nor the corpus sampled) without a cache
    if directory is not None:
        description = describe(config, indexed, documents, num_samples, split)
    files = {}
    if directory is not None:  # arrays are built into temporaries of the entry's files
        paths = entry_paths(directory, description_key(description), split, names)
        files = {name: os.path.basename(paths[name]) for name in names}
    with spill_arrays(directory, files, working_prefix=SCRATCH_PREFIX) as empty:
        return load_or_build(
            directory,
            description,
            split,
            lambda: build_arrays(config, indexed, build_ids, num_samples, split, empty),
            names=names,
        )
