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
"""

from __future__ import annotations

import numpy as np


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
