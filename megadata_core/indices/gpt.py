"""The three GPT indices at once, as megatron-core's GPTDataset builds them."""

from __future__ import annotations

import threading

import numpy as np

from megadata_core.checks import check_int
from megadata_core.errors import DataError
from megadata_core.indices.allocate import Allocate, in_memory
from megadata_core.indices.document_order import document_index
from megadata_core.indices.epochs import (
    num_epochs,
    samples_in_epochs,
    separate_final_epoch,
    tokens_per_epoch,
)
from megadata_core.indices.sample_boundaries import sample_index
from megadata_core.indices.sample_shuffle import shuffle_index

#: The names of the three arrays :func:`gpt_indices` returns, in its order.
GPT_ARRAYS = ("document_index", "sample_index", "shuffle_index")
_STREAMS = threading.local()  # one RandomState per thread, reseeded for every index


def seeded_random_state(seed: int) -> np.random.RandomState:
    """A ``RandomState`` in the state ``RandomState(seed)`` starts in (the same stream),
    reused per thread: ``seed()`` on an existing one takes microseconds, a new one
    ~0.1 ms (numpy draws OS entropy for its bit generator before the legacy seeding);
    a blend of 1,000 small corpora builds 2,000 indices. Valid until this thread asks
    again."""
    rng = getattr(_STREAMS, "rng", None)
    if rng is None:
        rng = _STREAMS.rng = np.random.RandomState(seed)
    else:
        rng.seed(seed)
    return rng


def gpt_indices(
    sequence_lengths: np.ndarray,
    document_ids: np.ndarray | range,
    sequence_length: int,
    num_samples: int | None,
    random_seed: int,
    *,
    add_extra_token: bool = True,
    drop_last_partial_sequence: bool = True,
    empty: Allocate = in_memory,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(document_index, sample_index, shuffle_index)`` equal to megatron-core 0.16.1's
    ``GPTDataset._build_document_sample_shuffle_indices`` for the same inputs.

    One ``RandomState(random_seed)`` shuffles the document index, then the shuffle index.
    Megatron passes ``drop_last_partial_sequence=True`` except for the validation split
    (``drop_last_partial_validation_sequence``).

    Args:
        sequence_lengths: int [N] lengths of every document of the corpus.
        document_ids: int [D] the split's documents (Megatron: ``numpy.arange(lo, hi)``),
            or the ``range(lo, hi)`` itself (same values; no id array is read or made).
        sequence_length: S >= 1.
        num_samples: samples requested, or None for one epoch.
        random_seed: in ``[0, 2**32)``.
        empty: where the three arrays are made (:mod:`megadata_core.indices.allocate`:
            spill files keep them out of anonymous memory; the values are the same).

    Returns:
        int32 [E*D]; int32/int64 [num_samples' + 1, 2]; uint32/int64 [num_samples'],
        where num_samples' is what E epochs yield (>= num_samples).
    """
    seed = check_int("random_seed", random_seed, 0)
    if seed >= 1 << 32:
        raise DataError(f"random_seed: {seed} must be < 2**32")
    tokens = tokens_per_epoch(sequence_lengths, document_ids)
    if tokens == 0:
        raise DataError("document_ids: the documents hold no tokens")
    epochs = num_epochs(tokens, sequence_length, num_samples, add_extra_token)
    separate = separate_final_epoch(epochs, tokens, sequence_length, num_samples, add_extra_token)
    rng = seeded_random_state(seed)
    documents = document_index(document_ids, epochs, rng, separate, empty=empty)
    samples = sample_index(
        sequence_lengths,
        documents,
        sequence_length,
        epochs,
        tokens,
        drop_last_partial_sequence,
        add_extra_token,
        empty=empty,
    )
    total = len(samples) - 1
    if separate:
        first = samples_in_epochs(epochs - 1, tokens, sequence_length, add_extra_token)
    else:
        first = total
    return documents, samples, shuffle_index(first, total, rng, empty=empty)
