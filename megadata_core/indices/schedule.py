"""A blend schedule's indices: stages of weights over one set of datasets, each dataset
read on one cursor across every stage.

A schedule of K stages over n datasets is ``starts`` int64 [K] (the first 0, strictly
increasing: the sample where each stage begins) and ``weights`` float64 [K, n] (each
row finite, >= 0, not all 0; a dataset that joins later or leaves has weight 0 there).
Stage k covers the blend's samples ``[starts[k], starts[k+1])`` (the last one up to the
size) and orders them as a static blend of its weights would
(:func:`~megadata_core.indices.blending.balanced_blending_indices`, or Megatron's
order); ``dataset_sample_index`` continues every dataset's count where the previous
stages left it, so no sample of a dataset is read twice and none is skipped.

Both orders are prefix-stable (the first m samples of a blend do not depend on its
size), so a schedule's first N samples depend only on the stages that begin before N:
an *edit* at N (the stages before N kept, a stage boundary at N, anything after) leaves
samples ``[0, N)`` bit for bit as they were (:func:`same_before`).

A member read past one epoch goes on with its next epoch, whose order is drawn from
:func:`epoch_seed` alone (a schedule that reads more of a dataset adds epochs; it never
reorders the ones before).
"""

from __future__ import annotations

import hashlib

import numpy as np

from megadata_core.errors import DataError
from megadata_core.indices.blending import (
    balanced_blending_indices,
    balanced_blending_stages,
    check_weights,
    dataset_index_dtype,
)

__all__ = [
    "check_schedule",
    "epoch_seed",
    "same_before",
    "schedule_blending_indices",
    "schedule_counts",
    "stage_counts",
    "stage_lengths",
]


def check_schedule(starts: object, weights: object) -> tuple[np.ndarray, np.ndarray]:
    """``(starts int64 [K], weights float64 [K, n])``, checked.

    Raises:
        DataError: naming the stage: starts not beginning at 0 or not strictly
            increasing; a stage's weights not finite, negative or all 0.
    """
    begin = np.asarray(starts)
    if begin.ndim != 1 or begin.size == 0 or begin.dtype.kind not in "iu":
        raise DataError(f"starts: expected a non-empty 1-D integer array, got {starts!r}")
    begin = begin.astype(np.int64)
    if begin[0] != 0:
        raise DataError(f"starts: the first stage starts at {int(begin[0])}, must be 0")
    steps = np.flatnonzero(np.diff(begin) <= 0)
    if steps.size:
        k = int(steps[0]) + 1
        raise DataError(
            f"starts: stage {k} starts at {int(begin[k])}, not after stage {k - 1} "
            f"({int(begin[k - 1])}); starts must be strictly increasing"
        )
    rows = np.asarray(weights, dtype=np.float64)
    if rows.ndim != 2 or rows.shape[0] != len(begin) or rows.shape[1] == 0:
        raise DataError(
            f"weights: expected [{len(begin)} stages, datasets], got shape {rows.shape}"
        )
    for k in range(len(rows)):  # one check per stage, naming it
        check_weights(rows[k], f"stage {k} weights")
    return begin, rows


def stage_lengths(starts: np.ndarray, size: int) -> np.ndarray:
    """int64 [K]: samples of each stage in a blend of ``size`` samples (stages that begin
    at or after ``size`` hold none)."""
    begin = np.minimum(np.asarray(starts, dtype=np.int64), size)
    return np.diff(np.append(begin, np.int64(size)))


def _checked_order(order):
    """``order``: a blend order (:func:`megadata_core.modes.blend_order`), None for the
    balanced one."""
    if order is None:
        return _BALANCED
    if not callable(getattr(order, "stage", None)):
        raise DataError(f"order: {order!r} is not a blend order (megadata_core.modes."
                        "blend_order(name))")
    return order


