"""``megatron.core.datasets.blended_dataset``: datasets read in Megatron's blended order.

``dataset_index`` / ``dataset_sample_index`` are megatron-core's values (megadata's
``megatron`` blend order). Over GPT datasets the blend is a
:class:`megadata_core.BlendedDataset` (``ds.core``; cached content-addressed); over any
other :class:`MegatronDataset` the indices are built by the same functions and cached
under ``path_to_cache`` keyed by the members' ``unique_identifiers``, as Megatron keys
them. A blend asking a member for more samples than it holds raises IndexError, as
megatron-core does (callers catch it), and names the member and the surplus to raise.
"""

from __future__ import annotations

import json
import logging

import numpy
import torch

import megadata_core as mdc
from megadata_adapters.trainers.megatron_datasets import megatron_cache
from megadata_adapters.trainers.megatron_datasets._errors import require
from megadata_adapters.trainers.megatron_datasets.utils import log_single_rank, normalize
from megadata_core.cache.entries import load_or_build
from megadata_core.cache.keys import megatron_blend_description
from megadata_core.errors import OversampledError
from megadata_core.indices.blending import (
    blend_counts,
    megatron_blending_indices,
    megatron_exhaustive_blending_indices,
)

logger = logging.getLogger(__name__)

_ARRAYS = ("dataset_index", "dataset_sample_index")


class _OversampledError(OversampledError, IndexError):
    """A blend asks a dataset for more samples than it has (Megatron: IndexError)."""


