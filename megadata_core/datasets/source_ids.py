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

from megadata_core.datasets.pieces import Pieces

SOURCE_KEYS = ("dataset_ids", "document_ids")


def token_documents(pieces: Pieces, batch: int, width: int, sequence_length: int) -> np.ndarray:
    """int32 [batch, sequence_length]: each token's document, -1 past a sample's real
    text (``width`` = S + extra text tokens per sample)."""
    length = pieces.length
    document = np.asarray(pieces.document).astype(np.int32, copy=False)
    total = int(length.sum())
    if total == batch * width:  # every sample full: the pieces tile the text exactly
        flat = np.repeat(document, length)
        return flat.reshape(batch, width)[:, :sequence_length]
    out = np.full((batch, width), -1, dtype=np.int32)
    counts = np.diff(pieces.first, append=len(length))
    ends = np.cumsum(length)
    starts = ends - length
    base = np.repeat(starts[pieces.first], counts)  # text start of each piece's sample
    owner = np.repeat(np.arange(batch, dtype=np.int64), counts)
    column = starts - base
    keep = (length > 0) & (column < width)
    take = np.minimum(length, width - column)[keep]
    token_owner = np.repeat(owner[keep], take)
    token_column = np.repeat(column[keep] - np.cumsum(take) + take, take)
    token_column += np.arange(len(token_column), dtype=np.int64)
    out[token_owner, token_column] = np.repeat(document[keep], take)
    return out[:, :sequence_length]


def dataset_zeros(documents: np.ndarray, padded: bool) -> np.ndarray:
    """int32 like ``documents``: 0 on a token, -1 on padding (a dataset's own id)."""
    if not padded:
        return np.zeros(documents.shape, np.int32)
    return np.right_shift(documents, 31)  # -1 stays -1, ids >= 0 become 0


def with_member_ids(batch: dict, ids: np.ndarray) -> dict:
    """``batch`` (read from a blend's members) with ``dataset_ids`` set to each row's
    member ``ids`` (int [B]) where a token is not padding; unchanged without it."""
    if "dataset_ids" not in batch:
        return batch
    documents = batch["document_ids"]
    members = np.asarray(ids).astype(np.int32)[:, None]
    batch["dataset_ids"] = np.where(documents >= 0, members, np.int32(-1))
    return batch
