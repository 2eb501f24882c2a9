"""``blend_order="megatron"``: megatron-core's blend, value for value.

For i in range(size): pick the dataset furthest below its share (``argmax(w * max(i, 1)
- count)``, ties to the lowest), Megatron's exhaustive variant when the blend has no
size (:mod:`megadata_core.indices.blending`). A weight of 0 is allowed here: the blend is
Megatron's over the other datasets (normalized again), with every dataset's id.
"""

from __future__ import annotations

import numpy as np

from megadata_core.indices.blending import (
    dataset_index_dtype,
    megatron_blending_indices,
    megatron_exhaustive_blending_indices,
    megatron_normalize,
)
from megadata_core.modes import BlendOrder, register


def _live_blend(weights: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Megatron's blend of normalized ``weights``, over the datasets with weight > 0."""
    live = np.flatnonzero(weights > 0)
    if len(live) == len(weights):  # Megatron: normalized once, then the helper
        return megatron_blending_indices(weights, size, normalize=False)
    index, sample = megatron_blending_indices(weights[live], size)
    # ids of all the datasets: the live ones' own index dtype may be too narrow
    return live.astype(dataset_index_dtype(len(weights)))[index], sample


class MegatronBlend(BlendOrder):
    """Megatron's order."""

    name = "megatron"

    def blend(self, weights, size, caps):
        if size is None:
            return megatron_exhaustive_blending_indices(caps)
        return _live_blend(weights, size)

    def stage(self, weights, length):
        return _live_blend(megatron_normalize(weights), length)


register(MegatronBlend())
