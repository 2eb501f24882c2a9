"""Loss masks, position ids and attention masks of a whole batch at once.

Values equal megatron-core 0.16.1's ``_get_ltor_masks_and_position_ids`` (applied per
sample) followed by ``GPTDataset.__getitem__``'s pad handling, without its Python loop
over EOD tokens:

* position ids with ``reset_position_ids``: ``position = arange - start``, where
  ``start`` is one past the last EOD before each token, found with
  ``np.maximum.accumulate`` over ``where(previous token is EOD, arange, 0)``;
* the attention mask with ``reset_attention_mask``: segment ids
  ``seg = (number of EODs before each token)``, then
  ``mask[b, 0, i, j] = j > i or seg[b, j] != seg[b, i]``.

Megatron's convention: ``attention_mask`` is bool with True = masked (it returns
``tril(...) < 0.5``), of shape [1, S, S] per sample, so [B, 1, S, S] for a batch.

Document masking of a batch (``document_masking=True``): where each document piece of a
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

Per-token sources of a batch (``GPTDataConfig(source_ids=True)``): which dataset and
which document every token of every sample comes from.

* ``document_ids`` int32 [B, S]: the document (sequence id in its corpus, the value of
  ``document_index`` / ``piece_document``) of each of the S tokens (``tokens``, i.e. the
  first S positions of the sample's text), -1 on padding. A raw-shards member's are int64
  ``piece << 32 | sequence within the piece`` (:mod:`.raw_shards`).
* ``dataset_ids`` int32 [B, S]: the member of the blend (index into the blend's
  prefixes) the token comes from, -1 on padding; 0 for a split of one dataset. A GPT
  dataset makes it 0 / -1; a blend puts its member ids in (:func:`with_member_ids`).

Computed from the pieces the batch was read from (no second pass over the index), so
they hold through blends, blend schedules, best_fit packing and document masking; a
context-parallel slice cuts them like the other [B, S] keys. The label at position i is
text position i + 1: its source is ``document_ids[:, i + 1]`` (or the next sample's
first token for i = S - 1 with ``add_extra_token_to_sequence``).
"""

from __future__ import annotations

import numpy as np

from megadata_core.errors import DataError
from megadata_core.modes import Pieces


