"""Megatron's batch keys under MaxText's names (the Grain and JAX skins' ``key_names``).

MaxText's train step reads ``inputs``, ``inputs_position``, ``inputs_segmentation``,
``targets``, ``targets_position`` and ``targets_segmentation`` (what its Grain pipeline
makes after ``FirstFitPackIterDataset`` and its ``Rekey``), and weights the loss with
``targets_segmentation != 0``: it has no loss-mask key. The mapping, per sample [S] or
batch [B, S]:

==========================  ====================================================
MaxText                     megadata
==========================  ====================================================
``inputs``                  ``tokens``
``targets``                 ``labels``
``inputs_position``         ``position_ids`` (per document with ``document_masking``)
``targets_position``        ``position_ids`` (the same array)
``inputs_segmentation``     ``segment_ids`` (int32, 0 on padding); all ones without
                            ``document_masking`` (one segment: Megatron's attention)
``targets_segmentation``    ``inputs_segmentation`` where ``loss_mask != 0``, else 0
                            (so MaxText's loss counts exactly the tokens Megatron's does:
                            not padding, not a label that crosses a document)
==========================  ====================================================

Every other key (``loss_mask``, ``cu_seqlens``, ``cu_seqlens_padded``, ``max_seqlen``,
``attention_mask``, ``dataset_id``, and with ``source_ids`` the per-token ``dataset_ids``
and ``document_ids`` of the inputs) keeps its name and array. Arrays are passed on, not
copied (only
``targets_segmentation``, and ``inputs_segmentation`` without ``segment_ids``, are new).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from megadata_core.errors import DataError

__all__ = ["KEY_NAMES", "RENAMED", "check_key_names", "rename_keys", "to_maxtext"]

#: Accepted values of the adapters' ``key_names`` option.
KEY_NAMES = ("megatron", "maxtext")

#: megadata key -> MaxText key, for the keys renamed one to one.
RENAMED = {"tokens": "inputs", "labels": "targets", "position_ids": "inputs_position"}


def check_key_names(key_names: object) -> str:
    """``key_names`` if it is one of :data:`KEY_NAMES`; ``DataError`` naming it otherwise."""
    if not isinstance(key_names, str) or key_names not in KEY_NAMES:
        raise DataError(f"key_names: {key_names!r} is not one of {KEY_NAMES}")
    return key_names


def to_maxtext(batch: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """``batch`` (megadata keys: ``tokens``, ``labels``, ``loss_mask``, ``position_ids``
    [, ``segment_ids``, ...], each [S] or [B, S]) under MaxText's names (module docstring)."""
    missing = [key for key in ("tokens", "labels", "loss_mask", "position_ids") if key not in batch]
    if missing:
        raise DataError(
            f"key_names: 'maxtext' needs the keys tokens, labels, loss_mask and position_ids; "
            f"the batch has {sorted(batch)} (missing {missing})"
        )
    out: dict[str, np.ndarray] = {}
    for key, value in batch.items():
        if key == "segment_ids":
            continue
        out[RENAMED.get(key, key)] = value
    tokens = np.asarray(batch["tokens"])
    if "segment_ids" in batch:
        inputs_segmentation = np.asarray(batch["segment_ids"], dtype=np.int32)
    else:
        inputs_segmentation = np.ones(tokens.shape, dtype=np.int32)
    out["targets_position"] = out["inputs_position"]
    out["inputs_segmentation"] = inputs_segmentation
    out["targets_segmentation"] = np.where(
        np.asarray(batch["loss_mask"]) != 0, inputs_segmentation, 0
    ).astype(np.int32, copy=False)
    return out


def rename_keys(batch: Mapping[str, Any], key_names: str) -> Mapping[str, Any]:
    """``batch`` as it is for ``"megatron"``, :func:`to_maxtext` of it for ``"maxtext"``."""
    return to_maxtext(batch) if key_names == "maxtext" else batch
