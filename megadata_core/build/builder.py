"""``build_datasets``: megatron-core 0.16.1's ``BlendedMegatronDatasetBuilder.build`` for GPT.

Given a :class:`GPTDataConfig` and the samples wanted per split, returns
``[train, valid, test]``, each None, a :class:`GPTDataset`, a :class:`BlendedDataset`
or (multiple validation sets) a list of GPTDatasets, with Megatron's lengths and values:

* ``blend`` + ``split``: the split string gives contiguous document ranges of every
  prefix (:mod:`megadata_core.indices.splits`); a single prefix without weights gives
  the GPTDatasets themselves; otherwise every split is a BlendedDataset over one
  GPTDataset per prefix.
* ``blend_per_split``: each split has its own blend over whole corpora; a single prefix
  gives a GPTDataset (its weight, if any, is ignored, as Megatron does).
* Weighted blends need a size: dataset j is asked for ``ceil(ceil(size * w_j) *
  (1 + mid_level_dataset_surplus))`` samples and the blend holds ``sum_j ceil(size *
  w_j)`` samples (which can exceed ``size``, as in Megatron). Without weights every
  dataset is one epoch (``num_samples=None``) and the blend is weighted by the dataset
  lengths: ``min(size, sum of lengths)`` samples, or every sample of every dataset
  (exhaustive) when the size is None.
* ``multiple_validation_sets`` (with ``blend_per_split``): the valid split is a list of
  one GPTDataset per prefix, each of the full valid size; ``full_validation`` requires
  that size to be None (one epoch each).
* ``mock=True`` with neither blend: Megatron's mock data
  (:class:`megadata_core.datasets.mock.MockGPTLowLevelDataset`), split ``"1,1,1"``.

The way down: the plan (:mod:`.plan`: recipes and jobs from the config and sizes
alone), the corpora and the members (:mod:`.members`: every prefix opened and validated
once; small indices built in memory, no file each; the others built, or loaded from
``config.path_to_cache``, in a thread pool), the splits (:func:`~.members.assemble`). A
build with a blend and a cache directory goes through one cache entry for the whole
build (:mod:`.bundle`): a restart on the same data loads it, reads each small .idx with
one read, validates nothing already validated and builds nothing.

A ``blend_schedule`` (``_build_schedule``) chains every prefix's passes, one schedule
per split. The first epoch of every prefix is built (one pass, its own order whatever the
schedule reads); the schedule's index arrays
(:func:`~megadata_core.datasets.scheduled_blend.schedule_index`, cached) say how many
samples it reads of each prefix; a prefix read past its epoch gets the passes it needs,
each shuffled with its own seed (:class:`~.plan.Job` ``epoch``), built like the first
ones (small ones in memory, the others through the cache, in one pool); each prefix's
passes become an :class:`EpochChain`, and the chains the split's
:class:`ScheduledBlendedDataset`.

Differences from Megatron: errors are DataErrors naming the field (Megatron asserts, or
loops forever on a split without tokens); a None size is accepted for a split that is
not built (Megatron's weighted ``blend`` rejects a None size for any split, even an
empty one) or whose weights are unused (single prefix, multiple validation sets);
``multiple_validation_sets`` is honoured only with ``blend_per_split``, as in Megatron.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence

import numpy as np

from megadata_core.build.bundle import BundledBuild
from megadata_core.build.members import Corpora, Members, assemble, run_all
from megadata_core.build.plan import Recipe, check_sizes, distinct_jobs, plan_build
from megadata_core.datasets.config import SPLIT_NAMES, GPTDataConfig, schedule_arrays
from megadata_core.datasets.gpt_dataset import GPTDataset
from megadata_core.datasets.mock import MockGPTLowLevelDataset
from megadata_core.datasets.raw_shards import RawShards, RawShardsDataset, split_pieces
from megadata_core.datasets.scheduled_blend import (
    EpochChain,
    ScheduledBlendedDataset,
    schedule_index,
)
from megadata_core.errors import DataError
from megadata_core.indices import splits

#: Indices smaller than this (document-index entries or samples) are built in memory.
IN_MEMORY_BELOW = 4096
_MOCK_SPLIT = "1,1,1"  # Megatron forces this split for mock data


def build_datasets(
    config: GPTDataConfig,
    sizes: Sequence[int | None],
    *,
    mock: bool = False,
    vocab_size: int | None = None,
    max_workers: int | None = None,
    token_dtype: np.typing.DTypeLike = np.int32,
    in_memory_below: int = IN_MEMORY_BELOW,
    progress: Callable[[int], object] | None = None,
) -> list:
    """Megatron's ``BlendedMegatronDatasetBuilder(GPTDataset, sizes, ..., config).build()``.

    ``progress(1)`` is called as each member dataset is built (e.g. a tqdm bar's update).

    Args:
        config: a :class:`GPTDataConfig` with ``blend`` (and ``split``) or
            ``blend_per_split``; neither for mock data (with ``mock=True``).
        sizes: samples wanted per split (train, valid, test); None = one epoch (or, for
            an unweighted blend, every sample of every dataset).
        mock: build Megatron's mock data (no files); needs ``vocab_size`` and
            ``config.eod_id``.
        vocab_size: the mock vocabulary size (Megatron: ``tokenizer.vocab_size``).
        max_workers: threads that open corpora and build the cached indices (None:
            Python's ThreadPoolExecutor default, and corpora are opened in threads only
            when opening the first ones was mostly waiting; 1: all in this thread).
        token_dtype: dtype of the samples' tokens, labels and position ids (int32 or
            int64), passed to every GPTDataset.
        in_memory_below: datasets whose index holds fewer entries (document-index
            entries or samples) are built in memory, without ``config.path_to_cache``:
            for small indices that is faster than a cache hit and keeps no file open
            (their ``config.path_to_cache`` is None). 0 sends every dataset through the
            cache.

    Returns:
        ``[train, valid, test]``: each None (not built), a GPTDataset, a BlendedDataset,
        or, for the valid split with ``multiple_validation_sets``, a list of GPTDatasets.

    Raises:
        DataError: bad sizes, blends, weights or split; a prefix that cannot be opened
            (named); a weighted split without a size.
    """
    if not isinstance(config, GPTDataConfig):
        raise DataError(f"config: expected GPTDataConfig, got {type(config).__name__}")
    sizes = check_sizes(sizes)
    if max_workers is not None and (not isinstance(max_workers, int) or max_workers < 1):
        raise DataError(f"max_workers: {max_workers!r} must be a positive int or None")
    has_blend = any(
        source is not None
        for source in (config.blend, config.blend_per_split, config.blend_schedule)
    )
    if mock:
        if has_blend:
            raise DataError(
                "mock: mock data takes no blend, blend_per_split or blend_schedule"
            )
        return _build_mock(config, sizes, vocab_size, token_dtype, max_workers)
    if not has_blend:
        raise DataError(
            "blend: none of blend, blend_per_split and blend_schedule is given (mock=True "
            "builds Megatron's mock data instead)"
        )
    recipes = plan_build(config, sizes)
    if isinstance(in_memory_below, bool) or not isinstance(in_memory_below, int):
        raise DataError(f"in_memory_below: {in_memory_below!r} is not an int")
    jobs, fields = distinct_jobs(recipes)
    raw = any(isinstance(job.prefix, RawShards) for job in jobs)
    corpora = Corpora(
        {p: f for p, f in fields.items() if not isinstance(p, RawShards)},
        path_to_cache=config.path_to_cache, mmap=config.mmap_bin_files,
        max_open_files=config.max_open_files, max_workers=max_workers,
    )
    members = Members(config, corpora, token_dtype, max_workers, in_memory_below, progress)
    if config.blend_schedule is not None:
        return _build_schedule(config, recipes, corpora, members)
    if raw:
        return _build_with_raw(config, recipes, jobs, corpora, members)
    if config.path_to_cache is not None and any(
        recipe is not None and recipe.kind == "blend" for recipe in recipes
    ):
        return BundledBuild(config, recipes, jobs, corpora, members).splits()
    corpora.open(validate=True)
    built, _ = members.build(jobs, members.in_memory(jobs))
    return [assemble(recipe, built, config) for recipe in recipes]


def _raw_dataset(job, config, members: Members) -> RawShardsDataset:
    """The :class:`RawShardsDataset` of a raw member's job."""
    corpus = job.prefix.corpus(config.path_to_cache)
    dataset = RawShardsDataset(job.prefix, corpus, split_pieces(corpus, job.bookend),
                               job.num_samples, config, job.split,
                               token_dtype=members.token_dtype)
    members.progress(1)
    return dataset


