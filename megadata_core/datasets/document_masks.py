"""Document masking of a batch (``document_masking=True``): where each document piece of a
sample sits, in the forms attention kernels take, computed for the whole batch at once.

Given the pieces of every sample (text coordinates: S + extra tokens per sample), returns

* ``cu_seqlens`` int32 [B, S + 1]: Megatron's padded layout (Megatron-LM main's
  ``GPTDataset`` with ``inter_document_masking``; megatron-core 0.16.1 does not have it):
  0, then the end of every document piece in token coordinates, then S repeated to
  length S + 1. How padding enters:

  - ``concat`` (Megatron's definition, exactly): the extra token is taken off the last
    piece (a piece left empty by that is dropped) and a shortfall (a padded sample) is
    folded into the last remaining piece, so the last boundary is S; zero-length
    documents inside a sample give repeated boundaries, as in Megatron;
  - ``best_fit``: piece ends are clipped to S, and the padding after the last document
    is a segment of its own, ``[R, S)`` (R = real tokens), so that no document's length
    (or max_seqlen) counts pad tokens and position ids of the last document stop at its
    end; the pad segment is separate in ``cu_seqlens`` and 0 in ``segment_ids``.

  - ``best_fit`` with ``packing_alignment`` (THD for context parallelism): every piece
    takes its length rounded up to the alignment, its pad tokens after it; this layout
    is ``cu_seqlens_padded`` int32 [B, S + 1] (Transformer Engine's / Megatron's padded
    offsets: the trailing padding a segment of its own, then S repeated), and
    ``cu_seqlens`` holds the same segments' real lengths, cumulated (the trailing pad
    segment counted whole; its last value repeated). Pads are segment 0 and ``padding``
    (flat [B * S] positions) gets loss 0.

* ``max_seqlen`` int32 [B]: the longest segment of ``cu_seqlens`` (the pad segment
  included: varlen kernels need it to bound every segment).
* ``segment_ids`` int32 [B, S]: 1, 2, ... per non-empty segment of ``cu_seqlens``, 0 on
  padding (positions past the sample's real tokens).
* ``position_ids`` [B, S]: restart at 0 at every segment start.
* ``boundary``: flat indices into [B, S] of the labels that cross into another document
  piece (the last position of a piece whose next token starts the next piece); the
  dataset sets their loss mask to 0 where ``GPTDataConfig.masks_cross_document_labels``
  (by default for ``best_fit``). Megatron's loss mask (0.19's ``inter_document_masking``)
  trains on them, and so does ``concat`` by default.
"""

from __future__ import annotations

import numpy as np

from megadata_core.errors import DataError
from megadata_core.modes import Pieces


def document_masks(
    pieces: Pieces,
    sequence_length: int,
    extra: int,
    packed: bool,
    position_dtype: np.dtype,
) -> dict[str, np.ndarray]:
    """``cu_seqlens``, ``max_seqlen``, ``segment_ids``, ``position_ids`` and ``boundary``
    of a batch (see the module docstring).

    Args:
        pieces: the batch's pieces (:func:`~megadata_core.modes.concat.locate_pieces`
            or ``locate_packed_pieces``), every sample with >= 1 piece.
        sequence_length: S.
        extra: 1 with ``add_extra_token_to_sequence``, else 0.
        packed: True for best_fit samples (separate pad segment), False for concat.
        position_dtype: dtype of ``position_ids``.
    """
    real_length = pieces.length.astype(np.int64, copy=False)
    length = real_length if pieces.slot is None else pieces.slot  # tokens each piece takes
    first = pieces.first
    batch, total = len(first), len(length)
    size = sequence_length
    counts = np.diff(first, append=total)
    ends = np.cumsum(length)
    base = ends[first] - length[first]
    ends -= np.repeat(base, counts)  # end of every piece inside its sample (text coords)
    starts = ends - length
    last = first + counts - 1
    real = np.minimum(ends[last], size)  # tokens that are not padding, per sample
    if packed:
        np.minimum(ends, size, out=ends)
    else:  # Megatron: the extra token off the last piece (dropped if empty), padding folded
        folded = last - ((length[last] == extra) & (counts > 1) & (extra > 0))
        ends[last] = size
        ends[folded] = size
    # A piece starting at S or later holds only the extra (label) token: its end is S,
    # the fill value, so it takes no entry (Megatron drops it too). The kept pieces are a
    # prefix of each sample's pieces.
    kept = starts < size
    sample = np.repeat(np.arange(batch, dtype=np.int64), counts)
    needed = np.bincount(sample[kept], minlength=batch)
    widest = int(needed.max()) if batch else 0
    if widest > size:
        raise DataError(
            f"document_masking: a sample holds {widest} document pieces, more than "
            f"cu_seqlens [S + 1 = {size + 1}] can hold (empty documents in the corpus)"
        )
    within = np.arange(total, dtype=np.int64) - np.repeat(first, counts)
    cu_seqlens = np.full((batch, size + 1), size, dtype=np.int32)
    cu_seqlens[:, 0] = 0
    slots = sample * (size + 1) + 1 + within
    cu_seqlens.reshape(-1)[slots[kept]] = ends[kept]
    widths = np.diff(cu_seqlens, axis=1)
    max_seqlen = widths.max(axis=1).astype(np.int32)

    rows = np.arange(batch, dtype=np.int64)[:, None] * size
    open_ = cu_seqlens[:, :-1]  # segment starts (those < S)
    inside = open_ < size
    start = np.zeros((batch, size), dtype=np.int64)
    start.reshape(-1)[(rows + open_)[inside]] = open_[inside]
    np.maximum.accumulate(start, axis=1, out=start)
    position_ids = (np.arange(size, dtype=np.int64) - start).astype(position_dtype)

    marks = np.zeros((batch, size), dtype=np.int32)
    nonempty = widths > 0  # a non-empty segment starts below S
    marks.reshape(-1)[(rows + open_)[nonempty]] = 1
    segment_ids = np.cumsum(marks, axis=1, dtype=np.int32)
    segment_ids[np.arange(size) >= real[:, None]] = 0

    out = {"cu_seqlens": cu_seqlens, "max_seqlen": max_seqlen, "segment_ids": segment_ids,
           "position_ids": position_ids}
    if pieces.slot is not None:  # THD: real lengths beside the padded layout
        cu_seqlens, padding = _padded_layout(
            out, real_length, length, starts, sample, slots, kept, size
        )
    out["boundary"] = _crossing(starts, within, length, sample, size)
    if pieces.slot is not None:
        out["cu_seqlens"], out["padding"] = cu_seqlens, padding
    return out


