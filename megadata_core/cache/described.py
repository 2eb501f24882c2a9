"""A corpus opened from a record of it (a blend description), its .idx read at first use.

A blend of 10,000 corpora restarted on unchanged files needs from each corpus only what a
record written at its last build says: the dtype, the sequence and document counts and
the .bin size. :class:`DescribedCorpus` answers those from the record and reads the
.idx the first time an index array is asked for (a read of that member, or a build that
needs its lengths). That first read checks the bytes against the record: the file
identity of the .idx and .bin (device, inode), the header counts and dtype, and, for a
small .idx read whole, its sha256 (the digest the build validated); a large .idx is
validated in full then. A mismatch is a DataError naming the file, raised before any of
its tokens are served.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from megadata_core.errors import DataError
from megadata_core.files.identity import which_file
from megadata_core.format.reader import INDEX_ARRAYS as _ARRAYS
from megadata_core.format.reader import IndexedDataset


class CorpusRecord(NamedTuple):
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
        record: CorpusRecord,
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
            state["path_prefix"], CorpusRecord(*state["record"]), state["where"],
            mmap=state["mmap"], validator=state.get("validator"),
        )
        self._open_files = state.get("open_files")

    def __repr__(self) -> str:
        return (
            f"IndexedDataset({self.path_prefix!r}, dtype={self.dtype}, "
            f"sequences={len(self)}, documents={self.num_documents}, "
            f"multimodal={self.multimodal})"
        )
