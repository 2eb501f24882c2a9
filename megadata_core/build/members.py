"""The GPT datasets of a build: every distinct job's member, built once.

A job whose index is small (fewer than ``in_memory_below`` entries, see
:func:`megadata_core.build.sizing.index_entries`) is built in memory, in this thread:
rebuilding such an index takes less time than loading it from the cache (measured
crossover ~5,000 entries: ~0.3 ms either way, against ~2.5 ms to write a new entry), and
holds no open files; Megatron-shuffled concat ones are built all at once
(:func:`megadata_core.indices.gpt_many.gpt_indices_many`). The other jobs go through the
cache in a thread pool (their time is large numpy operations and file I/O, which release
the GIL), each member made as soon as its arrays are mapped (its maps count against the
corpora's open files from then on). Members whose arrays are in memory (built here, or
a build bundle's) are made per split as siblings of one fully checked dataset
(:meth:`GPTDataset.siblings`), by one method whatever the arrays' source.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np

from megadata_core.build.corpora import Corpora, run_all
from megadata_core.build.plan import Job
from megadata_core.build.sizing import in_memory_jobs, member_documents
from megadata_core.cache.keys import document_ids
from megadata_core.datasets.gpt_arrays import drops_last, gpt_arrays
from megadata_core.datasets.gpt_dataset import GPTDataset
from megadata_core.errors import DataError
from megadata_core.indices import splits
from megadata_core.indices.gpt import GPT_ARRAYS
from megadata_core.indices.gpt_many import gpt_indices_many
from megadata_core.indices.schedule import epoch_seed

Arrays = dict[str, np.ndarray]


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
