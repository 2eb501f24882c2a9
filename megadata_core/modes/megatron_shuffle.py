"""``shuffle="megatron"``: Megatron's orders, drawn from one ``RandomState(random_seed)``.

The document index (int32, shuffled in place), then the sample order (uint32, int64 past
2**32 - 2), both stored: Megatron's values bit for bit
(:func:`megadata_core.indices.gpt_indices`; best_fit draws its epochs' document orders
and its bin order from the same stream).
"""

from __future__ import annotations

import numpy as np

from megadata_core.indices import gpt_indices
from megadata_core.indices.arrays import scan_equal, scan_member
from megadata_core.indices.gpt import GPT_ARRAYS
from megadata_core.modes import Shuffle, register


class MegatronShuffle(Shuffle):
    """Megatron's stored RandomState orders (the default)."""

    name = "megatron"
    draws = True

    def concat_arrays(self) -> tuple[str, ...]:
        return GPT_ARRAYS

    def concat_indices(self, lengths, ids, config, num_samples, tokens, **options):
        arrays = gpt_indices(lengths, ids, config.sequence_length, num_samples,
                             config.random_seed, **options)
        return dict(zip(GPT_ARRAYS, arrays))

    def concat_orders(self, ids, arrays, total, seed):
        return np.asarray(arrays["document_index"]), np.asarray(arrays["shuffle_index"])

    def packed_order(self, arrays, head, total, seed):
        return arrays["shuffle_index"]

    def document_positions(self, document_index, document: int) -> np.ndarray:
        return scan_equal(document_index, document)  # block by block: memory maps stay maps

    def unshuffle(self, order, rows: np.ndarray) -> np.ndarray:
        return scan_member(rows, order)


register(MegatronShuffle())
