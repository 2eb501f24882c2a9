"""Opening a corpus for a start from the index cache: validated once, vouched for after.

:func:`open_corpus` opens a .bin/.idx pair with its arrays unvalidated
(:meth:`IndexedDataset.open_deferred`) and then :func:`ensure_validated` either finds, in
the index cache directory, a record that these very files (same device, inode, size,
mtime and ctime, for the .idx and the .bin) passed a full validation
(:mod:`megadata_core.cache.corpus_records`), or validates the arrays and records it.
A warm start of a billion-document corpus then reads its header and a few sampled pages
(the cache key), no array whole.

What is served stays checked: a .idx or .bin changed since the record was written has
another identity and is validated again; one written or truncated in place after the
open is caught by the per-batch :meth:`IndexedDataset.check_files` before the index
arrays or tokens are read.
"""

from __future__ import annotations

import os
import time

from megadata_core.cache import corpus_records
from megadata_core.format import IndexedDataset

VALIDATED = "validated"  # the arrays were read and checked by this call
VOUCHED = "vouched"  # a record in the cache vouched for these very files
ALREADY = "already"  # the corpus was validated before the call


def ensure_validated(indexed, directory: str | os.PathLike | None) -> str:
    """Validate ``indexed`` unless done, or unless the cache ``directory`` holds a record
    of a full validation of the same files; record a validation where none was.

    Returns :data:`VALIDATED`, :data:`VOUCHED` or :data:`ALREADY`.

    Raises:
        DataError: naming the file, when validation finds an error.
    """
    if getattr(indexed, "validated", True):
        return ALREADY
    stats = indexed.local_stats() if hasattr(indexed, "local_stats") else None
    if directory is None or stats is None:  # no cache, remote, or a small .idx in memory
        indexed.validate()
        return VALIDATED
    directory = os.fspath(directory)
    record_path, lock_path = corpus_records.record_paths(directory, indexed.idx_path)
    expected = corpus_records.expected_record(indexed.idx_path, *stats)
    if corpus_records.read_record(record_path) == expected:
        indexed.validated = True
        return VOUCHED
    with corpus_records.locked(lock_path) as held:
        if held and corpus_records.read_record(record_path) == expected:
            indexed.validated = True  # another process validated while we waited
            return VOUCHED
        began = time.time_ns()
        indexed.validate()
        now = indexed.local_stats(now=True)
        unchanged = all(
            after is not None and _same(before, after) for before, after in zip(stats, now)
        )
        if unchanged and corpus_records.settled(stats, began):
            corpus_records.write_record(record_path, expected)
    return VALIDATED


def _same(before: os.stat_result, after: os.stat_result) -> bool:
    fields = ("st_dev", "st_ino", "st_size", "st_mtime_ns", "st_ctime_ns")
    return all(getattr(before, name) == getattr(after, name) for name in fields)


def open_corpus(
    path_prefix: str,
    path_to_cache: str | os.PathLike | None = None,
    *,
    multimodal: bool | None = None,
    mmap: bool = True,
) -> IndexedDataset:
    """An :class:`IndexedDataset`, validated, or vouched for by ``path_to_cache``'s
    record of an earlier validation of the same files (see the module docstring);
    without a cache, the same as ``IndexedDataset(path_prefix)``."""
    indexed = IndexedDataset.open_deferred(path_prefix, multimodal=multimodal, mmap=mmap)
    ensure_validated(indexed, path_to_cache)
    return indexed


__all__ = ["ALREADY", "VALIDATED", "VOUCHED", "ensure_validated", "open_corpus"]
