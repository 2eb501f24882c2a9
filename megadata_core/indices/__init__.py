"""Floor 2: pure functions over numpy arrays that order documents and samples.

May import ``errors``, ``checks`` and ``cores``, nothing else from the core: the indices see
arrays, never files (no ``open``, memory map, lock or rename: tests/test_layering.py
checks it). Where a large result lives is the caller's choice, through the allocation
protocol of :mod:`.arrays` (the cache passes one that spills to files,
:mod:`megadata_core.cache.spill`).

Megatron-exact (megatron-core 0.16.1, bit-identical values): :func:`tokens_per_epoch`,
:func:`num_epochs`, :func:`separate_final_epoch`, :func:`document_index`,
:func:`sample_index`, :func:`shuffle_index`, and :func:`gpt_indices` for the three at
once. Lazy, O(1)-memory alternative: the Feistel bijection (:class:`FeistelShuffle`; a GPT
dataset's Feistel-mode arrays and orders in :mod:`.gpt`).
Blending: :func:`megatron_blending_indices`, :func:`megatron_exhaustive_blending_indices`
(Megatron-exact) and :func:`balanced_blending_indices` (every dataset within one sample
of its share in every prefix), several of them at once (:func:`balanced_blending_stages`)
and a schedule's stages of them (:func:`schedule_blending_indices`, each dataset on one
cursor). Splits:
:func:`parse_split`, :func:`split_matrix`, :func:`document_ranges`, and blend sizing
(:func:`normalize_weights`, :func:`samples_per_dataset`), as Megatron's builder.
"""

from megadata_core.indices.blending import (
    balanced_blending_indices,
    balanced_blending_stages,
    megatron_blending_indices,
    megatron_exhaustive_blending_indices,
)
from megadata_core.indices.feistel import (
    FeistelShuffle,
    epoch_key,
    feistel_document_index,
    feistel_document_order,
    feistel_invert,
    feistel_permute,
)
from megadata_core.indices.gpt import (
    document_index,
    gpt_indices,
    num_epochs,
    separate_final_epoch,
    shuffle_index,
    tokens_per_epoch,
)
from megadata_core.indices.sample_boundaries import sample_index, samples_in_epochs
from megadata_core.indices.schedule import epoch_seed, schedule_blending_indices
from megadata_core.indices.splits import (
    document_ranges,
    normalize_weights,
    parse_split,
    samples_per_dataset,
    split_matrix,
)

__all__ = [
    "FeistelShuffle",
    "balanced_blending_indices",
    "balanced_blending_stages",
    "megatron_blending_indices",
    "megatron_exhaustive_blending_indices",
    "document_index",
    "epoch_key",
    "feistel_document_index",
    "feistel_document_order",
    "feistel_invert",
    "feistel_permute",
    "gpt_indices",
    "num_epochs",
    "sample_index",
    "samples_in_epochs",
    "separate_final_epoch",
    "shuffle_index",
    "epoch_seed",
    "schedule_blending_indices",
    "tokens_per_epoch",
    "document_ranges",
    "normalize_weights",
    "parse_split",
    "samples_per_dataset",
    "split_matrix",
]
