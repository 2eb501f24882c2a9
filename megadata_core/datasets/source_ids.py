"""Per-token sources of a batch (``GPTDataConfig(source_ids=True)``): which dataset and
which document every token of every sample comes from.

* ``document_ids`` int32 [B, S]: the document (sequence id in its corpus, the value of
  ``document_index`` / ``piece_document``) of each of the S tokens (``tokens``, i.e. the
  first S positions of the sample's text), -1 on padding.
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

from megadata_core.modes import Pieces

SOURCE_KEYS = ("dataset_ids", "document_ids")
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
    (:func:`~megadata_core.datasets.member_reads.read_members`), ``ids`` int [B] each
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
