"""A build with a blend and a cache directory, through one cache entry: the *bundle*.

The bundle holds the index arrays of every member built in memory (the small ones, see
:mod:`.members`) and of every blend of fewer than :data:`BUNDLE_BLEND_BELOW` samples
(larger ones keep their own entry), packed into one blob
(:func:`megadata_core.cache.npy_files.pack_arrays`). Its key is the sha256 of
:func:`megadata_core.cache.keys.bundle_description`: every config field that
changes an array, every job and recipe, and each corpus's identity (the digest of its
whole .idx and its .bin size for small corpora; the sampled identity otherwise), never
a path.

A hit builds nothing: the corpora are opened with one read of each small .idx and no
validation (the entry was written after validating exactly these bytes; other corpora
are validated), the members are made from the bundled arrays (each at its first read
when the corpora come from a blend record), and the large members load their own cache
entries as usual. A miss (or a damaged bundle: warned) validates every corpus, builds
as without a bundle (blends in memory) and writes the bundle, under the cache's lock.
A blend record (:mod:`megadata_core.cache.blend_record`) remembers, for the next start,
every corpus's file identity and header and the bundle's key: a restart on unchanged
files then opens no .idx before it is read (for 1,000 small prefixes, ~0.07x
megatron-core's startup on this project's machine).
"""

from __future__ import annotations

import warnings

import numpy as np

from megadata_core.build.members import Corpora, Members, assemble, blend_samples
from megadata_core.build.plan import Job, Recipe
from megadata_core.cache import blend_record
from megadata_core.cache.entries import cached_result
from megadata_core.cache.keys import (
    array_digest,
    blend_record_description,
    bundle_description,
    corpus_identity,
    description_key,
    with_corpora,
)
from megadata_core.cache.npy_files import PackedArrays, pack_arrays
from megadata_core.datasets.blended_dataset import BLEND_ARRAYS, BlendedDataset, LazyMembers
from megadata_core.datasets.gpt_arrays import FEISTEL, config_array_names
from megadata_core.errors import DataError
from megadata_core.indices import splits

BUNDLE_SPLIT = "bundle"  # the file name part of its entry (where a split name goes)
BUNDLE_ARRAYS = ("jobs", "blends", "table", "blob")
#: Blends of at least this many samples keep their own cache entry (memory-mapped, never
#: copied into a bundle): ~10 bytes a sample.
BUNDLE_BLEND_BELOW = 1 << 22


