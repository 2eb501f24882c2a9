"""The one-file description of a built blend: what a restart needs to know of every corpus
without opening 10,000 .idx files (megatron's ``--per-dataset-sequences-path`` is the
peer concept; megatron trusts that file as given, this one is checked).

A cache entry (:mod:`megadata_core.cache.entries`, split name ``blend``) keyed by the
build's inputs *without* the corpora's contents: the config fields, jobs and recipes of
the build bundle and the prefixes as given. Its arrays:

* ``files`` int64 [P, 10]: per prefix, the ``.idx`` then the ``.bin`` file identity
  (device, inode, size, mtime_ns, ctime_ns), taken before the corpus was read;
* ``headers`` int64 [P, 4]: .idx dtype code, sequences, document boundaries, multimodal;
* ``bundle_key`` uint8 [64]: the key of the build bundle these corpora produced;
* ``identities`` uint8 [B]: the canonical JSON of every corpus's identity (the sha256
  of a small .idx; a sampled identity otherwise), whose sha256 the bundle's description
  holds (``corpora``): the per-prefix lists live in arrays, not in the descriptions,
  whose JSON a warm start of 10,000 prefixes would otherwise write, hash and read.

Checked at a warm start: the entry's own checks (every file's CRC-32, the description
and its key), then one ``stat`` of every .idx and .bin, all identities equal to the
recorded ones, and the bundle entry's checks (its description hashes to the recorded key
and matches this build but for the corpora; the identities hash to its ``corpora``).
Any stat that differs sends the build down the full path (every .idx read and
identified), which writes a new record.

A restart on unchanged files then needs from each corpus only what the record says: the
dtype, the sequence and document counts and the .bin size. :class:`DescribedCorpus`
answers those from the record and reads the .idx the first time an index array is asked
for (a read of that member, or a build that needs its lengths). That first read checks
the bytes against the record: the file identity of the .idx and .bin (device, inode),
the header counts and dtype, and, for a small .idx read whole, its sha256 (the digest
the build validated); a large .idx is validated in full then. A mismatch is a DataError
naming the file, raised before any of its tokens are served.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import threading
from collections.abc import Callable, Mapping
from typing import NamedTuple

import numpy as np

from megadata_core.cache.corpus_trust import ensure_validated
from megadata_core.cache.entries import entry_paths, load_by_key, load_cached, save_cached
from megadata_core.cache.keys import canonical_json, description_key
from megadata_core.errors import DataError
from megadata_core.files.identity import path_identity, which_file
from megadata_core.format import bin_path_of, idx_path_of
from megadata_core.format.idx_layout import DTYPE_BY_CODE, code_of, dtype_of
from megadata_core.format.reader import INDEX_ARRAYS as _ARRAYS
from megadata_core.format.reader import IndexedDataset, OpenFiles
from megadata_core.format.sources import is_local, local_path

_RECORD_SPLIT = "blend"
_RECORD_ARRAYS = ("files", "headers", "bundle_key", "identities")
_STAT_FIELDS = 5


def file_identities(prefixes: list[str]) -> np.ndarray | None:
    """int64 [P, 10]: the .idx and .bin identities of every prefix (one stat each); None
    when a prefix is not a local file pair (remote, missing: no record)."""
    rows = []
    for prefix in prefixes:  # one syscall per file: nothing to vectorize
        if not is_local(prefix):
            return None
        try:
            rows.append(
                [*path_identity(local_path(idx_path_of(prefix)))]
                + [*path_identity(local_path(bin_path_of(prefix)))]
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
            directory, description, _RECORD_SPLIT,
            {"files": files, "headers": headers, "bundle_key": key,
             "identities": np.frombuffer(text, dtype=np.uint8)},
        )
    except OSError:
        pass


def load_record(
    directory: str, description: dict, files: np.ndarray, bundle_split: str,
    bundle_names: tuple[str, ...], bundle_description: dict,
) -> tuple[dict[str, np.ndarray], _CorpusTable, str] | None:
    """``(bundle arrays, corpus table, bundle entry name)`` when the record exists,
    every file identity in ``files`` is the recorded one and its bundle is there and
    matches; None otherwise (take the full path).

    Raises:
        DataError: naming the file, when the record or its bundle is damaged.
    """
    found = load_cached(directory, description, _RECORD_SPLIT, _RECORD_ARRAYS)
    if found is None:
        return None
    where = entry_paths(directory, description_key(description), _RECORD_SPLIT, ())[
        "description"
    ]
    recorded, headers = np.asarray(found["files"]), np.asarray(found["headers"])
    count = len(files)
    if recorded.shape != files.shape or headers.shape != (count, 4):
        raise DataError(f"{where}: arrays of shapes {recorded.shape} {headers.shape} for "
                        f"{count} prefixes")
    if not np.array_equal(recorded, files):
        return None  # a corpus changed (or was touched): the full path
    bad = np.flatnonzero(~np.isin(headers[:, 0], list(DTYPE_BY_CODE)))
    if len(bad):
        dtype_of(int(headers[bad[0], 0]), path=where)  # raises, naming the code
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
    bundle_file = entry_paths(directory, bundle_key, bundle_split, ())["description"]
    return arrays, _CorpusTable(np.array(headers), np.array(files), text, where), bundle_file


class _CorpusRecord(NamedTuple):
    """What a blend description records of one corpus."""

    dtype: np.dtype
    sequences: int
    document_boundaries: int  # entries of the boundaries array (documents + 1)
    multimodal: bool
    bin_size: int
    idx_identity: tuple[int, int]  # (st_dev, st_ino) of the .idx
    bin_identity: tuple[int, int]  # (st_dev, st_ino) of the .bin
    idx_sha256: str | None  # of the whole .idx (small ones, read whole), else None


class DescribedCorpus(IndexedDataset):
    """An :class:`IndexedDataset` whose index arrays are read at first use and checked
    against ``record`` (see the module docstring); ``where`` names the record's file in
    errors. ``len``, ``dtype``, ``multimodal``, ``num_documents`` and ``bin_size`` need
    no file. ``validator(corpus)`` validates a large .idx at first use (default
    :meth:`validate`; a picklable callable, e.g. one that a cache's record of an earlier
    validation of the same files can vouch for)."""

    def __init__(
        self,
        path_prefix: str,
        record: _CorpusRecord,
        where: str,
        *,
        mmap: bool = True,
        validator: Callable[[IndexedDataset], object] | None = None,
    ):
        self.path_prefix = str(path_prefix)
        self._validator = validator
        self.mmap = bool(mmap)
        self._requested_multimodal = bool(record.multimodal)
        self._record = record
        self._where = where
        self.dtype = np.dtype(record.dtype)
        self.multimodal = bool(record.multimodal)
        self._bin_size = int(record.bin_size)
        self.validated = False
        self._loaded = False
        self._loading = threading.Lock()  # builder threads may touch a corpus at once

    def __getattr__(self, name: str):
        # Only called for attributes not set yet: the index arrays and what _open sets.
        state = self.__dict__
        if name.startswith("__") or "_loading" not in state:
            raise AttributeError(name)
        if state.get("_idx_released"):  # loaded, then its .idx map released: re-map
            return IndexedDataset.__getattr__(self, name)
        with state["_loading"]:
            if name not in state:
                if state["_loaded"]:
                    raise AttributeError(name)
                self._load()
        return getattr(self, name)

    def _load(self) -> None:
        record = self._record
        self._loaded = True
        try:
            self._open(validate=False, read_below=0 if record.idx_sha256 is None else 1 << 62)
        except BaseException:
            self._loaded = False
            raise
        problem = None
        count = len(self.__dict__["sequence_lengths"])
        boundaries = len(self.__dict__["document_indices"])
        if (np.dtype(self.dtype), count, boundaries, bool(self.multimodal)) != (
            np.dtype(record.dtype), record.sequences, record.document_boundaries, record.multimodal
        ):
            problem = f"{self.idx_path}: header differs from the record"
        elif self._bin_size != record.bin_size or self._bin_identity != tuple(record.bin_identity):
            problem = f"{self.bin_path}: the .bin is not the one recorded"
        elif record.idx_sha256 is not None and self.idx_sha256() != record.idx_sha256:
            problem = f"{self.idx_path}: contents differ from the recorded sha256"
        if problem is not None:
            self._refuse(f"{problem} in {self._where}")
        if record.idx_sha256 is not None:
            return  # the exact bytes a build validated (``validated`` stays False)
        info = os.stat(self.idx_path) if os.path.exists(self.idx_path) else None
        if info is None or which_file(info) != tuple(record.idx_identity):
            self._refuse(f"{self.idx_path}: not the .idx recorded in {self._where}")
        if self._validator is None:
            self.validate()
        else:
            self._validator(self)

    def _refuse(self, problem: str) -> None:
        """Drop what was loaded and raise: the corpus is not the one recorded."""
        for name in _ARRAYS:
            self.__dict__.pop(name, None)
        self._loaded = False
        if self._open_files is not None:
            self._open_files.closed(self)
        raise DataError(
            f"{problem}: the corpus changed since the blend was built; build the datasets "
            "again"
        )

    def __len__(self) -> int:
        return self._record.sequences

    @property
    def num_documents(self) -> int:
        return self._record.document_boundaries - 1

    def __getstate__(self) -> dict:
        return {
            "path_prefix": self.path_prefix,
            "mmap": self.mmap,
            "record": tuple(self._record),
            "where": self._where,
            "open_files": self._open_files,
            "validator": self._validator,
        }

    def __setstate__(self, state: dict) -> None:
        type(self).__init__(
            self,
            state["path_prefix"], _CorpusRecord(*state["record"]), state["where"],
            mmap=state["mmap"], validator=state.get("validator"),
        )
        self._open_files = state.get("open_files")

    def __repr__(self) -> str:
        return (
            f"IndexedDataset({self.path_prefix!r}, dtype={self.dtype}, "
            f"sequences={len(self)}, documents={self.num_documents}, "
            f"multimodal={self.multimodal})"
        )


class _CorpusTable:
    """What a record says of every corpus, as arrays: ``headers`` int64 [P, 4] (dtype
    code, sequences, document boundaries, multimodal), ``files`` int64 [P, 10] (the .idx
    and .bin identities) and the identities' JSON ``text`` (checked by its sha256
    before; parsed at the first :meth:`record`). ``where`` names the record file."""

    def __init__(self, headers: np.ndarray, files: np.ndarray, text: bytes, where: str):
        self.headers, self.files, self.text, self.where = headers, files, text, where
        self._identities: list | None = None
        self._lock = threading.Lock()

    def _parsed(self) -> list:
        with self._lock:
            if self._identities is None:
                try:
                    identities = json.loads(self.text)["value"]
                except (ValueError, TypeError, KeyError) as error:
                    raise DataError(
                        f"{self.where}: corpus identities unreadable ({error})"
                    ) from None
                if not isinstance(identities, list) or len(identities) != len(self.headers):
                    raise DataError(
                        f"{self.where}: {len(identities)} corpus identities for "
                        f"{len(self.headers)} prefixes"
                    )
                self._identities = identities
            return self._identities

    def record(self, number: int) -> _CorpusRecord:
        """The :class:`_CorpusRecord` of corpus ``number``."""
        code, sequences, boundaries, multimodal = self.headers[number].tolist()
        stat_row = self.files[number].tolist()
        identity = self._parsed()[number]
        exact = isinstance(identity, list) and len(identity) == 3 and identity[0] == "idx_sha256"
        return _CorpusRecord(
            dtype_of(code, path=self.where), sequences, boundaries, bool(multimodal),
            stat_row[_STAT_FIELDS + 2], tuple(stat_row[:2]),
            tuple(stat_row[_STAT_FIELDS : _STAT_FIELDS + 2]),
            identity[1] if exact else None,
        )

    def __getstate__(self) -> dict:
        return {"headers": self.headers, "files": self.files, "text": self.text,
                "where": self.where}

    def __setstate__(self, state: dict) -> None:
        type(self).__init__(self, **state)


class RecordedCorpora(Mapping):
    """prefix -> :class:`DescribedCorpus`, each made at its first access from the
    ``table`` (no file opened until then; see the module docstring for what its first
    read checks). ``dtype_codes`` and ``sequences`` (int64 [P]) need no corpus."""

    def __init__(
        self,
        prefixes: list[str],
        table: _CorpusTable,
        where: str,
        mmap: bool,
        path_to_cache: str | None = None,
        open_files: OpenFiles | None = None,
    ) -> None:
        self.prefixes = list(prefixes)
        self.table, self.where, self.mmap = table, where, mmap
        self.path_to_cache, self.open_files = path_to_cache, open_files
        self.dtype_codes = table.headers[:, 0]
        self.sequences = table.headers[:, 1]
        self._numbers = {prefix: number for number, prefix in enumerate(self.prefixes)}
        self._made: dict[int, DescribedCorpus] = {}
        self._lock = threading.Lock()

    def at(self, number: int) -> DescribedCorpus:
        """Corpus ``number`` (the prefixes' order), made once."""
        corpus = self._made.get(number)
        if corpus is None:
            with self._lock:
                corpus = self._made.get(number)
                if corpus is None:
                    validator = functools.partial(ensure_validated, directory=self.path_to_cache)
                    corpus = DescribedCorpus(
                        self.prefixes[number], self.table.record(number), self.where,
                        mmap=self.mmap, validator=validator,
                    )
                    corpus.share_open_files(self.open_files)
                    self._made[number] = corpus
        return corpus

    def number(self, prefix: str) -> int:
        return self._numbers[prefix]

    def __getitem__(self, prefix: str) -> DescribedCorpus:
        return self.at(self._numbers[prefix])

    def __iter__(self):
        return iter(self.prefixes)

    def __len__(self) -> int:
        return len(self.prefixes)

    def __getstate__(self) -> dict:
        return {"prefixes": self.prefixes, "table": self.table, "where": self.where,
                "mmap": self.mmap, "path_to_cache": self.path_to_cache,
                "open_files": self.open_files}

    def __setstate__(self, state: dict) -> None:
        type(self).__init__(self, **state)
