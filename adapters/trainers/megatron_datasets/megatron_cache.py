"""Megatron's own index cache layout, shared with stock megatron-core both ways.

Stock megatron-core (and Megatron-LM's ``tools/prepare_cache.py``) keeps, in
``path_to_cache``, for a dataset of class C and split P whose ``unique_description``
hashes (md5) to H::

    H-C-P-description.txt         the unique_description itself
    H-C-P-document_index.npy      GPT datasets: document, sample and shuffle index
    H-C-P-sample_index.npy
    H-C-P-shuffle_index.npy
    H-C-P-dataset_index.npy       blends: which dataset, which of its samples
    H-C-P-dataset_sample_index.npy

and reads such files without a check (a damaged file is served). The drop-in writes them
(so a stock job started on the same ``path_to_cache`` finds a warm cache), and reads
them only verified: a set of files is compared whole, once, with the arrays megadata
builds for the same description (equal values, or it is not served: a warning, and
megadata's own arrays are used), and a sidecar record then vouches for those very files
by identity and CRC-32, as megadata's own entries are (:mod:`megadata_core.cache`):

    H-C-P-megadata-verified.json

A file changed since (another identity) is verified again. Writes are atomic (a
temporary of the writer, then ``os.replace``) and only add missing files; files a stock
job wrote are never rewritten. A build shares its files once per build of a config (a
marker): before ``build()`` returns when it has fewer than :data:`SYNC_BELOW` datasets,
else on a background thread (:func:`share_later`: writing a 1,000-prefix blend's 8,000
files takes longer than its build), finished at exit or by :func:`flush`.
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import json
import os
import threading
import time
import warnings
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor

import numpy

from megadata_core.cache.npy_files import npy_header, stream_crc, write_npy
from megadata_core.files import atomic as temporary
from megadata_core.files.atomic import write_atomically
from megadata_core.files.identity import identity, settled

GPT_FILES = ("document_index", "sample_index", "shuffle_index")
BLEND_FILES = ("dataset_index", "dataset_sample_index")
RECORD_FORMAT = "megadata-megatron-cache-check"
#: Builds of fewer datasets write their Megatron-layout files before build() returns.
SYNC_BELOW = 64
RECORD_VERSION = 1


def base_path(directory: str, description: str, class_name: str, split_name: str) -> str:
    """``directory/H-C-P`` (H the md5 of ``description``, as megatron-core hashes it)."""
    digest = hashlib.md5(description.encode("utf-8"), usedforsecurity=False).hexdigest()
    return os.path.join(directory, f"{digest}-{class_name}-{split_name}")


def _paths(base: str, names: tuple[str, ...]) -> dict[str, str]:
    return {name: f"{base}-{name}.npy" for name in names}


def present(base: str, names: tuple[str, ...]) -> bool:
    """Whether every file of the set exists (megatron-core's cache-hit test)."""
    return all(map(os.path.isfile, [f"{base}-description.txt", *_paths(base, names).values()]))


def file_names(base: str, names: tuple[str, ...]) -> list[str]:
    """The names of the files of a set (for one sweep of stale temporaries)."""
    return [os.path.basename(path) for path in
            [f"{base}-description.txt", *_paths(base, names).values()]]


def write(
    base: str, description: str, arrays: Mapping[str, numpy.ndarray], *, clean: bool = True
) -> bool:
    """Write the arrays and the description (last) where any file of the set is missing,
    each atomically, and record them as verified (they are megadata's own arrays).
    Returns whether anything was written; a directory that cannot be written is no
    error (nothing is shared then). ``clean=False``: the caller swept the directory's
    stale temporaries of these files already."""
    names = tuple(arrays)
    if present(base, names):
        return False
    try:
        os.makedirs(os.path.dirname(base) or ".", exist_ok=True)
        for name, path in _paths(base, names).items():
            if not os.path.isfile(path):
                array = numpy.ascontiguousarray(arrays[name])
                write_file = functools.partial(write_npy, header=npy_header(array), array=array)
                write_atomically(path, write_file, clean=clean)
        text = description.encode("utf-8")
        if not os.path.isfile(f"{base}-description.txt"):
            write_atomically(f"{base}-description.txt", lambda stream: stream.write(text),
                             clean=clean)
    except OSError:
        return False
    _record(base, description, names)
    return True


def load(
    base: str,
    description: str,
    names: tuple[str, ...],
    expected: Callable[[], Mapping[str, numpy.ndarray]],
) -> dict[str, numpy.ndarray] | None:
    """The arrays of the set at ``base``, memory-mapped, or None when the set is not
    there (or not served: see the module docstring).

    Args:
        base: from :func:`base_path`.
        description: the dataset's ``unique_description`` (what description.txt holds).
        names: the array names of the set.
        expected: the arrays megadata builds for the same description, asked only when
            the files are not vouched for yet (compared whole, once).
    """
    if not present(base, names):
        return None
    try:
        with open(f"{base}-description.txt", encoding="utf-8") as stream:
            stored = stream.read()
    except OSError:
        return None
    if stored != description:
        warnings.warn(
            f"{base}-description.txt: another dataset's description under this key (not "
            "served; megadata's own indices are used)",
            stacklevel=3,
        )
        return None
    paths = _paths(base, names)
    if not _vouched(base, description, paths):
        began = time.time_ns()
        arrays = _mapped_all(paths)
        if arrays is None:
            return None
        reference = expected()
        differs = [
            name for name in names
            if arrays[name].shape != numpy.shape(reference[name])
            or not numpy.array_equal(arrays[name], reference[name])
        ]
        if differs:
            warnings.warn(
                f"{paths[differs[0]]}: differs from the {differs[0]} megadata builds for "
                "the same description (damaged, or written by another configuration: "
                "megatron-core's key misses add_extra_token_to_sequence); not served, "
                "megadata's own indices are used",
                stacklevel=3,
            )
            return None
        _record(base, description, names, began)
    return _mapped_all(paths)


def build_marker(config, class_name: str, sizes) -> str:
    """The path of the record that a build of this config (every field Megatron's cache
    keys hold, the class and the sizes) has shared its files: later builds of it skip
    the per-dataset checks (3,000 file sets for a 1,000-prefix blend)."""
    fields = {
        name: getattr(config, name, None)
        for name in ("blend", "blend_per_split", "split", "split_matrix", "random_seed",
                     "sequence_length", "tokenizer", "mid_level_dataset_surplus",
                     "multiple_validation_sets", "full_validation")
    }
    text = json.dumps([class_name, list(sizes), fields], sort_keys=True,
                      default=lambda value: getattr(value, "unique_identifiers", repr(value)))
    digest = hashlib.md5(text.encode("utf-8"), usedforsecurity=False).hexdigest()
    return os.path.join(config.path_to_cache, f"megadata-megatron-shared-{digest}.json")


_WRITER: ThreadPoolExecutor | None = None
_PENDING: list[Future] = []
_LOCK = threading.Lock()


def share_later(share: Callable[[], object]) -> Future:
    """Run ``share()`` (writing a build's files) on the background writer thread."""
    global _WRITER
    with _LOCK:
        if _WRITER is None:
            _WRITER = ThreadPoolExecutor(1, thread_name_prefix="megadata-megatron-cache")
            atexit.register(_flush_at_exit)
        future = _WRITER.submit(share)
        _PENDING.append(future)
    return future


def flush() -> None:
    """Wait until every file set handed to :func:`share_later` is written (raising what
    a share raised)."""
    with _LOCK:
        pending = list(_PENDING)
        _PENDING.clear()
    for future in pending:
        future.result()


def _flush_at_exit() -> None:
    """:func:`flush` at interpreter exit: a share that failed is one line on stderr (the
    files it did not write are written by the next build, or by a stock job)."""
    try:
        flush()
    except Exception as error:  # noqa: BLE001 - reported, not raised, at exit
        import sys

        print(f"warning: megadata: Megatron-layout cache files not all written: "
              f"{type(error).__name__}: {error}", file=sys.stderr)


def sweep(directory: str, names: list[str]) -> None:
    """Remove the stale temporaries of ``names`` in ``directory`` (dead writers')."""
    temporary.remove_stale(directory, names)


def mark(path: str) -> None:
    """Write a build's marker (:func:`build_marker`); skipped where it cannot be."""
    text = json.dumps({"format": RECORD_FORMAT, "version": RECORD_VERSION}).encode("utf-8")
    try:
        write_atomically(path, lambda stream: stream.write(text))
    except OSError:
        pass


def _mapped(path: str) -> numpy.ndarray | None:
    try:
        return numpy.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError):
        return None