class BundledBuild:
    """The splits of ``recipes`` (their distinct ``jobs``), through the bundle."""

    def __init__(
        self, config, recipes: list[Recipe | None], jobs: list[Job], corpora: Corpora,
        members: Members,
    ) -> None:
        self.config, self.recipes, self.jobs = config, recipes, jobs
        self.corpora, self.members = corpora, members
        self.names = config_array_names(config)  # a member's arrays, in the bundle's order
        self.origin = "build bundle"  # with its blob's path once one is loaded

    def splits(self) -> list:
        """``[train, valid, test]``, from the bundle (or its record) or built."""
        prefixes = self.corpora.prefixes
        files = blend_record.file_identities(prefixes)  # before any corpus is read
        base = self.description(None)
        record = blend_record_description(base, prefixes)
        if files is not None:
            recorded = self._from_record(files, record, base)
            if recorded is not None:
                return recorded
        self.corpora.open(validate=False)
        identities = []
        for prefix in prefixes:
            identity, exact = corpus_identity(self.corpora[prefix])
            if not exact:  # a sampled identity does not vouch for the arrays
                self.corpora.validate(prefix)
            identities.append(identity)
        description = with_corpora(base, identities)
        # A hit returns the unpacked arrays (a bundle that does not fit is damaged:
        # warned, rebuilt); the datasets are made outside, so that their own errors
        # (e.g. an eod_id outside the corpus dtype, not part of the key) are raised as
        # on a miss, not taken for damage.
        def use(arrays: dict[str, np.ndarray]) -> list | _Unpacked:
            return _Unpacked(self._unpack(arrays))

        found = cached_result(
            self.config.path_to_cache,
            description,
            BUNDLE_SPLIT,
            BUNDLE_ARRAYS,
            use=use,
            build=self._build,
            stacklevel=3,  # build_datasets' caller
        )
        if files is not None:
            blend_record.save_record(
                self.config.path_to_cache, record, files,
                [self.corpora[prefix] for prefix in prefixes], identities,
                description_key(description),
            )
        if isinstance(found, _Unpacked):
            return self._from_bundle(*found.value)
        return found

    def description(self, identities: list | None) -> dict:
        """Every input of the bundle's arrays (its cache key is the sha256)."""
        corpus = {prefix: number for number, prefix in enumerate(self.corpora.prefixes)}
        number = {job: position for position, job in enumerate(self.jobs)}
        recipes = [
            None if recipe is None
            else [recipe.kind,
                  array_digest(np.array([number[job] for job in recipe.jobs], dtype=np.int64)),
                  None if recipe.weights is None
                  else array_digest(np.array(recipe.weights, dtype=np.float64)),
                  recipe.size]
            for recipe in self.recipes
        ]
        return bundle_description(
            self.config, in_memory_below=self.members.in_memory_below, feistel=FEISTEL,
            corpora=identities, jobs=_jobs_digest(self.jobs, corpus), recipes=recipes,
        )

    def _build(self) -> tuple[list, dict[str, np.ndarray]]:
        """A miss: every corpus validated, every member and split built; the splits and
        the bundle's arrays."""
        for prefix in self.corpora.prefixes:
            self.corpora.validate(prefix)
        built, small = self.members.build(self.jobs, self.members.in_memory(self.jobs))
        arrays: list[np.ndarray] = []
        rows = np.full(len(self.jobs), -1, dtype=np.int64)
        for number, job in enumerate(self.jobs):
            if job in small:
                rows[number] = len(arrays)
                arrays.extend(small[job][name] for name in self.names)
        result, blends = [], np.full(len(self.recipes), -1, dtype=np.int64)
        for number, recipe in enumerate(self.recipes):
            bundled = (
                recipe is not None and recipe.kind == "blend"
                and blend_samples(recipe, built) < BUNDLE_BLEND_BELOW
            )
            made = assemble(recipe, built, self.config, use_cache=not bundled)
            result.append(made)
            if bundled and isinstance(made, BlendedDataset):  # (a blend recipe's: always)
                blends[number] = len(arrays)
                held = made.index_arrays
                arrays.extend(held[name] for name in BLEND_ARRAYS)
        return result, {"jobs": rows, "blends": blends, **pack_arrays(arrays)}

    def _from_record(self, files: np.ndarray, record: dict, base: dict) -> list | None:
        """The splits from the blend's one-file record and its bundle (whose description
        is ``base`` but for the corpora), no .idx opened; None to take the full path (no
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
            unpacked = self._unpack(arrays)
        except DataError:
            return None  # a damaged bundle: the full path warns and rebuilds it
        # every corpus opened at its first read (checked against the record then)
        self.corpora.use_recorded(blend_record.RecordedCorpora(
            self.corpora.prefixes, table, where, self.config.mmap_bin_files, directory,
            self.corpora.open_files,
        ))
        return self._from_bundle(*unpacked)

    def _unpack(self, bundle: dict[str, np.ndarray]) -> tuple[list[int], list[int], PackedArrays]:
        """``(rows, blends, arrays)`` of a loaded bundle: per job and per recipe the
        position of its first array in ``arrays``, or -1 (a large member or blend, cached
        on its own; a split that is no blend), and every array. DataError when the
        bundle does not fit these jobs (a damaged entry)."""
        where = f"{self.config.path_to_cache}: build bundle"
        blob = getattr(bundle["blob"], "filename", None)
        self.origin = f"build bundle {blob}" if blob else "build bundle"
        arrays = PackedArrays(bundle["table"], bundle["blob"], where)
        starts = []
        for name, count in (("jobs", len(self.jobs)), ("blends", len(self.recipes))):
            rows = np.asarray(bundle[name])
            if rows.shape != (count,) or rows.dtype != np.int64:
                raise DataError(f"{where}: {name} {rows.dtype} {rows.shape}, expected [{count}]")
            starts.append(rows[rows >= 0])
        members, blends = starts
        per_member, per_blend = len(self.names), len(BLEND_ARRAYS)
        expected = np.concatenate([
            np.arange(len(members), dtype=np.int64) * per_member,
            len(members) * per_member + np.arange(len(blends), dtype=np.int64) * per_blend,
        ])
        if not np.array_equal(np.concatenate(starts), expected) or len(arrays) != len(
            members
        ) * per_member + len(blends) * per_blend:
            raise DataError(f"{where}: {len(arrays)} arrays do not fit {len(self.jobs)} jobs")
        return bundle["jobs"].tolist(), bundle["blends"].tolist(), arrays

    def _from_bundle(self, rows: list[int], blends: list[int], arrays: PackedArrays) -> list:
        """The splits from a bundle's unpacked arrays. With corpora described by a record,
        a split's members are made at first read
        (:meth:`~megadata_core.datasets.gpt_members.GPTSiblings.lazy_siblings`)."""
        jobs, names, corpora = self.jobs, self.names, self.corpora.opened
        recorded = isinstance(corpora, blend_record.RecordedCorpora)
        counts: np.ndarray | list[int]
        if isinstance(corpora, blend_record.RecordedCorpora):
            numbers = np.array([corpora.number(job.prefix) for job in jobs], dtype=np.int64)
            counts = corpora.sequences[numbers]
        else:
            counts = [len(corpora[job.prefix]) for job in jobs]
        firsts, ends = splits.document_bounds([job.bookend for job in jobs], counts)
        large: list[Job] = []
        groups: dict[str, list[int]] = {}
        for position, (job, row) in enumerate(zip(jobs, rows)):
            if row < 0:
                large.append(job)
            else:
                groups.setdefault(job.split, []).append(position)
        built: dict[Job, object] = {}
        lazy: dict[str, tuple[list[Job], LazyMembers]] = {}  # split -> (its jobs, LazyMembers)
        unpacked: dict[Job, dict] = {}
        for group in groups.values():
            group_jobs = [jobs[n] for n in group]
            members = None
            if recorded:
                first = group[0]
                template = self.members.dataset(
                    jobs[first], self.members.memory_config,
                    dict(zip(names, arrays[rows[first] : rows[first] + len(names)])),
                    self.origin,
                )
                where = np.array(group, dtype=np.int64)
                members = template.lazy_siblings(
                    corpora, numbers[where], firsts[where], ends[where],
                    [job.num_samples for job in group_jobs], arrays,
                    np.asarray(rows, dtype=np.int64)[where],
                )
            if members is not None:
                lazy[group_jobs[0].split] = (group_jobs, members)
                built.update((job, _Pending(members, k)) for k, job in enumerate(group_jobs))
                for _ in group_jobs:
                    self.members.progress(1)
                continue
            unpacked.update(
                (jobs[n], dict(zip(names, arrays[rows[n] : rows[n] + len(names)])))
                for n in group
            )
        built.update(self.members.datasets(list(unpacked), unpacked, self.origin))
        built.update(zip(large, self.members.through_cache(large)))
        result = []
        for recipe, position in zip(self.recipes, blends):
            given = None
            if position >= 0:
                given = dict(zip(BLEND_ARRAYS, arrays[position : position + len(BLEND_ARRAYS)]))
            members = None
            if recipe is not None and recipe.kind == "blend":
                split_jobs, candidate = lazy.get(recipe.jobs[0].split, (None, None))
                if split_jobs is not None and recipe.jobs == split_jobs:
                    members = candidate  # the split's members, in order: kept unmade
            made = {} if recipe is None or members is not None else {
                job: _made(built[job]) for job in recipe.jobs
            }
            result.append(assemble(
                recipe, made, self.config, arrays=given, members=members,
                origin=self.origin if given is not None else None,
            ))
        return result


class _Unpacked:
    """A bundle's unpacked arrays, told apart from a built result."""

    def __init__(self, value: tuple) -> None:
        self.value = value


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