class _Balanced:
    """The default order, as :mod:`megadata_core.modes.balanced_blend` has it (this
    floor cannot import the modes)."""

    @staticmethod
    def stage(weights: np.ndarray, length: int) -> tuple[np.ndarray, np.ndarray]:
        return balanced_blending_indices(weights, length)

    @staticmethod
    def stages(rows: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return balanced_blending_stages(rows, lengths)


_BALANCED = _Balanced()


def schedule_blending_indices(
    starts: object, weights: object, size: int, order=None
) -> tuple[np.ndarray, np.ndarray]:
    """The blend of a schedule: ``(dataset_index int16/int32 [size], dataset_sample_index
    int64 [size])``, each dataset's samples counted across all stages.

    Args:
        starts: int [K], the sample each stage begins at (0 first, increasing).
        weights: float [K, n], each stage's weights over the n datasets.
        size: samples in the blend (>= 0).
        order: the blend order (:class:`megadata_core.modes.BlendOrder`: its ``stage``
            and ``stages``), None for the balanced one (every prefix of each stage within
            one sample of its shares).

    An order that orders every stage at once does so (the balanced one:
    :func:`~megadata_core.indices.blending.balanced_blending_stages`), else the stages
    are ordered one after the other; each
    stage's sample counts then grow by the samples the stages before it read of the same
    dataset.
    """
    begin, rows = check_schedule(starts, weights)
    order = _checked_order(order)
    if isinstance(size, (bool, np.bool_)) or not isinstance(size, (int, np.integer)) or size < 0:
        raise DataError(f"size: {size!r} must be an integer >= 0")
    datasets = rows.shape[1]
    lengths = stage_lengths(begin, int(size))
    stages = np.flatnonzero(lengths)
    together = order.stages(rows[stages], lengths[stages])
    if together is not None:
        index, sample = together
    else:
        index = np.empty(int(size), dtype=dataset_index_dtype(datasets))
        sample = np.empty(int(size), dtype=np.int64)
        for k in stages.tolist():  # one vectorized order per stage
            lo, hi = int(begin[k]), int(begin[k]) + int(lengths[k])
            index[lo:hi], sample[lo:hi] = order.stage(rows[k], hi - lo)
    # each dataset's cursor: the samples the stages before read of it
    ends = np.cumsum(lengths[stages]).tolist()
    counts = np.zeros((len(stages), datasets), dtype=np.int64)
    for row, end in enumerate(ends[:-1]):
        counts[row] = np.bincount(index[end - int(lengths[stages[row]]) : end], minlength=datasets)
    offsets = np.cumsum(counts, axis=0) - counts
    for row, end in enumerate(ends[1:], start=1):  # stage 0 starts every cursor at 0
        lo = end - int(lengths[stages[row]])
        sample[lo:end] += offsets[row][index[lo:end]]
    return index, sample


def stage_counts(starts: object, weights: object, size: int, order=None) -> np.ndarray:
    """int64 [K, n]: samples each stage reads of each dataset in a blend of ``size``
    (each stage's order built and counted in turn: memory of one stage, not the blend)."""
    begin, rows = check_schedule(starts, weights)
    order = _checked_order(order)
    counts = np.zeros(rows.shape, dtype=np.int64)
    for k, length in enumerate(stage_lengths(begin, int(size)).tolist()):
        if length:
            ids, _ = order.stage(rows[k], length)
            counts[k] = np.bincount(ids, minlength=rows.shape[1])
    return counts


def schedule_counts(dataset_index: np.ndarray, datasets: int) -> np.ndarray:
    """int64 [datasets]: samples the schedule reads of each dataset (its cursor at the end)."""
    return np.bincount(np.asarray(dataset_index), minlength=datasets).astype(np.int64)


def same_before(
    starts_a: object, stages_a: list, starts_b: object, stages_b: list, consumed: int
) -> str | None:
    """None when two schedules give the same first ``consumed`` samples, judged by their
    stages (any hashable per-stage identity, e.g. a digest of the weights over named
    datasets): the stages that begin before ``consumed`` must be the same, at the same
    starts. Else a sentence saying where they differ."""
    a = [(int(s), d) for s, d in zip(np.asarray(starts_a).tolist(), stages_a) if s < consumed]
    b = [(int(s), d) for s, d in zip(np.asarray(starts_b).tolist(), stages_b) if s < consumed]
    for k, (old, new) in enumerate(zip(a, b)):
        if old[0] != new[0]:
            return f"stage {k} starts at sample {old[0]} in one and {new[0]} in the other"
        if old[1] != new[1]:
            return f"stage {k} (from sample {old[0]}) has other weights or datasets"
    if len(a) != len(b):
        longer, extra = ("first", a) if len(a) > len(b) else ("second", b)
        k = min(len(a), len(b))
        return (
            f"the {longer} has a stage {k} at sample {extra[k][0]}, before the "
            f"{consumed} samples already read"
        )
    return None


def epoch_seed(seed: int, epoch: int) -> int:
    """The seed of a member's ``epoch``-th pass, in ``[0, 2**32)``: ``seed`` itself for
    epoch 0, else the first 4 bytes (little-endian) of sha256 of ``b"megadata-epoch"``,
    ``seed`` (8 bytes) and ``epoch`` (8 bytes). Every epoch is drawn independently, so
    the passes a schedule adds leave the earlier ones as they were."""
    if epoch == 0:
        return int(seed)
    digest = hashlib.sha256(
        b"megadata-epoch" + int(seed).to_bytes(8, "little") + int(epoch).to_bytes(8, "little")
    ).digest()
    return int.from_bytes(digest[:4], "little")