class BlendedDataset(torch.utils.data.Dataset):
    """megatron-core's BlendedDataset (same constructor and attributes).

    Args:
        datasets: the member datasets, all of one class and one split.
        weights: one weight per dataset, > 0; with ``size`` None, whole numbers: the
            samples drawn from each dataset (Megatron's exhaustive blend).
        size: samples in the blend, or None.
        config: the config (``path_to_cache``, ``mid_level_dataset_surplus``).
    """

    def __init__(self, datasets: list, weights: list, size: int | None, config) -> None:
        require(
            len(datasets) == len(weights),
            f"weights: {len(weights)} weights for {len(datasets)} datasets",
        )
        require(len(datasets) < 32767, f"datasets: {len(datasets)} datasets, at most 32766")
        require(
            all(type(d) is type(datasets[0]) for d in datasets),
            f"datasets: mixed classes {sorted({type(d).__name__ for d in datasets})}",
        )
        require(
            all(d.index_split == datasets[0].index_split for d in datasets),
            "datasets: members come from different splits",
        )
        require(all(w > 0 for w in weights), f"weights: {weights!r} must all be > 0")
        require(
            all(type(w) is type(weights[0]) for w in weights),
            f"weights: {weights!r} mix types",
        )
        if size is None and isinstance(weights[0], float):
            require(
                all(w == int(w) for w in weights),
                f"weights: {weights!r} must be whole numbers when size is None",
            )
        if len(datasets) == 1:
            log_single_rank(
                logger, logging.WARNING, "Building a BlendedDataset for a single MegatronDataset"
            )
        given = list(weights)
        if size is not None:
            weights = normalize(weights)
        self.datasets = datasets
        self.split = datasets[0].index_split
        self.weights = weights
        self.size = size
        self.config = config
        self.core: mdc.BlendedDataset | None = None
        self._given = given
        # None until the blend is loaded (deferred: at the first sample)
        self.dataset_index: numpy.ndarray | None = None
        self.dataset_sample_index: numpy.ndarray | None = None
        from megadata_adapters.trainers.megatron_datasets.gpt_dataset import GPTDataset

        if all(isinstance(d, GPTDataset) for d in datasets):
            if not (getattr(config, "defer_npy_index_mmap", False) and config.path_to_cache):
                self._load_core()  # else at the first sample, as megatron-core defers it
        else:
            self._build_generic()

    def _load_core(self) -> None:
        """The blend of the members' megadata datasets: its indices from Megatron's cache
        files when they are there and verified (:mod:`.megatron_cache`), else built and
        written there in Megatron's layout."""
        from megadata_adapters.trainers.megatron_datasets.gpt_dataset import core_config

        config = core_config(self.config, blend=None, blend_per_split=None, split=None)
        cores = [d.core for d in self.datasets]

        def blend(arrays=None, cache=True):
            try:
                return mdc.BlendedDataset(
                    cores, self._given, self.size, config, arrays=arrays, use_cache=cache,
                )  # megadata normalizes the weights as megatron-core does here
            except OversampledError as error:
                raise _OversampledError(str(error)) from error

        arrays, base = None, None
        if self.config.path_to_cache:
            base = megatron_cache.base_path(
                self.config.path_to_cache, self.unique_description, type(self).__name__,
                self.split.name,
            )
            arrays = megatron_cache.load(
                base, self.unique_description, megatron_cache.BLEND_FILES,
                lambda: blend(cache=False).index_arrays,
            )
        if arrays is not None:
            counts = blend_counts(numpy.asarray(arrays["dataset_index"]), len(cores))
            self.core = blend({**arrays, "dataset_counts": counts})
        else:
            self.core = blend()
            if base is not None:
                held = self.core.index_arrays
                megatron_cache.write(base, self.unique_description,
                                     {name: held[name] for name in megatron_cache.BLEND_FILES})
        self.dataset_index = self.core.dataset_index
        self.dataset_sample_index = self.core.dataset_sample_index

    @classmethod
    def _wrap(cls, core: mdc.BlendedDataset, datasets: list, config) -> BlendedDataset:
        """The Megatron view of a megadata BlendedDataset built by the builder."""
        self = cls.__new__(cls)
        self.datasets = datasets
        self.split = datasets[0].index_split
        self.weights = core.weights
        self.size = core.size
        self.config = config
        self.core = core
        self._given = list(core.weights)
        self.dataset_index = core.dataset_index
        self.dataset_sample_index = core.dataset_sample_index
        return self

    @property
    def unique_identifiers(self) -> dict:
        return {
            "class": type(self).__name__,
            "datasets": [dataset.unique_identifiers for dataset in self.datasets],
            "split": self.split.name,
            "weights": self.weights,
            "size": self.size,
        }

    @property
    def unique_description(self) -> str:
        return json.dumps(
            self.unique_identifiers, indent=4, default=lambda obj: obj.unique_identifiers
        )

    def _build_generic(self) -> None:
        def build() -> dict:
            if self.size is None:
                index, sample = megatron_exhaustive_blending_indices(self.weights)
            else:
                index, sample = megatron_blending_indices(self.weights, self.size, normalize=False)
            return {"dataset_index": index, "dataset_sample_index": sample}

        description = megatron_blend_description(json.loads(self.unique_description))
        arrays = load_or_build(
            getattr(self.config, "path_to_cache", None),
            description,
            self.split.name,
            build,
            names=_ARRAYS,
        )
        self.dataset_index = arrays["dataset_index"]
        self.dataset_sample_index = arrays["dataset_sample_index"]
        counts = numpy.bincount(
            numpy.asarray(self.dataset_index, numpy.int64), minlength=len(self.datasets)
        )
        lengths = numpy.array([len(d) for d in self.datasets], numpy.int64)
        over = numpy.flatnonzero(counts > lengths)
        if len(over):
            j = int(over[0])
            raise _OversampledError(
                f"weights: the {self.split.name} blend asks {int(counts[j])} samples of "
                f"dataset {j} ({type(self.datasets[j]).__name__}, {int(lengths[j])} samples); "
                "raise mid_level_dataset_surplus (e.g. two- or ten-fold, from "
                f"{getattr(self.config, 'mid_level_dataset_surplus', '?')})"
            )

    def __len__(self) -> int:
        if self.dataset_index is None:  # deferred: megatron-core's count
            return self.size if self.size is not None else int(sum(self.weights))
        return len(self.dataset_index)

    def __getitem__(self, idx: int) -> dict:
        """``{"dataset_id": j, **datasets[j][k]}``."""
        if self.dataset_index is None:
            self._load_core()
        assert self.dataset_index is not None and self.dataset_sample_index is not None  # loaded
        dataset_id = self.dataset_index[idx]
        sample_id = int(self.dataset_sample_index[idx])
        return {"dataset_id": dataset_id, **self.datasets[int(dataset_id)][sample_id]}
