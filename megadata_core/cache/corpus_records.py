"""Records, in the index cache directory, that a corpus's .idx passed a full validation.

Validating a .idx reads every byte of its arrays (~20 bytes a document: 20 GB, ~20 s at a
billion documents), so a start that finds its index in the cache should not pay it again
for the same files. The cache vouches for its own files by identity (see
:mod:`megadata_core.cache.entries`); this module keeps the same kind of record for a
corpus: after one full validation, the identities ``(device, inode, size, mtime_ns,
ctime_ns)`` of its .idx and .bin (the .bin's size is all validation reads of it), in::

    corpus-{sha256 of the .idx's real path}-validated.json
    corpus-{same}.lock     an flock(2) lock file: one process validates, others wait

A record is only remembered when both files were last changed at least ``RACY_NS``
before the validation began (a later write in the same timestamp tick could leave the
identity unchanged). Any change of either identity sends the next open through a full
validation again. The record only saves work: a missing, unreadable or foreign record
means "validate".
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Iterator

from megadata_core.cache.entries import _exclusive, _write_atomically
from megadata_core.cache.npy_files import RACY_NS, identity

RECORD_FORMAT = "megadata-validated-corpus"
#: Bumped whenever .idx validation checks more (older records then vouch for nothing).
RECORD_VERSION = 1


def record_paths(directory: str, idx_path: str) -> tuple[str, str]:
    """``(record, lock)`` paths of the corpus whose .idx is ``idx_path``."""
    real = os.path.realpath(idx_path)
    key = hashlib.sha256(real.encode("utf-8", "surrogateescape")).hexdigest()
    base = os.path.join(directory, f"corpus-{key}")
    return f"{base}-validated.json", f"{base}.lock"


def expected_record(idx_path: str, idx_stat: os.stat_result, bin_stat: os.stat_result) -> dict:
    """The record that vouches for a .idx and .bin of these stat results."""
    return {
        "format": RECORD_FORMAT,
        "version": RECORD_VERSION,
        "idx": os.path.realpath(idx_path),
        "idx_identity": list(identity(idx_stat)),
        "bin_identity": list(identity(bin_stat)),
    }


def read_record(path: str) -> dict | None:
    """The record at ``path``; None when it is missing or unreadable."""
    try:
        with open(path, encoding="utf-8") as stream:
            record = json.load(stream)
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def settled(stats: tuple[os.stat_result, ...], began_ns: int) -> bool:
    """Whether every file was last changed at least ``RACY_NS`` before ``began_ns``."""
    return all(began_ns - max(s.st_mtime_ns, s.st_ctime_ns) >= RACY_NS for s in stats)


def write_record(path: str, record: dict) -> None:
    """Replace the record (atomically; skipped where the directory cannot be written:
    the next process then validates again)."""
    text = json.dumps(record, sort_keys=True).encode("utf-8")
    with contextlib.suppress(OSError):
        _write_atomically(path, lambda stream: stream.write(text))


@contextlib.contextmanager
def locked(lock_path: str) -> Iterator[bool]:
    """Hold the corpus's exclusive lock (False where locking is unsupported or the
    directory cannot be written)."""
    with _exclusive(lock_path) as held:
        yield held