def _crossing(starts, within, length, sample, size) -> np.ndarray:
    """Flat [B * S] positions whose label is the first token of a later piece (of pieces
    at text offsets ``starts``, ``within`` their sample, taking ``length`` tokens)."""
    crossing = (within > 0) & (length > 0) & (starts >= 1) & (starts - 1 < size)
    return sample[crossing] * size + starts[crossing] - 1


def crossing_labels(pieces: Pieces, sequence_length: int) -> np.ndarray:
    """int64 flat indices into [B, S] of the labels that cross into another document
    piece: ``document_masks``' ``boundary`` without the masks (samples of either packing
    without ``document_masking``)."""
    length = pieces.length.astype(np.int64, copy=False)
    if pieces.slot is not None:
        length = pieces.slot
    first = pieces.first
    counts = np.diff(first, append=len(length))
    ends = np.cumsum(length)
    base = ends[first] - length[first]
    starts = ends - np.repeat(base, counts) - length
    sample = np.repeat(np.arange(len(first), dtype=np.int64), counts)
    within = np.arange(len(length), dtype=np.int64) - np.repeat(first, counts)
    return _crossing(starts, within, length, sample, sequence_length)


def _padded_layout(out, real_length, slot, starts, sample, slots, kept, size):
    """``(cu_seqlens, padding)`` of aligned pieces (``packing_alignment``): the layout
    built from the slots becomes ``cu_seqlens_padded``; ``cu_seqlens`` counts only the
    real tokens of each document (the trailing pad segment counts whole, as in the padded
    layout: padding is a segment of its own); ``padding`` flat [B * S] positions of pad
    tokens (segment 0), whose loss is 0."""
    padded = out["cu_seqlens"]
    out["cu_seqlens_padded"] = padded
    gap = slot - real_length  # pad tokens after each piece
    before = np.cumsum(gap)  # pad tokens up to each piece's end, per sample:
    counts = np.bincount(sample, minlength=len(padded))
    sample_ends = np.cumsum(counts) - 1
    totals = before[sample_ends] if len(before) else np.zeros(0, np.int64)
    base = np.concatenate([[0], totals[:-1]]) if len(totals) else totals
    before -= np.repeat(base, counts)
    totals = totals - base
    shift = np.repeat(totals[:, None], size + 1, axis=1)
    shift[:, 0] = 0
    shift.reshape(-1)[slots[kept]] = before[kept]
    cu_seqlens = (padded - shift).astype(np.int32)
    segment_ids = out["segment_ids"]
    inner = np.flatnonzero(gap > 0)  # pads inside the used part: set their segment 0
    if inner.size:
        reps = gap[inner]
        at = np.repeat(sample[inner] * size + starts[inner] + real_length[inner], reps)
        at += np.arange(len(at)) - np.repeat(np.cumsum(reps) - reps, reps)
        segment_ids.reshape(-1)[at] = 0
    return cu_seqlens, np.flatnonzero(segment_ids.reshape(-1) == 0)


def segment_attention_mask(segment_ids: np.ndarray) -> np.ndarray:
    """bool [B, 1, S, S], True = masked: causal, and across segments (padding is one
    segment, 0)."""
    length = segment_ids.shape[1]
    future = np.triu(np.ones((length, length), dtype=bool), k=1)
    mask = segment_ids[:, None, :, None] != segment_ids[:, None, None, :]
    mask |= future
    return mask