def position_ids(
    tokens: np.ndarray,
    eod_id: int | None,
    reset: bool,
    dtype: np.typing.DTypeLike = np.int64,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """Position ids of a batch.

    Args:
        tokens: int [B, S] input tokens.
        eod_id: the EOD id (unused unless ``reset``).
        reset: restart positions at 0 after every EOD token.
        out: optional ``dtype`` [B, S] array to fill.

    Returns:
        ``dtype`` [B, S].
    """
    batch, length = tokens.shape
    if out is None:
        out = np.empty((batch, length), dtype=dtype)
    out[...] = np.arange(length, dtype=out.dtype)
    if reset and length > 1:
        # start[:, k] = k where tokens[:, k - 1] is EOD, else 0; running max = segment start.
        start = np.zeros((batch, length), dtype=dtype)
        np.multiply(tokens[:, :-1] == eod_id, out[:, 1:], out=start[:, 1:])
        np.maximum.accumulate(start, axis=1, out=start)
        out -= start
    return out


def segment_ids(tokens: np.ndarray, eod_id: int | None) -> np.ndarray:
    """int32 [B, S]: number of EOD tokens strictly before each position."""
    seg = np.zeros(tokens.shape, dtype=np.int32)
    if tokens.shape[1] > 1:
        np.cumsum(tokens[:, :-1] == eod_id, axis=1, dtype=np.int32, out=seg[:, 1:])
    return seg


def attention_mask(tokens: np.ndarray, eod_id: int | None, reset: bool) -> np.ndarray:
    """bool [B, 1, S, S], True = masked: causal, and across EODs when ``reset``."""
    batch, length = tokens.shape
    future = np.triu(np.ones((length, length), dtype=bool), k=1)
    if not reset:
        return np.broadcast_to(future, (batch, 1, length, length)).copy()
    seg = segment_ids(tokens, eod_id)
    mask = seg[:, None, :, None] != seg[:, None, None, :]
    mask |= future
    return mask


def loss_mask(
    tokens: np.ndarray,
    labels: np.ndarray | None,
    eod_id: int | None,
    pad_id: int,
    eod_mask_loss: bool,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """float32 [B, S]: 0 on EOD inputs (with ``eod_mask_loss``) and on pad labels, else 1.

    ``labels=None`` says no label can equal ``pad_id`` (skips that comparison); ``out``
    is an optional float32 [B, S] array to fill.
    """
    if out is None:
        out = np.empty(tokens.shape, dtype=np.float32)
    if labels is None:
        if not eod_mask_loss or eod_id is None:  # no EOD id: no token equals it
            out.fill(1.0)
            return out
        np.not_equal(tokens, eod_id, out=out)
        return out
    keep = labels != pad_id
    if eod_mask_loss:
        keep &= tokens != eod_id
    np.copyto(out, keep)
    return out


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


_SOURCE_KEYS = ("dataset_ids", "document_ids")
_ZERO = np.zeros((), dtype=np.int32)


def unslotted(pieces: Pieces) -> Pieces:
    """``pieces`` back to back: with slots (``packing_alignment``), the padding after
    each piece becomes a piece of document -1 of its own (P pieces become 2 P)."""
    if pieces.slot is None:
        return pieces
    count = len(pieces.length)
    document = np.empty(2 * count, dtype=np.int64)
    document[0::2], document[1::2] = pieces.document, -1
    length = np.empty(2 * count, dtype=np.int64)
    length[0::2], length[1::2] = pieces.length, pieces.slot - pieces.length
    return Pieces(document, length, 2 * pieces.first, pieces.offset)


def token_documents(pieces: Pieces, batch: int, width: int, sequence_length: int) -> np.ndarray:
    """int32 [batch, sequence_length]: each token's document, -1 past a sample's real
    text (``width`` = S + extra text tokens per sample) and on the padding between
    documents (``packing_alignment``). One ``np.repeat`` of the pieces' documents, a -1
    piece after each sample's last one taking up its padding."""
    pieces = unslotted(pieces)
    length = pieces.length
    document = np.asarray(pieces.document).astype(np.int32, copy=False)
    if int(length.sum()) != batch * width:  # padded samples: their pad runs as pieces
        first = pieces.first
        counts = np.diff(first, append=len(length))
        ends = np.cumsum(length)
        column = ends - length
        column -= np.repeat(column[first], counts)  # start of each piece in its sample
        take = np.minimum(length, np.maximum(width - column, 0))
        pad = width - np.add.reduceat(take, first) if batch else take[:0]
        after = first + counts  # insert each sample's pad run after its last piece
        document = np.insert(document, after, np.int32(-1))
        length = np.insert(take, after, pad)
    flat = np.repeat(document, length)
    return flat.reshape(batch, width)[:, :sequence_length]


def dataset_zeros(documents: np.ndarray, padded: bool) -> np.ndarray:
    """int32 like ``documents``: 0 on a token, -1 on padding (a dataset's own id); for
    an unpadded batch a read-only broadcast view of one 0 (nothing written)."""
    if not padded:
        return np.broadcast_to(_ZERO, documents.shape)
    return np.right_shift(documents, 31)  # -1 stays -1, ids >= 0 become 0


def batch_sources(parts: list, ids: np.ndarray, batch: int) -> dict[str, np.ndarray]:
    """``dataset_ids`` and ``document_ids`` of a blend's batch of ``batch`` rows, made
    once from its members' pieces: ``parts`` of ``(rows int [b], Pieces, width, S)``
    (:func:`~megadata_core.datasets.blended_dataset.read_members`), ``ids`` int [B] each
    row's member. The pieces are put in batch order (a stable sort of the pieces by
    row) and repeated once."""
    _, _, width, length = parts[0]
    parts = [(rows, unslotted(p), w, n) for rows, p, w, n in parts]
    if len(parts) == 1:  # one member read: its rows are the batch's, in order
        pieces = parts[0][1]
        document, lengths, first = pieces.document, pieces.length, pieces.first
    else:
        owner = np.concatenate([
            np.repeat(rows, np.diff(p.first, append=len(p.length))) for rows, p, _, _ in parts
        ])
        order = np.argsort(owner, kind="stable")
        document = np.concatenate([np.asarray(p.document) for _, p, _, _ in parts])[order]
        lengths = np.concatenate([p.length for _, p, _, _ in parts])[order]
        owner = owner[order]
        first = np.flatnonzero(np.r_[True, owner[1:] != owner[:-1]])
    joined = Pieces(document, lengths, first, first)
    documents = token_documents(joined, batch, width, length)
    members = np.asarray(ids).astype(np.int32)[:, None]
    if int(lengths.sum()) == batch * width and not (np.asarray(document) < 0).any():
        # no padding: every token from its row's member
        datasets = np.broadcast_to(members, documents.shape)
    else:
        datasets = np.repeat(members, length, axis=1)
        datasets[documents < 0] = -1
    return {"dataset_ids": datasets, "document_ids": documents}


def with_member_ids(batch: dict, ids: np.ndarray, parts: list | None = None) -> dict:
    """``batch`` (read from a blend's members, :data:`BLEND_SKIPS` left out) with its
    source keys: made from the members' pieces when ``parts`` holds them
    (:func:`batch_sources`), else ``dataset_ids`` set to each row's member ``ids`` (int
    [B]) where a token is not padding; unchanged without ``document_ids``."""
    if parts:
        batch.update(batch_sources(parts, ids, len(ids)))
        return batch
    documents = batch.get("document_ids")
    if documents is None:
        return batch
    rows, size = documents.shape
    members = np.asarray(ids).astype(np.int32)[:, None]
    if rows and documents.min() < 0:  # padding: -1 there
        batch["dataset_ids"] = np.repeat(members, size, axis=1)
        batch["dataset_ids"][documents < 0] = -1
    else:  # every token of a row from its member: a read-only broadcast view, no copy
        batch["dataset_ids"] = np.broadcast_to(members, (rows, size))
    return batch


#: Keys a blend does not gather from its members: it makes them itself.
BLEND_SKIPS = frozenset(["dataset_ids"])
