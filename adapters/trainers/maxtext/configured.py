"""``grain_train_files`` naming a megadata data config: megadata's own samples under
MaxText's keys, for what MaxText's own ``mmap_npy`` spelling cannot say.

With ``grain_file_type: mmap_npy`` and ``grain_train_files: /path/data.json`` (a ``.json``
of :class:`megadata_core.GPTDataConfig` fields, :mod:`megadata_adapters.trainers.data_json`),
MaxText trains on megadata's samples: ``packing: best_fit`` with ``document_masking``
(segment ids, positions per document, ``cu_seqlens`` and with ``packing_alignment`` the
THD keys, no label across documents), blends and ``blend_schedule``, ``source_ids``
(per-token ``dataset_ids`` / ``document_ids``). Each sample reaches MaxText already split
(:mod:`megadata_adapters.frameworks.maxtext_keys`: ``inputs``, ``targets``,
``inputs_segmentation``, ``targets_segmentation`` (0 where megadata's loss mask is),
``inputs_position``, ``targets_position``, and megadata's other keys of one value per
position: ``loss_mask``, ``cu_seqlens``, ``cu_seqlens_padded``, ``dataset_ids``,
``document_ids``; ``max_seqlen``, one number per sample, is left out: MaxText shards every
key of a batch as [batch, length]), and MaxText's
``MegatronSplitInputsTargets`` passes it on unchanged (the hook lets elements without
``text`` through). MaxText's settings fill what the file leaves out:
``max_target_length`` is ``sequence_length`` (the file's must equal it),
``data_shuffle_seed`` the ``random_seed``, ``mmap_eod_id`` the ``eod_id``, ``steps`` times
the global batch the samples of the split (``mmap_npy_split``'s part 0 trains, part 1
evaluates: the file's ``split`` says where they come from). The file may also say
``mock: true`` (with ``vocab_size``: Megatron's mock data).
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

import megadata_core as mdc
from megadata_adapters.frameworks.maxtext_keys import to_maxtext
from megadata_adapters.trainers.data_json import read_data_json
from megadata_adapters.trainers.maxtext.read_ahead import ReadAheadSource
from megadata_core.errors import DataError

log = logging.getLogger("megadata_adapters.trainers.maxtext")

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


class ConfiguredSource(ReadAheadSource):
    """The samples of one split of a megadata data config, under MaxText's keys
    (picklable: a Grain worker rebuilds the datasets from the cache)."""

    def __init__(
        self, config: mdc.GPTDataConfig, num_samples: int | None, split_index: int,
        extras: dict[str, Any], host_index: int = 0, host_count: int = 1,
    ) -> None:
        self._open(config, num_samples, split_index, extras, host_index, host_count)

    def _open(self, config, num_samples, split_index, extras, host_index, host_count) -> None:
        self._state = (config, num_samples, split_index, extras)
        sizes: list[int | None] = [0, 0, 0]  # only this split is built
        sizes[split_index] = num_samples
        datasets = mdc.build_datasets(
            config, sizes, mock=extras["mock"], vocab_size=extras["vocab_size"]
        )
        dataset = datasets[split_index]
        if dataset is None or len(dataset) == 0:
            part = ("train", "valid", "test")[split_index]
            raise DataError(f"grain_train_files: the data config gives no {part} samples")
        self.dataset = dataset
        length = len(dataset) if num_samples is None else min(int(num_samples), len(dataset))
        self._start(length, host_index, host_count)
        log.info("megadata serves MaxText its own samples: %r", self)

    def _read_batch(self, indices: np.ndarray) -> dict[str, np.ndarray]:
        batch = to_maxtext(self.dataset.__getitems__(indices))
        # MaxText shards every key of a batch as [batch, length]: one number per sample
        # (max_seqlen) cannot go
        return {name: np.asarray(v) for name, v in batch.items() if np.ndim(v) == 2}

    def _read_single(self, index: int) -> dict[str, np.ndarray]:
        batch = self._read_batch(np.array([index]))
        return {name: values[0] for name, values in batch.items()}

    def __getstate__(self) -> dict:
        return {"state": self._state, "host": self._host}

    def __setstate__(self, state: dict) -> None:
        self._open(*state["state"], *state["host"])

    def __repr__(self) -> str:
        return f"ConfiguredSource({len(self)} samples of {self.dataset!r})"


def configured_dataset(
    path: str, seq_length: int, eod_id: int, seed: int, num_samples: int | None,
    split_index: int, host_index: int, host_count: int, num_threads: int,
    prefetch_buffer_size: int,
):
    """MaxText's input dataset (a Grain ``IterDataset``, this host's samples in order) of
    the data config ``path``."""
    import grain.python as grain

    config, extras = data_config(path, seq_length, eod_id, seed)
    if split_index not in (0, 1):
        raise DataError(f"mmap_npy_split: part {split_index} (0 trains, 1 evaluates)")
    source = ConfiguredSource(config, num_samples, split_index, extras, host_index, host_count)
    dataset = grain.MapDataset.source(source)[host_index::host_count]
    return dataset.to_iter_dataset(
        read_options=grain.ReadOptions(num_threads=num_threads,
                                       prefetch_buffer_size=prefetch_buffer_size)
    )
