"""Opening a corpus for a start from the index cache: validated once, vouched for after.

Validating a .idx reads every byte of its arrays (~20 bytes a document: 20 GB at a
billion documents), so a start that finds its index in the cache should not pay it again
for the same files. :func:`open_corpus` opens a .bin/.idx pair with its arrays
unvalidated (:meth:`IndexedDataset.open_deferred`) and then :func:`ensure_validated`
either finds, in the index cache directory, a record that these very files passed a full
validation, or validates the arrays and records it. The record holds the identities
(:mod:`megadata_core.files.identity`) of the .idx and the .bin (the .bin's size is all
validation reads of it), in::

    corpus-{sha256 of the .idx's real path}-validated.json
    corpus-{same}.lock     an flock(2) lock file: one process validates, others wait

A record is only written when both files had settled before the validation began (the
racy-time rule), and only saves work: a missing, unreadable or foreign record means
"validate". A warm start of a billion-document corpus then reads its header and a few
sampled pages (the cache key), no array whole.

What is served stays checked: a .idx or .bin changed since the record was written has
another identity and is validated again; one written or truncated in place after the
open is caught by the per-batch :meth:`IndexedDataset.check_files` before the index
arrays or tokens are read.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time

from megadata_core.cache.keys import CORPUS_RECORD_FORMAT, CORPUS_RECORD_VERSION
from megadata_core.files.atomic import exclusive, write_atomically
from megadata_core.files.identity import identity, settled
from megadata_core.format import IndexedDataset

VALIDATED = "validated"  # the arrays were read and checked by this call
VOUCHED = "vouched"  # a record in the cache vouched for these very files
ALREADY = "already"  # the corpus was validated before the call


def record_paths(directory: str, idx_path: str) -> tuple[str, str]:
    """``(record, lock)`` paths of the corpus whose .idx is ``idx_path``."""
    real = os.path.realpath(idx_path)
    key = hashlib.sha256(real.encode("utf-8", "surrogateescape")).hexdigest()
    base = os.path.join(directory, f"corpus-{key}")
    return f"{base}-validated.json", f"{base}.lock"


def _expected_record(idx_path: str, idx_stat: os.stat_result, bin_stat: os.stat_result) -> dict:
    """The record that vouches for a .idx and .bin of these stat results."""
    return {
        "format": CORPUS_RECORD_FORMAT,
        "version": CORPUS_RECORD_VERSION,
        "idx": os.path.realpath(idx_path),
        "idx_identity": list(identity(idx_stat)),
        "bin_identity": list(identity(bin_stat)),
    }


def _read_record(path: str) -> dict | None:
    """The record at ``path``; None when it is missing or unreadable."""
    try:
        with open(path, encoding="utf-8") as stream:
            record = json.load(stream)
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def _write_record(path: str, record: dict) -> None:
    """Replace the record (atomically; skipped where the directory cannot be written:
    the next process then validates again)."""
    text = json.dumps(record, sort_keys=True).encode("utf-8")
    with contextlib.suppress(OSError):
        write_atomically(path, lambda stream: stream.write(text))


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
    record_path, lock_path = record_paths(directory, indexed.idx_path)
    expected = _expected_record(indexed.idx_path, *stats)
    if _read_record(record_path) == expected:
        indexed.validated = True
        return VOUCHED
    with exclusive(lock_path) as held:
        if held and _read_record(record_path) == expected:
            indexed.validated = True  # another process validated while we waited
            return VOUCHED
        began = time.time_ns()
        indexed.validate()
        now = indexed.local_stats(now=True)
        unchanged = all(
            after is not None and identity(before) == identity(after)
            for before, after in zip(stats, now)
        )
        if unchanged and settled(stats, began):
            _write_record(record_path, expected)
    return VALIDATED


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
