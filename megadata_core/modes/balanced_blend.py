"""``blend_order="balanced"``: earliest deadline first, vectorized (the default).

Every dataset stays within one sample of its share in every prefix of the blend
(:func:`megadata_core.indices.balanced_blending_indices`); a schedule's stages are
ordered all at once (:func:`megadata_core.indices.balanced_blending_stages`).
"""

from __future__ import annotations

from megadata_core.indices.blending import balanced_blending_indices, balanced_blending_stages
from megadata_core.modes import BlendOrder, register


class BalancedBlend(BlendOrder):
    """Earliest deadline first."""

    name = "balanced"

    def blend(self, weights, size, caps):
        if size is None:
            return balanced_blending_indices(weights, None, caps=caps)
        return balanced_blending_indices(weights, size)

    def stage(self, weights, length):
        return balanced_blending_indices(weights, length)

    def stages(self, rows, lengths):
        return balanced_blending_stages(rows, lengths)


register(BalancedBlend())
