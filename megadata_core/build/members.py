"""The GPT datasets of a build: its corpora, every distinct job's member built once, the splits.

The corpora: one :class:`IndexedDataset` per prefix, opened once, validated once, named
in errors, shared by every split and member that reads it, all under one bound of open
files (``config.max_open_files``). With a cache directory a corpus's .idx is validated
once per file identity and vouched for by the cache's record after that
(:mod:`megadata_core.cache.corpus_trust`). A warm start from a blend record replaces the
opened corpora by record-described ones, each opened at its first read
(:class:`megadata_core.cache.blend_record.RecordedCorpora`).

The members: a job whose index is small (fewer than ``in_memory_below`` entries, see
:func:`megadata_core.build.plan.index_entries`) is built in memory, in this thread:
rebuilding such an index costs no more than loading it from the cache, much less than
writing a new entry (docs/benchmarks.md), and holds no open files; Megatron-shuffled
concat ones are built all at once
(:func:`megadata_core.indices.gpt_many.gpt_indices_many`). The other jobs go through the
cache in a thread pool (their time is large numpy operations and file I/O, which release
the GIL), each member made as soon as its arrays are mapped (its maps count against the
corpora's open files from then on). Members whose arrays are in memory (built here, or a
build bundle's) are made per split as siblings of one fully checked dataset
(:meth:`GPTDataset.siblings`), by one method whatever the arrays' source.

The splits (:func:`assemble`): one from its recipe and its built members, a GPTDataset, a
list, or a blend.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import numpy as np

from megadata_core.build.plan import Job, Recipe, in_memory_jobs, member_documents
from megadata_core.cache.corpus_trust import ensure_validated
from megadata_core.cache.keys import document_ids
from megadata_core.datasets.blended_dataset import BlendedDataset, LazyMembers
from megadata_core.datasets.gpt_arrays import drops_last, gpt_arrays
from megadata_core.datasets.gpt_dataset import GPTDataset
from megadata_core.errors import DataError
from megadata_core.format import IndexedDataset
from megadata_core.format.reader import OpenFiles
from megadata_core.indices import splits
from megadata_core.indices.gpt import GPT_ARRAYS
from megadata_core.indices.gpt_many import gpt_indices_many
from megadata_core.indices.schedule import epoch_seed

Arrays = dict[str, np.ndarray]
_PROBE_OPENS = 8  # corpora opened (and timed) before choosing threads or not


def run_all(function: Callable, items: list, max_workers: int | None) -> list:
    """``[function(item) for item in items]``, in a thread pool unless one worker."""
    if max_workers == 1 or len(items) <= 1:
        return [function(item) for item in items]
    with ThreadPoolExecutor(max_workers=max_workers) as pool:
        return list(pool.map(function, items))


def _open_all(open_one: Callable, prefixes: list[str], max_workers: int | None) -> list:
    """``[open_one(prefix) ...]``. With ``max_workers=None`` the first few are opened in
    this thread, timed: when they spent most of their time waiting (a network file
    system), the rest are opened in a thread pool, else here too (on a local disk,
    threads only contend for the GIL: measured 10-20% slower)."""
    if max_workers is not None:
        return run_all(open_one, prefixes, max_workers)
    probe = prefixes[:_PROBE_OPENS]
    wall, cpu = time.perf_counter(), time.thread_time()
    opened = [open_one(prefix) for prefix in probe]
    wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
    waiting = wall - cpu > cpu
    return opened + run_all(open_one, prefixes[len(probe):], None if waiting else 1)


class Corpora(Mapping):
    """prefix -> corpus, for the prefixes of a build.

    Args:
        fields: prefix -> the config field that names it (``blend``,
            ``blend_per_split[valid]``, ...), in the build's order.
        path_to_cache: the cache directory (its records vouch for validated corpora).
        mmap: whether .bin files are memory-mapped (``mmap_bin_files``).
        max_open_files: the bound on descriptors and maps of every corpus of the build.
        max_workers: threads that open corpora (see :func:`_open_all`).
    """

    def __init__(
        self,
        fields: dict[str, str],
        *,
        path_to_cache: str | None,
        mmap: bool,
        max_open_files: int,
        max_workers: int | None,
    ) -> None:
        self.fields, self.max_workers = fields, max_workers
        self.path_to_cache, self.mmap = path_to_cache, mmap
        self.prefixes = list(fields)
        # prefix -> its IndexedDataset (or a record-described corpus): untyped corpora
        self.opened: Mapping[str, Any] = {}
        # One bound for every corpus of the build: their .bin maps / descriptors.
        self.open_files = OpenFiles(max_open_files)

    def open(self, *, validate: bool) -> None:
        """Open every prefix (``validate``: check its .idx arrays now, or vouch for them
        from the cache's record; else later, see :meth:`validate`)."""
        one = self._validated if validate else self._deferred
        self.opened = dict(zip(self.prefixes, _open_all(one, self.prefixes, self.max_workers)))

    def use_recorded(self, recorded: Mapping[str, Any]) -> None:
        """Serve record-described corpora instead (nothing opened until read)."""
        self.opened = recorded

    def validate(self, prefix: str) -> None:
        """Validate an opened corpus (unless done or vouched for)."""
        try:
            ensure_validated(self.opened[prefix], self.path_to_cache)
        except DataError as error:
            raise self.error(prefix, error) from error

    def error(self, prefix: str, error: Exception) -> DataError:
        """``error`` as a DataError naming the config field and the prefix."""
        return DataError(
            f"{self.fields[prefix]}: dataset prefix {prefix!r} cannot be opened: {error}"
        )

    def _deferred(self, prefix: str):
        try:
            corpus = IndexedDataset.open_deferred(prefix, mmap=self.mmap)
        except DataError as error:
            raise self.error(prefix, error) from error
        corpus.share_open_files(self.open_files)
        return corpus

    def _validated(self, prefix: str):
        corpus = self._deferred(prefix)
        try:
            ensure_validated(corpus, self.path_to_cache)
        except DataError as error:
            raise self.error(prefix, error) from error
        return corpus

    def __getitem__(self, prefix: str):
        return self.opened[prefix]

    def __iter__(self):
        return iter(self.prefixes)

    def __len__(self) -> int:
        return len(self.prefixes)


class Members:
    """Makes the members of a build.

    Args:
        config: the build's config.
        corpora: the build's opened corpora.
        token_dtype: dtype of the samples' tokens (int32 or int64).
        max_workers: threads for the members built through the cache.
        in_memory_below: members with smaller indices are built in memory.
        progress: called with 1 as each member is made (e.g. a tqdm bar's update).
    """

    def __init__(
        self,
        config,
        corpora: Corpora,
        token_dtype,
        max_workers: int | None,
        in_memory_below: int,
        progress: Callable[[int], object] | None,
    ) -> None:
        self.config, self.corpora = config, corpora
        self.memory_config = (
            config if config.path_to_cache is None else replace(config, path_to_cache=None)
        )
        self.token_dtype, self.max_workers = token_dtype, max_workers
        self.in_memory_below = in_memory_below
        self.progress = progress or (lambda count: None)
        self._epoch_configs: dict[tuple[int, int], object] = {}

    def epoch_config(self, config, epoch: int):
        """``config`` (the build's, or its in-memory copy) for a job's ``epoch``: its own
        seed (:func:`~megadata_core.indices.schedule.epoch_seed`) past epoch 0."""
        if epoch == 0:
            return config
        key = (id(config), epoch)
        made = self._epoch_configs.get(key)
        if made is None:
            seed = epoch_seed(config.random_seed, epoch)
            made = self._epoch_configs[key] = config.with_random_seed(seed)
        return made

    def in_memory(self, jobs: list[Job]) -> set[Job]:
        """The jobs whose index is built in memory (all of them without a cache)."""
        if self.config.path_to_cache is None:
            return set(jobs)
        return in_memory_jobs(self.corpora.opened, jobs, self.config, self.in_memory_below)

    def build(
        self, jobs: list[Job], small: set[Job]
    ) -> tuple[dict[Job, GPTDataset], dict[Job, Arrays]]:
        """Every job's member, and the index arrays of the ``small`` ones (built in
        memory; the others' go through the cache)."""
        arrays = self._small_arrays([job for job in jobs if job in small])
        built = self.datasets(list(arrays), arrays)
        large = [job for job in jobs if job not in small]
        built.update(zip(large, self.through_cache(large)))
        return {job: built[job] for job in jobs}, arrays

    def through_cache(self, jobs: list[Job]) -> list[GPTDataset]:
        """The members of ``jobs``, their indices loaded from (or built into) the cache,
        in a thread pool."""
        return run_all(lambda job: self._made(job, self.config), jobs, self.max_workers)

    def _made(self, job: Job, config) -> GPTDataset:
        dataset = self.dataset(job, config)
        self.progress(1)
        return dataset

    def _arrays(self, job: Job) -> Arrays:
        """One job's index arrays, built in memory."""
        indexed = self.corpora.opened[job.prefix]
        documents = member_documents(job, len(indexed))
        try:
            ids, described = document_ids(indexed, documents)
            return gpt_arrays(
                self.epoch_config(self.memory_config, job.epoch), indexed, ids, described,
                job.num_samples, job.split,
            )
        except DataError as error:
            raise self._error(job, documents, error) from error

    def _small_arrays(self, jobs: list[Job]) -> dict[Job, Arrays]:
        """The arrays of ``jobs`` built in memory: Megatron-shuffled concat indices of all
        of them at once (each with its epoch's seed); one at a time for the other orders
        and packings, or to name a job that cannot be built."""
        config = self.memory_config
        if len(jobs) < 2 or not config.packing_mode.batched(config.shuffle_mode):
            return {job: self._arrays(job) for job in jobs}
        corpora = [self.corpora.opened[job.prefix] for job in jobs]
        firsts, ends = splits.document_bounds(
            [job.bookend for job in jobs], [len(corpus) for corpus in corpora]
        )
        try:
            indices = gpt_indices_many(
                [np.asarray(corpus.sequence_lengths) for corpus in corpora],
                [range(first, end) for first, end in zip(firsts.tolist(), ends.tolist())],
                config.sequence_length,
                [job.num_samples for job in jobs],
                [epoch_seed(config.random_seed, job.epoch) for job in jobs],
                add_extra_token=config.add_extra_token_to_sequence,
                drop_last_partial_sequence=[drops_last(config, job.split) for job in jobs],
            )
        except DataError:  # the job-by-job build names the prefix and split
            return {job: self._arrays(job) for job in jobs}
        return {job: dict(zip(GPT_ARRAYS, trio)) for job, trio in zip(jobs, indices)}

    # -- datasets -------------------------------------------------------------------

    def datasets(
        self, jobs: list[Job], arrays: dict[Job, Arrays], origin: str | None = None
    ) -> dict[Job, GPTDataset]:
        """The members of ``jobs`` from their index ``arrays`` (in memory, or views of a
        bundle's blob; ``origin``: where they came from): siblings of the first
        (:meth:`GPTDataset.siblings`: their shared checks made once, whatever their split)."""
        if not jobs:
            return {}
        epochs = sorted({job.epoch for job in jobs})
        if len(epochs) > 1:  # siblings share their template's config, so its seed
            made: dict[Job, GPTDataset] = {}
            for epoch in epochs:
                group = [job for job in jobs if job.epoch == epoch]
                made.update(self.datasets(group, arrays, origin))
            return {job: made[job] for job in jobs}
        first, rest = jobs[0], jobs[1:]
        template = self.dataset(first, self.memory_config, arrays[first], origin)
        opened = self.corpora.opened
        lows, highs = splits.document_bounds(
            [job.bookend for job in rest], [len(opened[job.prefix]) for job in rest]
        )
        siblings = template.siblings(
            [opened[job.prefix] for job in rest],
            [range(low, high) for low, high in zip(lows.tolist(), highs.tolist())],
            [job.num_samples for job in rest], [arrays[job] for job in rest], origin,
            [job.split for job in rest],
        )
        for _ in jobs:
            self.progress(1)
        return dict(zip(jobs, [template, *siblings]))

    def dataset(
        self, job: Job, config, arrays: Arrays | None = None, origin: str | None = None
    ) -> GPTDataset:
        """One member (its index ``arrays`` given, or built), errors naming the config
        field, the prefix, the split and the documents."""
        indexed = self.corpora.opened[job.prefix]
        documents = member_documents(job, len(indexed))
        config = self.epoch_config(config, job.epoch)
        try:
            return GPTDataset(
                indexed, documents, job.num_samples, config, job.split,
                token_dtype=self.token_dtype, arrays=arrays, origin=origin,
            )
        except DataError as error:
            raise self._error(job, documents, error) from error

    def _error(self, job: Job, documents: range, error: DataError) -> DataError:
        return DataError(
            f"{self.corpora.fields[job.prefix]}: dataset prefix {job.prefix!r} ({job.split} "
            f"split, documents [{documents.start}, {documents.stop})): {error}"
        )


def blend_inputs(recipe: Recipe, members) -> tuple[Sequence[float], int | None]:
    """A blend recipe's weights and size (weights None: the members' lengths, and the size
    capped by their sum, as Megatron's int weights)."""
    if recipe.weights is not None:
        return recipe.weights, recipe.size
    lengths: list[int] = (
        members.lengths.tolist() if isinstance(members, LazyMembers)
        else [len(dataset) for dataset in members]
    )
    size = recipe.size
    if size is not None:
        size = min(size, sum(lengths))
    return lengths, size


def blend_samples(recipe: Recipe, built: dict[Job, GPTDataset]) -> int:
    """Samples of a blend recipe (an exhaustive blend holds the sum of the weights)."""
    weights, size = blend_inputs(recipe, [built[job] for job in recipe.jobs])
    # (no size: weights None, so the members' int lengths; a weighted blend has a size)
    return int(sum(weights)) if size is None else size


def assemble(
    recipe: Recipe | None,
    built: dict[Job, GPTDataset],
    config,
    *,
    arrays: dict | None = None,
    use_cache: bool = True,
    members: LazyMembers | None = None,
    origin: str | None = None,
) -> GPTDataset | BlendedDataset | list[GPTDataset] | LazyMembers | None:
    """One split from its recipe and the built datasets (a blend's index ``arrays``
    given, from ``origin``, or built in memory without ``use_cache``; a blend's
    ``members`` given, made at first read)."""
    if recipe is None:
        return None
    datasets = members if members is not None else [built[job] for job in recipe.jobs]
    if recipe.kind == "single":
        return datasets[0]
    if recipe.kind == "list":
        return datasets
    weights, size = blend_inputs(recipe, datasets)
    return BlendedDataset(
        datasets, weights, size, config, arrays=arrays, use_cache=use_cache, origin=origin
    )
