"""``shuffle="feistel"``: keyed Feistel bijections instead of RandomState permutations.

The sample order (and, read through, the document order) is computed on demand in O(1)
memory (:mod:`megadata_core.indices.gpt`): a concat dataset stores only its
sample index and ``feistel_split``, a best_fit one its pieces. Not Megatron-compatible.
"""

from __future__ import annotations

import numpy as np

from megadata_core.indices.arrays import scan_equal
from megadata_core.indices.feistel import ALGORITHM, ROUNDS, feistel_invert
from megadata_core.indices.gpt import (
    FEISTEL_ARRAYS,
    FeistelOrder,
    feistel_gpt_indices,
    feistel_orders,
)
from megadata_core.modes import Shuffle, register


class FeistelShuffle(Shuffle):
    """Computed Feistel orders."""

    name = "feistel"
    draws = False

    def describe(self) -> dict:
        return {"feistel_rounds": ROUNDS, "feistel_algorithm": ALGORITHM}

    def concat_arrays(self) -> tuple[str, ...]:
        return FEISTEL_ARRAYS

    def concat_indices(self, lengths, ids, config, num_samples, tokens, **options):
        return feistel_gpt_indices(lengths, ids, config.sequence_length, num_samples,
                                   config.random_seed, tokens, **options)

    def concat_orders(self, ids, arrays, total, seed):
        return feistel_orders(ids, arrays["feistel_split"], total, seed)

    def packed_order(self, arrays, head, total, seed):
        return FeistelOrder(head, total, seed)

    def document_positions(self, order, document: int) -> np.ndarray:
        ids, count = order.doc_ids, order._count
        if isinstance(ids, range):
            within = np.array([document - ids.start] if ids.start <= document < ids.stop
                              else [], dtype=np.int64)
        else:
            within = scan_equal(ids, document)
        if not within.size or not count:
            return np.zeros(0, np.int64)
        found = [
            epoch * count + feistel_invert(within, count, key, threads=1)
            for epoch, key in enumerate(order._keys)  # one trip per epoch
        ]
        return np.sort(np.concatenate(found).astype(np.int64))

    def unshuffle(self, order: FeistelOrder, rows: np.ndarray) -> np.ndarray:
        rows = np.asarray(rows, dtype=np.int64)  # inverted by the bijections: no scan
        out = np.empty(len(rows), np.int64)
        head = rows < order.first
        # (rows below ``first`` exist only with a head, at or past it with a tail)
        if head.any() and order._head is not None:
            out[head] = order._head.inverse(rows[head])
        if not head.all() and order._tail is not None:
            out[~head] = order._tail.inverse(rows[~head] - order.first) + order.first
        return np.sort(out)


register(FeistelShuffle())
