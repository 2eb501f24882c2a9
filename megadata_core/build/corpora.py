"""The corpora of a build: every prefix opened once, validated once, named in errors.

One :class:`IndexedDataset` per prefix, shared by every split and member that reads it,
all under one bound of open files (``config.max_open_files``). With a cache directory a
corpus's .idx is validated once per file identity and vouched for by the cache's record
after that (:mod:`megadata_core.cache.corpus_trust`). A warm start from a blend record
replaces the opened corpora by record-described ones, each opened at its first read
(:class:`megadata_core.cache.blend_record.RecordedCorpora`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from megadata_core.cache.corpus_trust import ensure_validated
from megadata_core.errors import DataError
from megadata_core.format import IndexedDataset
from megadata_core.format.open_files import OpenFiles

PROBE_OPENS = 8  # corpora opened (and timed) before choosing threads or not


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
    probe = prefixes[:PROBE_OPENS]
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
