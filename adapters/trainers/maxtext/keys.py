"""MaxText's names: its batch keys (the Grain and JAX skins' ``key_names``), the modules
megadata's hook patches, and the keys of a data config that ``grain_train_files`` names.

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

A ``grain_train_files: /path/data.json`` holds :class:`megadata_core.GPTDataConfig` fields
(:mod:`megadata_adapters.trainers.data_json`) plus :data:`EXTRA_KEYS` (``mock: true``, with
``vocab_size``: Megatron's mock data); MaxText's settings fill what it leaves out
(:func:`data_config`): ``max_target_length`` is ``sequence_length`` (the file's must equal
it), ``data_shuffle_seed`` the ``random_seed``, ``mmap_eod_id`` the ``eod_id``, ``steps``
times the global batch the samples of the split (the file's ``split`` says where they come
from).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

import megadata_core as mdc
from megadata_adapters.trainers.data_json import read_data_json
from megadata_core.errors import DataError

__all__ = [
    "KEY_NAMES", "RENAMED", "check_key_names", "data_config", "rename_keys", "renames",
    "to_maxtext",
]

#: The MaxText module whose ``get_mmap_npy_dataset`` is replaced (the pipeline's).
TARGET = "maxtext.input_pipeline.grain_data_processing"
#: The module that defines MaxText's own functions (patched too, for direct callers).
SOURCE = "maxtext.input_pipeline._mmap_datasource"
#: The module of MaxText's ``MegatronSplitInputsTargets``, which lets megadata's own
#: samples (already split) through.
UTILS = "maxtext.input_pipeline.input_pipeline_utils"
#: Every module the hook patches.
PATCHED = (TARGET, SOURCE, UTILS)
#: The attribute set on what megadata put in place (functions, patched modules).
MARK = "__megadata__"

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


def renames(key_names: str) -> bool:
    """Whether batches under ``key_names`` are renamed (``"maxtext"``), or keep the core's
    keys (``"megatron"``)."""
    return key_names == "maxtext"


def rename_keys(batch: Mapping[str, Any], key_names: str) -> Mapping[str, Any]:
    """``batch`` as it is for ``"megatron"``, :func:`to_maxtext` of it for ``"maxtext"``."""
    return to_maxtext(batch) if renames(key_names) else batch


#: Keys of the data config file beyond GPTDataConfig's fields.
EXTRA_KEYS = ("mock", "vocab_size")


def names_data_config(data_file_pattern: str) -> bool:
    """Whether ``grain_train_files`` names a megadata data config (a ``.json`` file)."""
    return str(data_file_pattern).strip().endswith(".json")


def data_config(
    path: str, seq_length: int, eod_id: int, seed: int
) -> tuple[mdc.GPTDataConfig, dict[str, Any]]:
    """The GPTDataConfig that the file ``path`` and MaxText's settings make, and the
    extras (``mock``, ``vocab_size``)."""
    values = read_data_json(path, "grain_train_files", EXTRA_KEYS)
    if values.setdefault("sequence_length", seq_length) != seq_length:
        raise DataError(
            f"sequence_length: {path} says {values['sequence_length']}, MaxText's "
            f"max_target_length is {seq_length}"
        )
    values.setdefault("random_seed", seed)
    if values.get("eod_id") is None:
        values["eod_id"] = eod_id
    values.setdefault("create_attention_mask", False)  # MaxText reads segment ids
    extras = {"mock": bool(values.pop("mock", False)), "vocab_size": values.pop("vocab_size", None)}
    return mdc.GPTDataConfig(**values), extras
