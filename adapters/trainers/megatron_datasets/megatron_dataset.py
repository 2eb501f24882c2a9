"""``megatron.core.datasets.megatron_dataset``: the base class of mid-level datasets.

Subclass :class:`MegatronDataset` as in megatron-core (``numel_low_level_dataset``,
``build_low_level_dataset``, ``__len__``, ``__getitem__``); the builder builds any
subclass. ``unique_identifiers`` / ``unique_description`` / ``unique_description_hash``
are Megatron's, computed at first use (a 1,000-prefix blend does not pay for 1,000 JSON
descriptions it never reads).
"""

from __future__ import annotations

import hashlib
import json
import warnings
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

import numpy
import torch

from megadata_adapters.trainers.megatron_datasets.blended_megatron_dataset_config import (
    BlendedMegatronDatasetConfig,
)
from megadata_adapters.trainers.megatron_datasets.indexed_dataset import IndexedDataset
from megadata_adapters.trainers.megatron_datasets.utils import Split

LowLevelDataset = IndexedDataset | Iterable

_PAD_TOKEN_ID = -1


def pad_token_id(config) -> int:
    """Megatron's pad id: ``tokenizer.pad``, else -1; -1 too when it equals another
    special token (with a warning), unless ``allow_ambiguous_pad_tokens``."""
    tokenizer: Any = getattr(config, "tokenizer", None)  # any tokenizer; None fails below too
    try:
        pad = tokenizer.pad
    except Exception:
        return _PAD_TOKEN_ID
    try:
        special = [v for k, v in tokenizer.special_tokens_dict.items() if k != "pad_token"]
    except (AttributeError, IndexError, ValueError):
        special = []
    if not special:
        for name in ("eos", "eod"):
            try:
                special.append(getattr(tokenizer, name))
            except (AttributeError, NotImplementedError):
                pass
    if pad in special:
        warnings.warn(
            f"tokenizer pad id {pad} collides with another special token id; this may cause "
            "instability and lack of convergence during training",
            stacklevel=3,
        )
        if not getattr(config, "allow_ambiguous_pad_tokens", False):
            return _PAD_TOKEN_ID
    return pad


class MegatronDataset(ABC, torch.utils.data.Dataset):
    """A split of a low-level dataset (Megatron's constructor and attributes).

    Args:
        dataset: the low-level dataset (an :class:`IndexedDataset`, or anything the
            subclass's ``build_low_level_dataset`` returns).
        dataset_path: the prefix it was opened from (bookkeeping), or None.
        indices: the low-level elements (documents) of this split.
        num_samples: samples to build, or None for one epoch.
        index_split: the :class:`Split`.
        config: the :class:`BlendedMegatronDatasetConfig`.
    """

    def __init__(
        self,
        dataset: LowLevelDataset,
        dataset_path: str | None,
        indices: numpy.ndarray | range,
        num_samples: int | None,
        index_split: Split,
        config: BlendedMegatronDatasetConfig,
    ) -> None:
        self.dataset = dataset
        self.dataset_path = dataset_path
        self.indices = indices
        self.num_samples = num_samples
        self.index_split = index_split
        self.config = config
        self._pad_token_id = pad_token_id(config)

    @property
    def unique_identifiers(self) -> OrderedDict:
        cached = self.__dict__.get("_unique_identifiers")
        if cached is None:
            cached = OrderedDict()
            cached["class"] = type(self).__name__
            cached["dataset_path"] = self.dataset_path
            cached["num_samples"] = self.num_samples
            cached["index_split"] = self.index_split.name
            for attr in self._key_config_attributes():
                cached[attr] = getattr(self.config, attr)
            self.__dict__["_unique_identifiers"] = cached
        return cached

    @unique_identifiers.setter
    def unique_identifiers(self, value: OrderedDict) -> None:
        self.__dict__["_unique_identifiers"] = value
        self.__dict__.pop("_unique_description", None)

    @property
    def unique_description(self) -> str:
        cached = self.__dict__.get("_unique_description")
        if cached is None:
            cached = json.dumps(
                self.unique_identifiers, indent=4, default=lambda obj: obj.unique_identifiers
            )
            self.__dict__["_unique_description"] = cached
        return cached

    @property
    def unique_description_hash(self) -> str:
        return hashlib.md5(
            self.unique_description.encode("utf-8"), usedforsecurity=False
        ).hexdigest()

    @staticmethod
    def numel_low_level_dataset(low_level_dataset: LowLevelDataset) -> int:
        """The number of elements the split string divides."""
        raise NotImplementedError

    @staticmethod
    def build_low_level_dataset(
        dataset_path: str, config: BlendedMegatronDatasetConfig
    ) -> LowLevelDataset:
        """Open the low-level dataset at ``dataset_path``."""
        raise NotImplementedError

    @staticmethod
    def _key_config_attributes() -> list[str]:
        """Config attributes that identify the dataset (in ``unique_identifiers``)."""
        return ["random_seed", "sequence_length", "split", "split_matrix", "tokenizer"]

    @abstractmethod
    def __len__(self) -> int:
        pass

    @abstractmethod
    def __getitem__(self, idx: int) -> dict:
        pass