def _build_with_raw(config, recipes, jobs, corpora: Corpora, members: Members) -> list:
    """A build whose blends hold raw-shards members: the prefixes' members as any build
    makes them, each raw member a :class:`RawShardsDataset` of its split's pieces, the
    blends' arrays in memory."""
    plain = [job for job in jobs if not isinstance(job.prefix, RawShards)]
    built: dict = {}
    if plain:
        corpora.open(validate=True)
        built, _ = members.build(plain, members.in_memory(plain))
    for job in jobs:
        if isinstance(job.prefix, RawShards):
            built[job] = _raw_dataset(job, config, members)
    return [assemble(recipe, built, config, use_cache=False) for recipe in recipes]


def _build_mock(
    config: GPTDataConfig,
    sizes: Sequence[int | None],
    vocab_size: int | None,
    token_dtype: np.typing.DTypeLike,
    max_workers: int | None,
) -> list[GPTDataset]:
    """Megatron's mock splits: GPTDatasets over :class:`MockGPTLowLevelDataset`, split
    ``"1,1,1"`` of its 100,000 documents."""
    if vocab_size is None:
        raise DataError("vocab_size: mock data needs the vocabulary size (tokens are i % V)")
    if config.eod_id is None:
        raise DataError("eod_id: mock data needs it (every mock document ends with it)")
    if config.split is not None and splits.parse_split(config.split) != splits.parse_split(
        _MOCK_SPLIT
    ):
        warnings.warn(
            f"split: {config.split!r} is ignored for mock data; Megatron splits it "
            f"{_MOCK_SPLIT!r}",
            stacklevel=3,
        )
    corpus = MockGPTLowLevelDataset(vocab_size, config.eod_id)
    matrix = splits.split_matrix(splits.parse_split(_MOCK_SPLIT))
    ranges = splits.document_ranges(matrix, len(corpus))

    def one(split: int) -> GPTDataset:
        documents = ranges[split]
        if documents is None:  # (not reached: _MOCK_SPLIT gives every split documents)
            raise DataError(f"split: {_MOCK_SPLIT!r} leaves {SPLIT_NAMES[split]} empty")
        return GPTDataset(
            corpus, documents, sizes[split], config, SPLIT_NAMES[split],
            token_dtype=token_dtype,
        )

    return run_all(one, list(range(len(SPLIT_NAMES))), max_workers)


