"""Context parallelism: the zig-zag (load-balanced) split of a batch's sequence axis.

Mirrors megatron-core's ``get_batch_on_this_cp_rank`` (``megatron/core/utils.py``). With a
causal mask the late positions of a sequence cost more attention than the early ones, so
Megatron cuts the sequence into ``2·cp_size`` equal chunks and gives rank ``r`` chunks
``r`` and ``2·cp_size − 1 − r`` (for cp_size 2: rank 0 gets chunks 0 and 3, rank 1 gets
chunks 1 and 2), concatenated in that order.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from typing import Any

import numpy as np

from megadata_core.checks import check_int
from megadata_core.errors import DataError

__all__ = ["context_parallel_slice", "context_parallel_positions", "thd_positions"]

# Keys that always have a sequence axis: a 1-D one is an unbatched sample, an error.
_SEQUENCE_KEYS = frozenset(
    ["tokens", "labels", "loss_mask", "position_ids", "attention_mask", "segment_ids",
     "dataset_ids", "document_ids"]
)
#: Keys kept whole on every rank: ``cu_seqlens`` [B, S + 1] describes the full sequence
#: (Transformer Engine's THD attention takes the full-sequence cu_seqlens and finds each
#: rank's share itself); ``max_seqlen`` [B] has no sequence axis anyway.
_WHOLE_KEYS = frozenset(["cu_seqlens", "cu_seqlens_padded", "max_seqlen"])
#: The layouts :func:`context_parallel_slice` cuts: the whole sequence zig-zagged
#: (``"bshd"``, Megatron's ``get_batch_on_this_cp_rank``) or every document of the padded
#: layout zig-zagged (``"thd"``, Transformer Engine's ``thd_get_partitioned_indices``).
LAYOUTS = ("bshd", "thd")


def context_parallel_positions(sequence_length: int, cp_rank: int, cp_size: int) -> np.ndarray:
    """Sequence positions kept by ``cp_rank``: int64 ``[sequence_length // cp_size]``.

    ``concat(chunk[cp_rank], chunk[2·cp_size − 1 − cp_rank])`` where the sequence is cut
    into ``2·cp_size`` chunks of ``sequence_length // (2·cp_size)`` positions.

    Raises:
        DataError: ``cp_size < 1``, ``cp_rank`` outside ``[0, cp_size)``, or
            ``sequence_length`` not divisible by ``2·cp_size``.
    """
    cp_size = check_int("cp_size", cp_size)
    cp_rank = check_int("cp_rank", cp_rank)
    sequence_length = check_int("sequence_length", sequence_length)
    if cp_size < 1:
        raise DataError(f"cp_size: {cp_size} must be >= 1")
    if not 0 <= cp_rank < cp_size:
        raise DataError(f"cp_rank: {cp_rank} is out of range [0, {cp_size})")
    chunks = 2 * cp_size
    if sequence_length < 0 or sequence_length % chunks:
        raise DataError(
            f"sequence_length: {sequence_length} is not divisible by 2 x cp_size = {chunks}"
        )
    chunk = sequence_length // chunks
    first = np.arange(cp_rank * chunk, (cp_rank + 1) * chunk, dtype=np.int64)
    second_start = (chunks - 1 - cp_rank) * chunk
    return np.concatenate([first, np.arange(second_start, second_start + chunk, dtype=np.int64)])


def thd_positions(cu_seqlens_padded: np.ndarray, cp_rank: int, cp_size: int) -> np.ndarray:
    """Sequence positions kept by ``cp_rank`` in the THD layout: int64 [B, S / cp_size].

    Every segment of ``cu_seqlens_padded`` (int [B, S + 1]: each document's padded span,
    the trailing padding one more; repeated values are empty segments) of length L is cut
    into ``2·cp_size`` chunks of ``L / (2·cp_size)``; the rank keeps chunks ``cp_rank``
    and ``2·cp_size − 1 − cp_rank`` of each, segment after segment (Transformer Engine's
    partitioning of THD batches for context parallelism).

    Raises:
        DataError: bad ``cp_rank``/``cp_size``, or a segment length not divisible by
            ``2·cp_size`` (naming ``cu_seqlens_padded``).
    """
    context_parallel_positions(0, cp_rank, cp_size)
    bounds = np.asarray(cu_seqlens_padded)
    if bounds.ndim != 2 or bounds.shape[1] < 2 or bounds.dtype.kind not in "iu":
        raise DataError(
            f"batch['cu_seqlens_padded']: {bounds.dtype} {bounds.shape}, expected int [B, S + 1]"
        )
    bounds = bounds.astype(np.int64)
    chunks = 2 * cp_size
    batch, length = bounds.shape[0], bounds.shape[1] - 1
    widths = np.diff(bounds, axis=1)
    if (widths < 0).any() or (bounds[:, 0] != 0).any() or (bounds[:, -1] != length).any():
        raise DataError(
            f"batch['cu_seqlens_padded']: not 0 .. {length}, non-decreasing, in every row"
        )
    if (widths % chunks).any():
        bad = int(widths[widths % chunks != 0][0])
        raise DataError(
            f"batch['cu_seqlens_padded']: a segment of {bad} tokens is not divisible by "
            f"2 x cp_size = {chunks} (pack with packing_alignment=2 * cp_size)"
        )
    chunk = (widths // chunks).reshape(-1)
    start = bounds[:, :-1].reshape(-1)
    # two ranges per segment: chunk r, then chunk 2·cp − 1 − r
    range_start = np.stack([start + cp_rank * chunk, start + (chunks - 1 - cp_rank) * chunk],
                           axis=1).reshape(-1)
    range_length = np.repeat(chunk, 2)
    ends = np.cumsum(range_length)
    positions = np.arange(int(ends[-1]) if ends.size else 0, dtype=np.int64)
    positions += np.repeat(range_start - (ends - range_length), range_length)
    return positions.reshape(batch, length // cp_size)


def context_parallel_slice(
    batch: Mapping[str, Any], cp_rank: int, cp_size: int, layout: str = "bshd"
) -> Mapping[str, Any]:
    """This context-parallel rank's share of ``batch`` (Megatron's zig-zag split).

    Every array of the batch is cut on its sequence axis: axis 1 for ``[B, S, ...]``
    arrays (``tokens``, ``labels``, ``loss_mask``, ``position_ids``, ``segment_ids``; int
    or float, any dtype, kept), axis 2 for ``attention_mask`` ``[B, 1, S, S]`` — only the
    query axis, as Megatron (the key axis keeps all ``S`` positions, so the result is
    ``[B, 1, S/cp_size, S]``). ``None`` values pass through, as in Megatron, and so do
    per-sample values without a sequence axis (``[B]`` arrays such as a blend's
    ``dataset_id``, and scalars; not the keys of :data:`_SEQUENCE_KEYS`). Document
    masking's ``cu_seqlens`` and ``max_seqlen`` pass through whole (:data:`_WHOLE_KEYS`).

    Unlike Megatron, which replaces the tensors of the dict it is given, this returns a
    new dict and leaves ``batch`` alone. With ``cp_size == 1`` ``batch`` itself is
    returned, unchanged (same object, same arrays).

    Args:
        batch: ``{name: np.ndarray | None}``; arrays must have ``S`` divisible by
            ``2·cp_size`` on their sequence axis.
        cp_rank: this rank in the context-parallel group, ``0 <= cp_rank < cp_size``.
        cp_size: context-parallel group size, >= 1.
        layout: ``"bshd"`` (the whole sequence cut in ``2·cp_size`` chunks) or
            ``"thd"``: every segment of ``batch["cu_seqlens_padded"]`` (documents packed
            with ``packing_alignment=2 * cp_size``) cut so (:func:`thd_positions`); the
            positions differ per sample, every rank keeps ``S / cp_size`` of each.

    Returns:
        ``{name: np.ndarray}`` with the sequence axis reduced to ``S / cp_size``
        (new arrays, a gather of the two chunks).

    Raises:
        DataError: bad ``cp_rank``/``cp_size``, a key of :data:`_SEQUENCE_KEYS` without
            its sequence axis, or ``S`` not divisible by ``2·cp_size`` (naming the key).
    """
    context_parallel_positions(0, cp_rank, cp_size)  # validates cp_rank and cp_size
    if not isinstance(batch, Mapping):
        raise DataError(f"batch: expected a mapping of arrays, got {type(batch).__name__}")
    if layout not in LAYOUTS:
        raise DataError(f"layout: {layout!r} is not one of {LAYOUTS}")
    if layout == "thd" and batch.get("cu_seqlens_padded") is None:
        raise DataError(
            "batch['cu_seqlens_padded']: missing; layout='thd' cuts every document of the "
            "padded layout (pack with packing='best_fit', document_masking=True, "
            "packing_alignment=2 * cp_size)"
        )
    if operator.index(cp_size) == 1:
        return batch
    chunks = 2 * operator.index(cp_size)
    positions_of: dict[int, np.ndarray] = {}
    per_sample = None
    if layout == "thd":
        per_sample = thd_positions(batch["cu_seqlens_padded"], cp_rank, cp_size)
    out: dict[str, Any] = {}
    for key, value in batch.items():  # one trip per key of the batch
        if value is None or key in _WHOLE_KEYS:
            out[key] = value
            continue
        array = np.asarray(value)
        axis = 2 if key == "attention_mask" else 1
        if array.ndim <= 1 and key not in _SEQUENCE_KEYS:  # [B] or scalar: per sample
            out[key] = value
            continue
        if array.ndim <= axis:
            raise DataError(f"batch[{key!r}]: shape {array.shape} has no sequence axis {axis}")
        length = array.shape[axis]
        if length % chunks:
            raise DataError(
                f"batch[{key!r}]: sequence length {length} (axis {axis}) is not divisible "
                f"by 2 x cp_size = {chunks}"
            )
        if per_sample is not None:
            if array.shape[0] != per_sample.shape[0] or length != per_sample.shape[1] * cp_size:
                raise DataError(
                    f"batch[{key!r}]: shape {array.shape} does not match cu_seqlens_padded "
                    f"[{per_sample.shape[0]}, {per_sample.shape[1] * cp_size + 1}]"
                )
            rows = np.arange(array.shape[0])[:, None]
            out[key] = array[rows, per_sample] if axis == 1 else array[rows, :, per_sample]
            if axis == 2:  # advanced indices around a slice land first: [B, S/cp, 1, S]
                out[key] = np.moveaxis(out[key], 1, 2)
            continue
        if length not in positions_of:
            positions_of[length] = context_parallel_positions(length, cp_rank, cp_size)
        out[key] = np.take(array, positions_of[length], axis=axis)
    return out
