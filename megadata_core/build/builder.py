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

Every corpus is opened once (one :class:`IndexedDataset` per prefix, shared by every
split that reads it); with ``config.path_to_cache`` its .idx is validated once per file
identity and vouched for by the cache's record after that (:mod:`.corpus_trust`). Small
indices (under ``in_memory_below`` entries) are built in memory, no file each (a blend
of 1,000 corpora would otherwise hold ~8 file descriptors per corpus); the others are
built, or loaded from ``config.path_to_cache``, in a thread pool. A build with a blend
and a cache directory also caches, as one entry (the *build bundle*, keyed by every
input including each corpus's content), the small members' indices and the blends': a
restart on the same data loads that entry, reads each small .idx with one read and
validates nothing already validated, and builds nothing (for 1,000 small prefixes,
~0.07x megatron-core's startup on this project's machine).
Differences from Megatron: errors are
DataErrors naming the field (Megatron asserts, or loops forever on a split without
tokens); a None size is accepted for a split that is not built (Megatron's weighted
``blend`` rejects a None size for any split, even an empty one) or whose weights are
unused (single prefix, multiple validation sets); ``multiple_validation_sets`` is
honoured only with ``blend_per_split``, as in Megatron.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import numpy as np

from megadata_core.cache import blend_record
from megadata_core.datasets.blended_dataset import BLEND_ALGORITHM_VERSION, BlendedDataset
from megadata_core.build.plan import (
    Job,
    Recipe,
    check_sizes,
    plan_blend,
    plan_blend_per_split,
)
from megadata_core.build.bundle_members import bundle_members
from megadata_core.cache.keys import corpus_identity
from megadata_core.datasets.config import SPLIT_NAMES, GPTDataConfig
from megadata_core.cache.corpus_trust import ensure_validated
from megadata_core.datasets.gpt_arrays import (
    INDEX_ALGORITHM_VERSION,
    PACKING_ALGORITHM_VERSION,
    config_array_names,
    drops_last,
)
from megadata_core.datasets.gpt_dataset import GPTDataset
from megadata_core.datasets.lazy_members import LazyMembers
from megadata_core.datasets.mock import MockGPTLowLevelDataset
from megadata_core.errors import DataError
from megadata_core.format import IndexedDataset
from megadata_core.format.open_files import OpenFiles
from megadata_core.indices import num_epochs, splits
from megadata_core.cache.entries import (
    GPT_ARRAYS,
    PackedArrays,
    array_digest,
    cached_result,
    description_key,
    json_digest,
    pack_arrays,
)
from megadata_core.indices.feistel import ALGORITHM as FEISTEL_ALGORITHM
from megadata_core.indices.feistel import ROUNDS as FEISTEL_ROUNDS
from megadata_core.indices.gpt_many import gpt_indices_many

#: Indices smaller than this (document-index entries or samples) are built in memory.
IN_MEMORY_BELOW = 4096
PROBE_OPENS = 8  # corpora opened (and timed) before choosing threads or not
MOCK_SPLIT = "1,1,1"  # Megatron forces this split for mock data
#: The build bundle: one cache entry per build with a blend (see :class:`_Builder`).
BUNDLE_VERSION = 2  # 2: per-prefix lists as digests
BUNDLE_SPLIT = "bundle"  # the file name part of its entry (where a split name goes)
BUNDLE_ARRAYS = ("jobs", "blends", "table", "blob")
BLEND_NAMES = ("dataset_index", "dataset_sample_index", "dataset_counts")
#: Blends of at least this many samples keep their own cache entry (memory-mapped, never
#: copied into a bundle): ~10 bytes a sample.
BUNDLE_BLEND_BELOW = 1 << 22


def _run(function: Callable, items: list, max_workers: int | None) -> list:
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
        return _run(open_one, prefixes, max_workers)
    probe = prefixes[:PROBE_OPENS]
    wall, cpu = time.perf_counter(), time.thread_time()
    opened = [open_one(prefix) for prefix in probe]
    wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
    waiting = wall - cpu > cpu
    return opened + _run(open_one, prefixes[len(probe):], None if waiting else 1)


def index_entries(indexed, job: Job, config: GPTDataConfig, at_least: int | None = None) -> int:
    """The size of a job's index, ``max(document-index entries, samples)`` (documents x
    epochs; epochs x tokens / S), from the corpus lengths alone (no index is built).
    With ``at_least``, a split of that many documents or more answers its document
    count without summing its lengths (a warm start of a large corpus reads no array
    whole; an empty split then fails as it would in memory, in the index build)."""
    documents = splits.document_ranges([job.bookend], len(indexed))[0]
    if at_least is not None and len(documents) >= at_least:
        return len(documents)
    lengths = np.asarray(indexed.sequence_lengths)  # validated: a plain slice sum
    tokens = int(lengths[documents.start : documents.stop].sum(dtype=np.int64))
    if tokens == 0:
        return 0  # GPTDataset raises, naming the split
    extra = int(config.add_extra_token_to_sequence)
    epochs = num_epochs(tokens, config.sequence_length, job.num_samples, extra)
    return max(len(documents) * epochs, epochs * tokens // config.sequence_length)


class _Unpacked:
    """A bundle's unpacked arrays, told apart from a built result."""

    def __init__(self, value: tuple) -> None:
        self.value = value


class _Builder:
    """Opens every prefix once and builds every distinct job once.

    Jobs whose index is small (fewer than ``in_memory_below`` entries, see
    :func:`index_entries`) are built in memory, in this thread: rebuilding such an index
    takes less time than loading it from the cache (measured crossover ~5,000 entries:
    ~0.3 ms either way, against ~2.5 ms to write a new entry), and holds no open files.
    The other jobs go through ``config.path_to_cache`` in a thread pool (their time is
    large numpy operations and file I/O, which release the GIL).
    """

    def __init__(
        self, config: GPTDataConfig, token_dtype, max_workers: int | None, in_memory_below: int
    ) -> None:
        self.config = config
        self.memory_config = (
            config if config.path_to_cache is None else replace(config, path_to_cache=None)
        )
        self.token_dtype = token_dtype
        self.max_workers = max_workers
        self.in_memory_below = in_memory_below
        self.progress: Callable[[int], object] | None = None
        self.corpora: dict[str, object] = {}
        self.fields: dict[str, str] = {}
        self.bundle_entry = "build bundle"  # with its blob's path once one is loaded
        # One bound for every corpus of the build: their .bin maps / descriptors.
        self.open_files = OpenFiles(config.max_open_files)

    def _open(self, prefix: str):
        """The corpus, validated (or vouched for by the cache: see :mod:`.corpus_trust`); a
        small .idx is read whole and keeps no descriptor."""
        corpus = self._open_deferred(prefix)
        try:
            ensure_validated(corpus, self.config.path_to_cache)
        except DataError as error:
            raise self._open_error(prefix, error) from error
        return corpus

    def _open_deferred(self, prefix: str):
        """The corpus with its index arrays not validated yet (see :meth:`_validate`)."""
        try:
            corpus = IndexedDataset.open_deferred(prefix, mmap=self.config.mmap_bin_files)
        except DataError as error:
            raise self._open_error(prefix, error) from error
        corpus.share_open_files(self.open_files)
        return corpus

    def _validate(self, prefix: str) -> None:
        try:
            ensure_validated(self.corpora[prefix], self.config.path_to_cache)
        except DataError as error:
            raise self._open_error(prefix, error) from error

    def _open_error(self, prefix: str, error: DataError) -> DataError:
        return DataError(
            f"{self.fields[prefix]}: dataset prefix {prefix!r} cannot be opened: {error}"
        )

    def _dataset(
        self, job: Job, config: GPTDataConfig, arrays: dict | None = None
    ) -> GPTDataset:
        indexed = self.corpora[job.prefix]
        documents = splits.document_ranges([job.bookend], len(indexed))[0]
        try:
            return GPTDataset(
                indexed, documents, job.num_samples, config, job.split,
                token_dtype=self.token_dtype, arrays=arrays,
            )
        except DataError as error:
            raise DataError(
                f"{self.fields[job.prefix]}: dataset prefix {job.prefix!r} ({job.split} "
                f"split, documents [{documents.start}, {documents.stop})): {error}"
            ) from error

    def _jobs(self, recipes: list[Recipe | None]) -> list[Job]:
        """The distinct jobs of the recipes, in order (and each prefix's config field)."""
        jobs = list(dict.fromkeys(job for recipe in recipes if recipe for job in recipe.jobs))
        for recipe in recipes:
            for job in recipe.jobs if recipe else ():
                self.fields.setdefault(job.prefix, recipe.field)
        return jobs

    def _built_one(self, job: Job, config: GPTDataConfig) -> GPTDataset:
        dataset = self._dataset(job, config)
        if self.progress is not None:
            self.progress(1)
        return dataset

    def build(self, recipes: list[Recipe | None]) -> dict[Job, GPTDataset]:
        """Every job's GPTDataset; ``self.small`` holds the jobs built in memory."""
        jobs = self._jobs(recipes)
        prefixes = [prefix for prefix in self.fields if prefix not in self.corpora]
        self.corpora.update(zip(prefixes, _open_all(self._open, prefixes, self.max_workers)))
        small = [
            job for job in jobs
            if self.config.path_to_cache is None
            or index_entries(self.corpora[job.prefix], job, self.config, self.in_memory_below)
            < self.in_memory_below
        ]
        self.small = set(small)
        large = [job for job in jobs if job not in self.small]
        built = self._build_small(small)
        cached = _run(lambda job: self._built_one(job, self.config), large, self.max_workers)
        built.update(zip(large, cached))
        return {job: built[job] for job in jobs}

    def _build_small(self, jobs: list[Job]) -> dict[Job, GPTDataset]:
        """The in-memory members: Megatron-shuffled concat indices of all of them at once
        (:func:`megadata_core.indices.gpt_many.gpt_indices_many`); one at a time for the
        other orders and packings, or to name a member that cannot be built."""
        config = self.memory_config
        if len(jobs) < 2 or config.shuffle != "megatron" or config.packing != "concat":
            return {job: self._built_one(job, config) for job in jobs}
        corpora = [self.corpora[job.prefix] for job in jobs]
        firsts, ends = splits.document_bounds(
            [job.bookend for job in jobs], [len(corpus) for corpus in corpora]
        )
        spans = [range(first, end) for first, end in zip(firsts.tolist(), ends.tolist())]
        try:
            indices = gpt_indices_many(
                [np.asarray(corpus.sequence_lengths) for corpus in corpora],
                spans,
                config.sequence_length,
                [job.num_samples for job in jobs],
                config.random_seed,
                add_extra_token=config.add_extra_token_to_sequence,
                drop_last_partial_sequence=[drops_last(config, job.split) for job in jobs],
            )
        except DataError:  # the member-by-member build names the prefix and split
            return {job: self._built_one(job, config) for job in jobs}
        arrays = [dict(zip(GPT_ARRAYS, trio)) for trio in indices]
        return self._members(jobs, corpora, spans, arrays)

    def _members(
        self, jobs: list[Job], corpora: list, spans: list[range], arrays: list[dict]
    ) -> dict[Job, GPTDataset]:
        """In-memory members from their index ``arrays``: per split the first is fully
        checked, the others share its checks (:meth:`GPTDataset._sibling`)."""
        built: dict[Job, GPTDataset] = {}
        groups: dict[str, list[int]] = {}
        for number, job in enumerate(jobs):
            groups.setdefault(job.split, []).append(number)
        for numbers in groups.values():
            first = jobs[numbers[0]]
            template = self._dataset(first, self.memory_config, arrays=arrays[numbers[0]])
            rest = numbers[1:]
            made = [template] + template._siblings(
                [corpora[n] for n in rest], [spans[n] for n in rest],
                [jobs[n].num_samples for n in rest], [arrays[n] for n in rest],
            )  # fmt: skip
            built.update(zip([jobs[n] for n in numbers], made))
        if self.progress is not None:
            for _ in jobs:
                self.progress(1)
        return {job: built[job] for job in jobs}

    # -- the build bundle -------------------------------------------------------------

    def build_bundled(self, recipes: list[Recipe | None]) -> list:
        """The splits of a build with a blend, through one cache entry for the whole
        build (the *bundle*): the index arrays of every member built in memory (the
        small ones, see :func:`index_entries`) and of every blend of fewer than
        ``BUNDLE_BLEND_BELOW`` samples (larger ones keep their own entry), packed into one blob
        (:func:`megadata_core.cache.entries.pack_arrays`). Its key is the sha256 of
        :meth:`_bundle_description`: every config field that changes an array, every
        job and recipe, and each corpus's identity (the digest of its whole .idx and
        its .bin size for small corpora; the sampled identity otherwise), never a path.

        A hit builds nothing: the corpora are opened with one read of each small .idx
        and no validation (the entry was written after validating exactly these bytes;
        other corpora are validated), the members are made from the bundled arrays, and
        the large members load their own cache entries as usual. A miss (or a damaged
        bundle: warned) validates every corpus, builds as :meth:`build` does (blends in
        memory) and writes the bundle, under the cache's lock.
        """
        jobs = self._jobs(recipes)
        prefixes = list(self.fields)
        files = blend_record.file_identities(prefixes)  # before any corpus is read
        base = self._bundle_description(recipes, jobs, prefixes, None)
        record = blend_record.record_description(base, prefixes)
        if files is not None:
            described = self._from_record(recipes, jobs, prefixes, files, record, base)
            if described is not None:
                return described
        self.corpora.update(
            zip(prefixes, _open_all(self._open_deferred, prefixes, self.max_workers))
        )
        identities = []
        for prefix in prefixes:
            identity, exact = corpus_identity(self.corpora[prefix])
            if not exact:  # a sampled identity does not vouch for the arrays
                self._validate(prefix)
            identities.append(identity)
        description = self._bundle_description(recipes, jobs, prefixes, identities)

        def build() -> tuple[list, dict[str, np.ndarray]]:
            for prefix in prefixes:
                self._validate(prefix)
            built = self.build(recipes)
            arrays, rows = [], np.full(len(jobs), -1, dtype=np.int64)
            for number, job in enumerate(jobs):
                if job in self.small:
                    rows[number] = len(arrays)
                    arrays.extend(built[job]._arrays[name] for name in self._gpt_names())
            result, blends = [], np.full(len(recipes), -1, dtype=np.int64)
            for number, recipe in enumerate(recipes):
                bundled = _bundles_blend(recipe, built)
                result.append(_assemble(recipe, built, self.config, use_cache=not bundled))
                if bundled:
                    blends[number] = len(arrays)
                    arrays.extend(result[-1]._arrays[name] for name in BLEND_NAMES)
            return result, {"jobs": rows, "blends": blends, **pack_arrays(arrays)}

        # A hit returns the unpacked arrays (a bundle that does not fit is damaged:
        # warned, rebuilt); the datasets are made outside, so that their own errors
        # (e.g. an eod_id outside the corpus dtype, not part of the key) are raised as
        # on a miss, not taken for damage.
        found = cached_result(
            self.config.path_to_cache,
            description,
            BUNDLE_SPLIT,
            BUNDLE_ARRAYS,
            use=lambda arrays: _Unpacked(self._unpack_bundle(recipes, jobs, arrays)),
            build=build,
            stacklevel=3,  # build_datasets' caller
        )
        if files is not None:
            blend_record.save_record(
                self.config.path_to_cache, record, files,
                [self.corpora[prefix] for prefix in prefixes], identities,
                description_key(description),
            )
        if isinstance(found, _Unpacked):
            return self._from_bundle(recipes, jobs, *found.value)
        return found

    def _from_record(
        self,
        recipes: list[Recipe | None],
        jobs: list[Job],
        prefixes: list[str],
        files: np.ndarray,
        record: dict,
        base: dict,
    ) -> list | None:
        """The splits from the blend's one-file record and its bundle, no .idx opened
        (:mod:`megadata_core.cache.blend_record`); None to take the full path (no
        record, a file changed, or a damaged record or bundle: warned)."""
        directory = self.config.path_to_cache
        try:
            found = blend_record.load_record(
                directory, record, files, BUNDLE_SPLIT, BUNDLE_ARRAYS, base
            )
            if found is None:
                return None
        except DataError as error:  # the record itself is damaged
            warnings.warn(f"{error}; reading every corpus instead", stacklevel=4)
            return None
        arrays, table, where = found
        try:
            unpacked = self._unpack_bundle(recipes, jobs, arrays)
        except DataError:
            return None  # a damaged bundle: the full path warns and rebuilds it
        # every corpus opened at its first read (checked against the record then)
        self.corpora = blend_record.RecordedCorpora(
            prefixes, table, where, self.config.mmap_bin_files, self.config.path_to_cache,
            self.open_files,
        )
        return self._from_bundle(recipes, jobs, *unpacked)

    def _gpt_names(self) -> tuple[str, ...]:
        return config_array_names(self.config)

    def _bundle_description(
        self,
        recipes: list[Recipe | None],
        jobs: list[Job],
        prefixes: list[str],
        identities: list,
    ) -> dict:
        """Every input of the bundle's arrays (its cache key is the sha256)."""
        config = self.config
        corpus = {prefix: number for number, prefix in enumerate(prefixes)}
        number = {job: position for position, job in enumerate(jobs)}
        description = {
            "kind": "megadata.BuildBundle",
            "version": BUNDLE_VERSION,
            "gpt_algorithm": INDEX_ALGORITHM_VERSION,
            "blend_algorithm": BLEND_ALGORITHM_VERSION,
            "random_seed": config.random_seed,
            "sequence_length": config.sequence_length,
            "add_extra_token_to_sequence": config.add_extra_token_to_sequence,
            "drop_last_partial_validation_sequence": config.drop_last_partial_validation_sequence,
            "shuffle": config.shuffle,
            "feistel": [FEISTEL_ROUNDS, FEISTEL_ALGORITHM],
            "blend_order": config.blend_order,
            "in_memory_below": self.in_memory_below,
            # digests of the per-prefix lists (10,000 prefixes: ~5 MB of JSON to write,
            # hash and read at every start); the identities themselves are in the record
            "corpora": None if identities is None else json_digest(identities),
            "jobs": _jobs_digest(jobs, corpus),
            "recipes": [
                None if recipe is None
                else [recipe.kind, array_digest(np.array([number[job] for job in recipe.jobs],
                                                         dtype=np.int64)),
                      None if recipe.weights is None
                      else array_digest(np.array(recipe.weights, dtype=np.float64)),
                      recipe.size]
                for recipe in recipes
            ],
        }
        if config.packing != "concat":  # concat bundles keep their keys
            description["packing"] = [config.packing, PACKING_ALGORITHM_VERSION]
        return description

    def _unpack_bundle(
        self, recipes: list[Recipe | None], jobs: list[Job], bundle: dict[str, np.ndarray]
    ) -> tuple[list[int], list[int], list[np.ndarray]]:
        """``(rows, blends, arrays)`` of a loaded bundle: per job and per recipe the
        position of its first array in ``arrays``, or -1 (a large member or blend, cached
        on its own; a split that is no blend), and every array. DataError when the
        bundle does not fit these jobs (a damaged entry)."""
        where = f"{self.config.path_to_cache}: build bundle"
        blob = getattr(bundle["blob"], "filename", None)
        self.bundle_entry = f"build bundle {blob}" if blob else "build bundle"
        arrays = PackedArrays(bundle["table"], bundle["blob"], where)
        starts = []
        for name, count in (("jobs", len(jobs)), ("blends", len(recipes))):
            rows = np.asarray(bundle[name])
            if rows.shape != (count,) or rows.dtype != np.int64:
                raise DataError(f"{where}: {name} {rows.dtype} {rows.shape}, expected [{count}]")
            starts.append(rows[rows >= 0])
        names = self._gpt_names()
        members, blends = starts
        expected = np.concatenate([
            np.arange(len(members), dtype=np.int64) * len(names),
            len(members) * len(names) + np.arange(len(blends), dtype=np.int64) * len(BLEND_NAMES),
        ])
        if not np.array_equal(np.concatenate(starts), expected) or len(arrays) != len(
            members
        ) * len(names) + len(blends) * len(BLEND_NAMES):
            raise DataError(f"{where}: {len(arrays)} arrays do not fit {len(jobs)} jobs")
        return bundle["jobs"].tolist(), bundle["blends"].tolist(), arrays

    def _from_bundle(
        self,
        recipes: list[Recipe | None],
        jobs: list[Job],
        rows: list[int],
        blends: list[int],
        arrays: PackedArrays,
    ) -> list:
        """The splits from a bundle's unpacked arrays (:meth:`_unpack_bundle`). With
        corpora described by a record, a split's members are made at first read
        (:func:`~megadata_core.build.bundle_members.bundle_members`)."""
        names = self._gpt_names()
        recorded = isinstance(self.corpora, blend_record.RecordedCorpora)
        if recorded:
            numbers = np.array([self.corpora.number(job.prefix) for job in jobs], dtype=np.int64)
            counts = self.corpora.sequences[numbers]
        else:
            counts = [len(self.corpora[job.prefix]) for job in jobs]
        firsts, ends = splits.document_bounds([job.bookend for job in jobs], counts)
        large, groups = [], {}
        for position, (job, row) in enumerate(zip(jobs, rows)):
            if row < 0:
                large.append(job)
            else:
                groups.setdefault(job.split, []).append(position)
        built: dict[Job, object] = {}
        lazy: dict[str, tuple[list[Job], object]] = {}  # split -> (its jobs, LazyMembers)
        for group in groups.values():
            group_jobs = [jobs[n] for n in group]
            members = None
            if recorded:
                first = group[0]
                template = self._dataset(
                    jobs[first], self.memory_config,
                    arrays=dict(zip(names, arrays[rows[first] : rows[first] + len(names)])),
                )
                template._entry = self.bundle_entry  # named by read-time range checks
                where = np.array(group, dtype=np.int64)
                members = bundle_members(
                    template, self.corpora, numbers[where], firsts[where], ends[where],
                    [job.num_samples for job in group_jobs], arrays,
                    np.asarray(rows, dtype=np.int64)[where],
                )
            if members is not None:
                lazy[group_jobs[0].split] = (group_jobs, members)
                built.update((job, _Pending(members, k)) for k, job in enumerate(group_jobs))
                if self.progress is not None:
                    for _ in group_jobs:
                        self.progress(1)
                continue
            made = self._members(
                group_jobs, [self.corpora[job.prefix] for job in group_jobs],
                [range(int(firsts[n]), int(ends[n])) for n in group],
                [dict(zip(names, arrays[rows[n] : rows[n] + len(names)])) for n in group],
            )
            for dataset in made.values():
                dataset._entry = self.bundle_entry  # named by read-time range checks
            built.update(made)
        cached = _run(lambda job: self._built_one(job, self.config), large, self.max_workers)
        built.update(zip(large, cached))
        result = []
        for recipe, position in zip(recipes, blends):
            given = None
            if position >= 0:
                given = dict(zip(BLEND_NAMES, arrays[position : position + len(BLEND_NAMES)]))
            members = None
            if recipe is not None and recipe.kind == "blend":
                group_jobs, candidate = lazy.get(recipe.jobs[0].split, (None, None))
                if group_jobs is not None and recipe.jobs == group_jobs:
                    members = candidate  # the split's members, in order: kept unmade
            made = {} if recipe is None or members is not None else {
                job: _made(built[job]) for job in recipe.jobs
            }
            result.append(_assemble(recipe, made, self.config, arrays=given, members=members))
            if given is not None:
                result[-1]._entry = self.bundle_entry
        return result


class _Pending(tuple):
    """A member not made yet: ``(LazyMembers, its number there)``."""

    def __new__(cls, members, number: int):
        return super().__new__(cls, (members, number))


def _made(dataset):
    """``dataset``, made now if it is :class:`_Pending`."""
    return dataset[0][dataset[1]] if isinstance(dataset, _Pending) else dataset


def _jobs_digest(jobs: list[Job], corpus: dict[str, int]) -> list:
    """``[splits, digest]``: the jobs as int64 [J, 3] (corpus number, split number,
    samples or -1) and float64 [J, 2] (first and last fraction of the documents)."""
    names = sorted({job.split for job in jobs})
    code = {name: number for number, name in enumerate(names)}
    numbers = np.array(
        [(corpus[job.prefix], code[job.split], -1 if job.num_samples is None else job.num_samples)
         for job in jobs],
        dtype=np.int64,
    ).reshape(len(jobs), 3)
    bookends = np.array([job.bookend for job in jobs], dtype=np.float64).reshape(len(jobs), 2)
    return [names, array_digest(numbers), array_digest(bookends)]


def _blend_inputs(
    recipe: Recipe, datasets: list[GPTDataset]
) -> tuple[list[float] | list[int], int | None]:
    """A blend recipe's weights and size (weights None: the dataset lengths, and the size
    capped by their sum, as Megatron's int weights)."""
    weights, size = recipe.weights, recipe.size
    if weights is None:
        weights = (
            datasets.lengths.tolist() if isinstance(datasets, LazyMembers)
            else [len(dataset) for dataset in datasets]
        )
        if size is not None:
            size = min(size, sum(weights))
    return weights, size


def _bundles_blend(recipe: Recipe | None, built: dict[Job, GPTDataset]) -> bool:
    """Whether a split is a blend whose indices go into the build bundle (fewer than
    ``BUNDLE_BLEND_BELOW`` samples; an exhaustive blend holds the sum of the weights)."""
    if recipe is None or recipe.kind != "blend":
        return False
    weights, size = _blend_inputs(recipe, [built[job] for job in recipe.jobs])
    return (sum(weights) if size is None else size) < BUNDLE_BLEND_BELOW


def _assemble(
    recipe: Recipe | None,
    built: dict[Job, GPTDataset],
    config: GPTDataConfig,
    *,
    arrays: dict | None = None,
    use_cache: bool = True,
    members: LazyMembers | None = None,
) -> GPTDataset | BlendedDataset | list[GPTDataset] | None:
    """One split from its recipe and the built datasets (a blend's index ``arrays``
    given, or built in memory without ``use_cache``; a blend's ``members`` given, made
    at first read)."""
    if recipe is None:
        return None
    datasets = members if members is not None else [built[job] for job in recipe.jobs]
    if recipe.kind == "single":
        return datasets[0]
    if recipe.kind == "list":
        return datasets
    weights, size = _blend_inputs(recipe, datasets)
    return BlendedDataset(datasets, weights, size, config, arrays=arrays, use_cache=use_cache)


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
    has_blend = config.blend is not None or config.blend_per_split is not None
    if mock:
        if has_blend:
            raise DataError("mock: mock data takes neither blend nor blend_per_split")
        return _build_mock(config, sizes, vocab_size, token_dtype, max_workers)
    if not has_blend:
        raise DataError(
            "blend: neither blend nor blend_per_split is given (mock=True builds Megatron's "
            "mock data instead)"
        )
    if config.blend is not None:
        recipes = plan_blend(config, sizes)
    else:
        recipes = plan_blend_per_split(config, sizes)
    if isinstance(in_memory_below, bool) or not isinstance(in_memory_below, int):
        raise DataError(f"in_memory_below: {in_memory_below!r} is not an int")
    building = _Builder(config, token_dtype, max_workers, in_memory_below)
    building.progress = progress
    if config.path_to_cache is not None and any(
        recipe is not None and recipe.kind == "blend" for recipe in recipes
    ):
        return building.build_bundled(recipes)
    built = building.build(recipes)
    return [_assemble(recipe, built, config) for recipe in recipes]


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
        MOCK_SPLIT
    ):
        warnings.warn(
            f"split: {config.split!r} is ignored for mock data; Megatron splits it "
            f"{MOCK_SPLIT!r}",
            stacklevel=3,
        )
    corpus = MockGPTLowLevelDataset(vocab_size, config.eod_id)
    matrix = splits.split_matrix(splits.parse_split(MOCK_SPLIT))
    ranges = splits.document_ranges(matrix, len(corpus))

    def one(split: int) -> GPTDataset:
        return GPTDataset(
            corpus, ranges[split], sizes[split], config, SPLIT_NAMES[split],
            token_dtype=token_dtype,
        )

    return _run(one, list(range(len(SPLIT_NAMES))), max_workers)


__all__ = ["build_datasets", "index_entries"]
