"""The GPT indices of ``shuffle="feistel"``: what is stored, and the orders read from it.

Feistel mode stores only the sample index and ``feistel_split`` = ``[first sample of
the final epoch, epochs]`` (:func:`feistel_gpt_indices`); the document order and the
sample order are keyed bijections (:mod:`megadata_core.indices.feistel`) computed on
demand (:func:`feistel_orders`). Megatron's two-range shuffle is kept: when the final
epoch is separate, its samples are permuted apart from the earlier epochs'. Not
Megatron-compatible (the Megatron-exact indices are :func:`megadata_core.indices.gpt_indices`).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from megadata_core.indices.allocate import Allocate, in_memory
from megadata_core.indices.epochs import num_epochs, samples_in_epochs, separate_final_epoch
from megadata_core.indices.feistel import FeistelDocumentIndex, FeistelShuffle
from megadata_core.indices.sample_boundaries import sample_index

#: The arrays a Feistel-mode GPT dataset stores (and caches).
FEISTEL_ARRAYS = ("sample_index", "feistel_split")


class FeistelOrder:
    """The Feistel sample order: ``[0, first)`` and ``[first, total)`` each permuted by
    their own key (Megatron's two-range shuffle when the final epoch is separate)."""

    def __init__(self, first: int, total: int, seed: int) -> None:
        self.first, self.total = int(first), int(total)
        self._head = FeistelShuffle(self.first, seed, 0) if self.first else None
        rest = self.total - self.first
        self._tail = FeistelShuffle(rest, seed, 1) if rest else None

    def __len__(self) -> int:
        return self.total

    def __getitem__(self, positions: npt.ArrayLike) -> np.ndarray:
        """int [B] positions in ``[0, total)`` -> int64 [B] sample index rows."""
        where = np.asarray(positions, dtype=np.int64)
        out = np.empty(where.shape, dtype=np.int64)
        head = where < self.first
        # (positions below ``first`` exist only with a head, at or past it with a tail)
        if head.any() and self._head is not None:
            out[head] = self._head[where[head]]
        if not head.all() and self._tail is not None:
            out[~head] = self._tail[where[~head] - self.first] + self.first
        return out


def feistel_gpt_indices(
    sizes: np.ndarray,
    doc_ids: np.ndarray | range,
    sequence_length: int,
    num_samples: int | None,
    seed: int,
    tokens: int,
    *,
    add_extra_token: bool = True,
    drop_last_partial_sequence: bool = True,
    empty: Allocate = in_memory,
) -> dict[str, np.ndarray]:
    """The stored arrays of a Feistel-mode GPT dataset.

    Args:
        sizes: int [N] sequence lengths of the corpus.
        doc_ids: int [D] the split's document ids (or a step-1 range).
        sequence_length: S.
        num_samples: samples requested (None: one epoch).
        seed: the dataset seed.
        tokens: tokens per epoch (:func:`megadata_core.indices.tokens_per_epoch`), > 0.
        add_extra_token: samples span S + 1 tokens (Megatron's default).
        drop_last_partial_sequence: drop a last sample shorter than S + extra.
        empty: where the sample index is made (:mod:`megadata_core.indices.allocate`).

    Returns:
        ``{"sample_index": int [K + 1, 2], "feistel_split": int64 [2]}`` (first sample of
        the final epoch, epochs).
    """
    extra = int(add_extra_token)
    epochs = num_epochs(tokens, sequence_length, num_samples, extra)
    # The document order is computed block by block as the sample index reads it (no
    # [E * D] array); the dataset recomputes entries on demand, so it is never stored.
    documents = FeistelDocumentIndex(doc_ids, epochs, seed)
    samples = sample_index(
        sizes, documents, sequence_length, epochs, tokens, drop_last_partial_sequence, extra,
        empty=empty,
    )
    first = len(samples) - 1
    if separate_final_epoch(epochs, tokens, sequence_length, num_samples, extra):
        first = samples_in_epochs(epochs - 1, tokens, sequence_length, extra)
    return {
        "sample_index": samples,
        "feistel_split": np.array([first, epochs], dtype=np.int64),
    }


def feistel_orders(
    doc_ids: np.ndarray | range, feistel_split: np.ndarray, total: int, seed: int
) -> tuple[FeistelDocumentIndex, FeistelOrder]:
    """The document index and the sample order of :func:`feistel_gpt_indices`' arrays,
    computed on demand: ``(document_index, shuffle_index)`` for ``total`` samples."""
    first, epochs = (int(value) for value in feistel_split)
    return FeistelDocumentIndex(doc_ids, epochs, seed), FeistelOrder(first, total, seed)