def _epochs(counts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """int64 [n]: the passes each prefix needs for ``counts`` samples (at least one)."""
    return np.maximum(1, -(-counts // np.maximum(lengths, 1)))


def _size(recipe: Recipe) -> int:
    """A schedule recipe's samples (``plan._plan_schedule``
    gives every one a size)."""
    if recipe.size is None:
        raise DataError(f"sizes[{recipe.jobs[0].split}]: None, but blend_schedule needs it")
    return recipe.size


def _build_schedule(
    config, recipes: list[Recipe | None], corpora: Corpora, members: Members
) -> list:
    """``[train, valid, test]`` of a config with a ``blend_schedule``: each None or a
    :class:`ScheduledBlendedDataset`.

    A prefix's pass is one epoch of its split, or, when one epoch holds no whole sample
    (a split of fewer tokens than a sample), the fewest epochs that hold one (Megatron's
    GPTDataset asked for 1 sample): its passes then never come up empty.
    """
    _, starts, weights = schedule_arrays(config.blend_schedule)
    corpora.open(validate=True)
    built: dict = {}

    def build(jobs: list) -> None:
        jobs = [job for job in dict.fromkeys(jobs)
                if job not in built and not isinstance(job.prefix, RawShards)]
        made, _ = members.build(jobs, members.in_memory(jobs))
        built.update(made)

    def lengths(units: list) -> np.ndarray:
        return np.array([len(built[unit]) for unit in units], dtype=np.int64)

    build([job for recipe in recipes if recipe for job in recipe.jobs])
    indices, units = {}, {}  # per split: the schedule's arrays, each prefix's pass
    for number, recipe in enumerate(recipes):
        if recipe is not None:
            arrays = indices[number] = schedule_index(
                config, recipe.jobs[0].split, starts, weights, _size(recipe)
            )
            reads = np.asarray(arrays["dataset_counts"]).tolist()
            for job, count in zip(recipe.jobs, reads):
                if isinstance(job.prefix, RawShards):  # one dataset of all its reads
                    built[job] = _raw_dataset(job._replace(num_samples=max(1, count)),
                                              config, members)
            units[number] = [
                job._replace(num_samples=1) if count and not len(built[job]) else job
                for job, count in zip(recipe.jobs, reads)
            ]
    build([unit for split_units in units.values() for unit in split_units])
    epochs = {
        number: _epochs(np.asarray(indices[number]["dataset_counts"], dtype=np.int64),
                        lengths(split_units)).tolist()
        for number, split_units in units.items()
    }
    build([
        unit._replace(epoch=epoch)
        for number, split_units in units.items()
        for unit, count in zip(split_units, epochs[number]) for epoch in range(1, count)
    ])
    return [
        None if recipe is None else ScheduledBlendedDataset(
            [
                EpochChain([built[unit._replace(epoch=epoch)] for epoch in range(count)])
                for unit, count in zip(units[number], epochs[number])
            ],
            starts, weights, _size(recipe), config, arrays=indices[number],
        )
        for number, recipe in enumerate(recipes)
    ]


__all__ = ["IN_MEMORY_BELOW", "build_datasets"]
