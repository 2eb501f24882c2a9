"""The one-file description of a built blend: what a restart needs to know of every corpus
without opening 10,000 .idx files (megatron's ``--per-dataset-sequences-path`` is the
peer concept; megatron trusts that file as given, this one is checked).

A cache entry (:mod:`megadata_core.indices.cache`, split name ``blend``) keyed by the
build's inputs *without* the corpora's contents: the config fields, jobs and recipes of
the build bundle and the prefixes as given. Its arrays:

* ``files`` int64 [P, 10]: per prefix, the ``.idx`` then the ``.bin`` file identity
  (device, inode, size, mtime_ns, ctime_ns), taken before the corpus was read;
* ``headers`` int64 [P, 4]: .idx dtype code, sequences, document boundaries, multimodal;
* ``bundle_key`` uint8 [64]: the key of the build bundle these corpora produced;
* ``identities`` uint8 [B]: the canonical JSON of every corpus's identity (the sha256
  of a small .idx; a sampled identity otherwise), whose sha256 the bundle's description
  holds (``corpora``): the per-prefix lists live in arrays, not in the descriptions,
  whose JSON a warm start of 10,000 prefixes would otherwise spend ~0.4 s writing,
  hashing and reading.

Checked at a warm start: the entry's own checks (every file's CRC-32, the description
and its key), then one ``stat`` of every .idx and .bin, all identities equal to the
recorded ones, and the bundle entry's checks (its description hashes to the recorded key
and matches this build but for the corpora; the identities hash to its ``corpora``).
Deferred to the first read of a member
(:class:`~megadata_core.format.described.DescribedCorpus`): its .idx bytes against the
recorded sha256 and header, its .bin identity. Any stat that differs sends the build
down the full path (every .idx read and identified), which writes a new record.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os

import numpy as np

from megadata_core.datasets.corpus_trust import ensure_validated
from megadata_core.errors import DataError
from megadata_core.format import bin_path_of, idx_path_of
from megadata_core.format.described import CorpusRecord, DescribedCorpus
from megadata_core.format.dtypes import code_of, dtype_of
from megadata_core.format.sources import is_local, local_path
from megadata_core.indices.cache import (
    canonical_json,
    description_key,
    entry_paths,
    json_digest,
    load_by_key,
    load_cached,
    save_cached,
)

RECORD_VERSION = 2  # 2: identities as an array, prefixes as a digest
RECORD_SPLIT = "blend"
RECORD_ARRAYS = ("files", "headers", "bundle_key", "identities")
_STAT_FIELDS = 5


def record_description(bundle_description: dict, prefixes: list[str]) -> dict:
    """The record's key inputs: the bundle's description without the corpora's
    identities, plus the prefixes (the record maps paths to identities)."""
    build = {key: value for key, value in bundle_description.items() if key != "corpora"}
    return {
        "kind": "megadata.BlendRecord",
        "version": RECORD_VERSION,
        "build": build,
        "prefixes": json_digest(list(prefixes)),
    }


def _identity(path: str) -> list[int]:
    info = os.stat(path)
    return [info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns]


def file_identities(prefixes: list[str]) -> np.ndarray | None:
    """int64 [P, 10]: the .idx and .bin identities of every prefix (one stat each); None
    when a prefix is not a local file pair (remote, missing: no record)."""
    rows = []
    for prefix in prefixes:  # one syscall per file: nothing to vectorize
        if not is_local(prefix):
            return None
        try:
            rows.append(
                _identity(local_path(idx_path_of(prefix)))
                + _identity(local_path(bin_path_of(prefix)))
            )
        except OSError:
            return None
    return np.array(rows, dtype=np.int64).reshape(len(prefixes), 2 * _STAT_FIELDS)


def save_record(
    directory: str,
    description: dict,
    files: np.ndarray,
    corpora: list,
    identities: list,
    bundle_key: str,
) -> None:
    """Write the record (atomically, as every cache entry; a directory that cannot be
    written leaves none: the next start takes the full path)."""
    headers = np.array(
        [
            [code_of(corpus.dtype), len(corpus), corpus.num_documents + 1,
             int(bool(corpus.multimodal))]
            for corpus in corpora
        ],
        dtype=np.int64,
    ).reshape(len(corpora), 4)
    key = np.frombuffer(bundle_key.encode("ascii"), dtype=np.uint8)
    # the bytes json_digest hashes: the bundle's "corpora" is their sha256
    text = canonical_json({"value": identities}).encode("utf-8")
    try:
        save_cached(
            directory, description, RECORD_SPLIT,
            {"files": files, "headers": headers, "bundle_key": key,
             "identities": np.frombuffer(text, dtype=np.uint8)},
        )
    except OSError:
        pass


def load_record(
    directory: str, description: dict, files: np.ndarray, bundle_split: str,
    bundle_names: tuple[str, ...], bundle_description: dict,
) -> tuple[dict[str, np.ndarray], list[CorpusRecord], str] | None:
    """``(bundle arrays, corpus records, bundle entry name)`` when the record exists,
    every file identity in ``files`` is the recorded one and its bundle is there and
    matches; None otherwise (take the full path).

    Raises:
        DataError: naming the file, when the record or its bundle is damaged.
    """
    found = load_cached(directory, description, RECORD_SPLIT, RECORD_ARRAYS)
    if found is None:
        return None
    where = entry_paths(directory, description_key(description), RECORD_SPLIT, ())[
        "description"
    ]
    recorded, headers = np.asarray(found["files"]), np.asarray(found["headers"])
    count = len(files)
    if recorded.shape != files.shape or headers.shape != (count, 4):
        raise DataError(f"{where}: arrays of shapes {recorded.shape} {headers.shape} for "
                        f"{count} prefixes")
    if not np.array_equal(recorded, files):
        return None  # a corpus changed (or was touched): the full path
    bundle_key = bytes(np.asarray(found["bundle_key"])).decode("ascii", "replace")
    try:
        loaded = load_by_key(directory, bundle_key, bundle_split, bundle_names)
    except DataError:
        return None  # a damaged bundle: the full path finds it, warns and rebuilds it
    if loaded is None:
        return None
    stored, arrays = loaded
    rest = {key: value for key, value in stored.items() if key != "corpora"}
    expected = {key: value for key, value in bundle_description.items() if key != "corpora"}
    if rest != expected:
        raise DataError(f"{where}: its bundle {bundle_key} was built from other inputs")
    text = bytes(np.asarray(found["identities"], dtype=np.uint8))
    if stored.get("corpora") != {"sha256": hashlib.sha256(text).hexdigest()}:
        raise DataError(f"{where}: its corpus identities are not those of bundle {bundle_key}")
    try:
        corpora = json.loads(text)["value"]
    except (ValueError, TypeError, KeyError) as error:
        raise DataError(f"{where}: corpus identities unreadable ({error})") from None
    if not isinstance(corpora, list) or len(corpora) != count:
        raise DataError(f"{where}: {len(corpora)} corpus identities for {count} prefixes")
    records = []
    for row, stat_row, identity in zip(headers.tolist(), files.tolist(), corpora):
        code, sequences, boundaries, multimodal = row
        exact = isinstance(identity, list) and len(identity) == 3 and identity[0] == "idx_sha256"
        records.append(
            CorpusRecord(
                dtype_of(code, path=where), sequences, boundaries, bool(multimodal),
                stat_row[_STAT_FIELDS + 2], tuple(stat_row[:2]),
                tuple(stat_row[_STAT_FIELDS : _STAT_FIELDS + 2]),
                identity[1] if exact else None,
            )
        )
    bundle_file = entry_paths(directory, bundle_key, bundle_split, ())["description"]
    return arrays, records, bundle_file


def described_corpora(
    prefixes: list[str],
    records: list[CorpusRecord],
    where: str,
    mmap: bool,
    path_to_cache: str | None = None,
) -> list[DescribedCorpus]:
    """One :class:`DescribedCorpus` per prefix (no file opened). A large .idx is validated
    at first use unless ``path_to_cache`` holds a record of a validation of the same files
    (:func:`~megadata_core.datasets.corpus_trust.ensure_validated`)."""
    validator = functools.partial(ensure_validated, directory=path_to_cache)
    return [
        DescribedCorpus(prefix, record, where, mmap=mmap, validator=validator)
        for prefix, record in zip(prefixes, records)
    ]
