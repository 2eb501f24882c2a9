"""``megatron.core.datasets.blended_megatron_dataset_builder``: splits from a config.

``BlendedMegatronDatasetBuilder(cls, sizes, is_built_on_rank, config).build()`` returns
``[train, valid, test]`` as megatron-core does: None for a split without data, a ``cls``
instance for a single unweighted prefix, else a :class:`BlendedDataset`; size None = the
whole split, size 0 = an empty dataset.

GPT datasets (``GPTDataset``, ``MockGPTDataset`` and subclasses that keep their
constructor) are built by :func:`megadata_core.build_datasets` in one call (its thread
pool and build bundle: a warm start of a 1,000-prefix blend loads one cache entry) and
wrapped. Any other :class:`MegatronDataset` subclass is built by Megatron's recipe here,
through its own ``build_low_level_dataset`` / ``numel_low_level_dataset`` / constructor.

With torch.distributed initialized, rank 0 builds first (writing the index cache), then,
after a barrier, the other ranks build (loading it); a rank whose ``is_built_on_rank()``
is False gets None for every split. Every rank must call ``build()``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy
import torch

import megadata_core as mdc
from megadata_adapters.trainers.megatron_datasets import megatron_cache
from megadata_adapters.trainers.megatron_datasets._errors import require
from megadata_adapters.trainers.megatron_datasets.blended_dataset import BlendedDataset
from megadata_adapters.trainers.megatron_datasets.gpt_dataset import (
    GPTDataset,
    GPTDatasetConfig,
    MockGPTDataset,
    MockGPTLowLevelDataset,
    core_config,
)
from megadata_adapters.trainers.megatron_datasets.indexed_dataset import (
    IndexedDataset,
    check_counts,
)
from megadata_adapters.trainers.megatron_datasets.megatron_dataset import MegatronDataset
from megadata_adapters.trainers.megatron_datasets.object_storage_utils import is_object_storage_path
from megadata_adapters.trainers.megatron_datasets.utils import Split, log_single_rank
from megadata_core.build import check_sizes, plan_build
from megadata_core.build.members import blend_inputs
from megadata_core.build.plan import distinct_jobs
from megadata_core.indices.splits import document_range

logger = logging.getLogger(__name__)

MidLevelDataset = MegatronDataset

_GPT_HOOKS = (
    "__init__",
    "build_low_level_dataset",
    "numel_low_level_dataset",
    "_key_config_attributes",
)


def _served_by_core(cls: type, config) -> bool:
    """Whether ``cls`` builds exactly as GPTDataset / MockGPTDataset (megadata's builder
    can then build every split at once). Not with ``defer_npy_index_mmap``: each dataset
    is made then, its arrays waiting for its first sample."""
    if not isinstance(config, GPTDatasetConfig):
        return False
    if getattr(config, "defer_npy_index_mmap", False) and config.path_to_cache:
        return False
    base = MockGPTDataset if config.mock else GPTDataset
    if not issubclass(cls, base):
        return False
    return all(getattr(cls, name) is getattr(base, name) for name in _GPT_HOOKS)


class BlendedMegatronDatasetBuilder:
    """Builds the train/valid/test datasets of ``config`` (megatron-core's signature).

    Args:
        cls: the mid-level dataset class (a :class:`MegatronDataset` subclass).
        sizes: samples per split (None: the whole split; 0: an empty dataset).
        is_built_on_rank: with torch.distributed, whether this rank builds at all.
        config: a :class:`BlendedMegatronDatasetConfig`.
    """

    def __init__(
        self,
        cls: type[MidLevelDataset],
        sizes: list[int | None],
        is_built_on_rank: Callable[[], bool],
        config,
    ) -> None:
        self.cls = cls
        self.sizes = sizes
        self.is_built_on_rank = is_built_on_rank
        self.config = config
        require(len(sizes) == len(Split), f"sizes: {sizes!r} must give one size per split")
        if config.mock:
            return
        for split in Split:
            if config.blend_per_split is None:
                blend = config.blend
            else:
                blend = config.blend_per_split[split.value]
                if blend is None:
                    continue
            if sizes[split.value] is None:
                require(
                    blend[1] is None,
                    f"sizes: the {split.name} size is None but its blend has weights "
                    f"{blend[1]!r}; weighted blends need a size (with multiple validation "
                    "sets, give the validation datasets no weights)",
                )

    def build(self) -> list:
        """``[train, valid, test]``; call on every rank."""
        if torch.distributed.is_initialized():
            rank = torch.distributed.get_rank()
            if rank == 0:
                datasets = self._build_on_rank()
            torch.distributed.barrier()
            if rank != 0:
                datasets = self._build_on_rank()
        else:
            datasets = self._build_here()
        for dataset in datasets:
            if isinstance(dataset, BlendedDataset) and len(dataset) > 0:
                require(
                    dataset.size is None or dataset.size == len(dataset),
                    f"blend: {len(dataset)} samples built, {dataset.size} asked",
                )
            elif isinstance(dataset, MegatronDataset) and len(dataset) > 0:
                require(
                    dataset.num_samples is None or dataset.num_samples <= len(dataset),
                    f"num_samples: {dataset.num_samples} asked, {len(dataset)} built",
                )
        return datasets

    def _build_on_rank(self) -> list:
        if not self.is_built_on_rank():
            return [None] * len(Split)
        return self._build_here()

    def _build_here(self) -> list:
        if _served_by_core(self.cls, self.config):
            return self._build_with_core()
        return self._build_generic()

    # -- GPT: megadata's builder ----------------------------------------------------

    def _build_with_core(self) -> list:
        config = self.config
        cls = self.cls
        assert issubclass(cls, GPTDataset)  # _served_by_core
        vocab_size = None
        if config.mock:
            vocab_size = config.tokenizer.vocab_size
        else:
            for prefix in _prefixes(config):
                if is_object_storage_path(prefix):
                    require(
                        config.object_storage_cache_path is not None,
                        f"object_storage_cache_path: needed for {prefix}",
                    )
        built = mdc.build_datasets(
            core_config(config),
            list(self.sizes),
            mock=config.mock,
            vocab_size=vocab_size,
            max_workers=None if config.num_dataset_builder_threads > 1 else 1,
            token_dtype=numpy.int64,
        )
        corpora: dict[int, object] = {}

        def low_level(corpus):
            view = corpora.get(id(corpus))
            if view is None:
                if isinstance(corpus, mdc.IndexedDataset):
                    view = IndexedDataset._of(corpus, config)
                    if config.sequences_per_dataset:
                        counts = config.sequences_per_dataset.get(corpus.path_prefix)
                        check_counts(corpus.idx_path, view.index, counts, None)
                else:
                    view = MockGPTLowLevelDataset._of(corpus)
                corpora[id(corpus)] = view
            return view

        def wrap(dataset):
            if dataset is None:
                return None
            if isinstance(dataset, list):
                return [wrap(member) for member in dataset]
            if isinstance(dataset, mdc.BlendedDataset):
                members = [wrap(member) for member in dataset.datasets]
                return BlendedDataset._wrap(dataset, members, config)
            return cls._wrap(dataset, low_level(dataset.indexed), config)

        splits = [wrap(dataset) for dataset in built]
        corpora.clear()  # wrap (recursive) is a cycle: it would hold them open until collected
        if config.path_to_cache and not config.mock and _writes_shared_files():
            marker = megatron_cache.build_marker(config, self.cls.__name__, self.sizes)
            if not os.path.exists(marker):  # once per build of this config

                def share() -> None:
                    share_megatron_cache(splits)
                    megatron_cache.mark(marker)

                if _member_count(splits) < megatron_cache.SYNC_BELOW:
                    share()  # a few files: written before build() returns
                else:
                    megatron_cache.share_later(share)
        return splits

    # -- any MegatronDataset: Megatron's recipe -----------------------------------------

    def _build_generic(self) -> list:
        """Megatron's recipe through the core's plan (the same jobs and sizes as a GPT
        build: :func:`megadata_core.build.plan_build`), each job a ``cls`` dataset."""
        config = self.config
        if config.mock:
            return self._mid_level(None, config.split_matrix, self.sizes)
        recipes = plan_build(config, check_sizes(self.sizes))
        jobs, fields = distinct_jobs(recipes)
        by_prefix: dict[str, list] = {prefix: [] for prefix in fields}
        for job in jobs:
            by_prefix[job.prefix].append(job)
        threads = max(1, int(config.num_dataset_builder_threads))
        items = list(by_prefix.items())
        if threads == 1 or len(items) <= 1:
            rows = [self._jobs_of_prefix(*item) for item in items]
        else:
            with ThreadPoolExecutor(max_workers=threads) as pool:
                rows = list(pool.map(lambda item: self._jobs_of_prefix(*item), items))
        made = {job: dataset for row in rows for job, dataset in row}
        return [self._split(recipe, made) for recipe in recipes]

    def _jobs_of_prefix(self, prefix: str, jobs: list) -> list:
        """``(job, cls dataset)`` for every job of one low-level dataset."""
        low_level = self.cls.build_low_level_dataset(prefix, self.config)
        count = self.cls.numel_low_level_dataset(low_level)
        made = []
        for job in jobs:  # a job's book-end is never None
            span = document_range(job.bookend, count)
            made.append((job, self.cls(
                low_level, prefix, numpy.arange(span.start, span.stop, dtype=numpy.int32),
                job.num_samples, Split[job.split], self.config,
            )))
        return made

    def _split(self, recipe, made: dict):
        """One split from its recipe: a dataset, a list of them, or a BlendedDataset."""
        if recipe is None:
            return None
        members = [made[job] for job in recipe.jobs]
        if recipe.kind == "single":
            return members[0]
        if recipe.kind == "list":
            return members
        weights, size = blend_inputs(recipe, members)
        return BlendedDataset(members, list(weights), size, self.config)  # Megatron's list

    def _mid_level(self, dataset_path, matrix, sizes) -> list:
        """The ``cls`` dataset of each split of one low-level dataset (None where the
        split matrix has no range)."""
        low_level = self.cls.build_low_level_dataset(dataset_path, self.config)
        count = self.cls.numel_low_level_dataset(low_level)
        datasets: list[MidLevelDataset | None] = []
        for i, split in enumerate(Split):
            if matrix[i] is None:
                datasets.append(None)
                continue
            begin = int(round(matrix[i][0] * float(count)))
            end = int(round(matrix[i][1] * float(count)))
            indices = numpy.arange(begin, end, dtype=numpy.int32)
            datasets.append(
                self.cls(low_level, dataset_path, indices, sizes[i], split, self.config)
            )
        return datasets

    @staticmethod
    def build_generic_dataset(cls, is_built_on_rank: Callable, synchronize_ranks: bool, *args):
        """``cls(*args)``, on rank 0 first when torch.distributed is initialized (then
        a barrier if ``synchronize_ranks``, then the other ranks); None on ranks where
        ``is_built_on_rank()`` is False."""
        if not torch.distributed.is_initialized():
            return cls(*args)
        rank = torch.distributed.get_rank()
        dataset = cls(*args) if rank == 0 and is_built_on_rank() else None
        if synchronize_ranks:
            torch.distributed.barrier()
        if rank != 0 and is_built_on_rank():
            dataset = cls(*args)
        return dataset


def _member_count(splits: list) -> int:
    """The datasets of ``splits`` (blends and their members)."""
    count = 0
    for split in splits:
        for item in split if isinstance(split, list) else [split]:
            count += 0 if item is None else 1 + len(getattr(item, "datasets", ()))
    return count


def _writes_shared_files() -> bool:
    """Rank 0 writes the shared files (every process without torch.distributed)."""
    return not torch.distributed.is_initialized() or torch.distributed.get_rank() == 0


def share_megatron_cache(splits: list) -> None:
    """Write Megatron's cache files of every dataset of ``splits`` that lacks them (its
    members' too), so that a stock megatron-core job on the same ``path_to_cache`` starts
    warm, and verify the ones a stock job wrote against megadata's arrays (recorded, or a
    warning: :mod:`.megatron_cache`)."""
    datasets = []
    for split in splits:
        for item in split if isinstance(split, list) else [split]:
            if item is None or getattr(item, "core", None) is None:
                continue
            datasets.append(item)
            if isinstance(item, BlendedDataset):
                datasets.extend(item.datasets)
    sets = []
    for item in dict.fromkeys(datasets):  # a member of two blends is one set
        blend = isinstance(item, BlendedDataset)
        names = megatron_cache.BLEND_FILES if blend else megatron_cache.GPT_FILES
        split = item.split if blend else item.index_split
        base = megatron_cache.base_path(
            item.config.path_to_cache, item.unique_description, type(item).__name__, split.name
        )
        sets.append((item, names, base))
    if not sets:
        return
    megatron_cache.sweep(os.path.dirname(sets[0][2]), [
        name for _, names, base in sets for name in megatron_cache.file_names(base, names)
    ])
    for item, names, base in sets:  # one set's arrays held at a time (max_open_files)

        def arrays(item=item, names=names) -> dict:
            held = item.core.index_arrays
            return {name: held[name] for name in names}

        if megatron_cache.present(base, names):
            megatron_cache.load(base, item.unique_description, names, arrays)
        else:
            megatron_cache.write(base, item.unique_description, arrays(), clean=False)


def _prefixes(config) -> list[str]:
    blends = [config.blend] if config.blend else list(config.blend_per_split or [])
    return [prefix for blend in blends if blend for prefix in blend[0]]


__all__ = ["BlendedMegatronDatasetBuilder", "log_single_rank"]
