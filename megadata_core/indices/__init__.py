"""Floor 2: pure functions over numpy arrays that order documents and samples.

Megatron-exact (megatron-core 0.16.1, bit-identical values): :func:`tokens_per_epoch`,
:func:`num_epochs`, :func:`separate_final_epoch`, :func:`document_index`,
:func:`sample_index`, :func:`shuffle_index`, and :func:`gpt_indices` for the three at
once. Lazy, O(1)-memory alternative: the Feistel bijection (:class:`FeistelShuffle`).
"""

from megadata_core.indices.document_order import document_index
from megadata_core.indices.epochs import (
    num_epochs,
    samples_in_epochs,
    separate_final_epoch,
    tokens_per_epoch,
)
from megadata_core.indices.feistel import (
    FeistelShuffle,
    epoch_key,
    feistel_document_index,
    feistel_document_order,
    feistel_invert,
    feistel_permute,
)
from megadata_core.indices.gpt import gpt_indices
from megadata_core.indices.sample_boundaries import sample_index
from megadata_core.indices.sample_shuffle import shuffle_index

__all__ = [
    "FeistelShuffle",
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
    "tokens_per_epoch",
]