def _mapped_all(paths: Mapping[str, str]) -> dict[str, numpy.ndarray] | None:
    """Each file of ``paths`` memory-mapped (all are tried), or None when one cannot be."""
    mapped = {name: _mapped(path) for name, path in paths.items()}
    arrays = {name: array for name, array in mapped.items() if array is not None}
    return arrays if len(arrays) == len(mapped) else None


def _record_path(base: str) -> str:
    return f"{base}-megadata-verified.json"


def _expected_record(description: str, paths: Mapping[str, str]) -> dict:
    files = {}
    for name, path in paths.items():
        status = os.stat(path)
        files[name] = list(identity(status))
    return {
        "format": RECORD_FORMAT,
        "version": RECORD_VERSION,
        "description_sha256": hashlib.sha256(description.encode("utf-8")).hexdigest(),
        "identities": files,
    }


def _vouched(base: str, description: str, paths: Mapping[str, str]) -> bool:
    """Whether the sidecar record vouches for these very files (same identities)."""
    try:
        with open(_record_path(base), encoding="utf-8") as stream:
            record = json.load(stream)
        expected = _expected_record(description, paths)
    except (OSError, ValueError):
        return False
    if not isinstance(record, dict):
        return False
    crcs = record.pop("crc32", None)
    return record == expected and isinstance(crcs, dict) and sorted(crcs) == sorted(paths)


def _record(
    base: str, description: str, names: tuple[str, ...], began: int | None = None
) -> None:
    """Record the files of the set as verified, with each file's CRC-32 (read now), if
    every file had settled before ``began`` (the racy-time rule); skipped where the
    directory cannot be written."""
    paths = _paths(base, names)
    began = time.time_ns() if began is None else began
    try:
        stats = [os.stat(path) for path in paths.values()]
        if not settled(stats, began):
            return
        record = _expected_record(description, paths)
        crcs = {}
        for name, path in paths.items():
            with open(path, "rb") as stream:
                crcs[name] = stream_crc(stream)
        record["crc32"] = crcs
        text = json.dumps(record, sort_keys=True).encode("utf-8")
        write_atomically(_record_path(base), lambda stream: stream.write(text))
    except OSError:
        return
