"""``megatron.core.datasets.indexed_dataset``: the .bin/.idx corpus, read by megadata.

:class:`IndexedDataset` is Megatron's class over a :class:`megadata_core.IndexedDataset`:
the same constructor, ``index`` (an :class:`_IndexReader`), ``bin_reader`` (one of the
reader classes below, chosen as Megatron chooses), ``[i]``, ``[i:j]``, ``get`` and the
array properties, with megadata's validation at open (a damaged corpus is a DataError
naming the file and field, where megatron-core reads garbage or crashes). ``s3://``
prefixes read through ``boto3.client("s3")`` as megatron-core reads them (the .idx copied
under ``path_to_idx_cache``; ``MEGADATA_S3_CLIENT=tensorstore`` for TensorStore),
``msc://`` ones through the Multi-Storage Client (:mod:`megadata_adapters.storage.msc_bins`).
:class:`IndexedDatasetBuilder` writes through :class:`megadata_core.IndexedDatasetWriter`
(byte-identical files, written under temporary names and renamed at ``finalize``).
"""

from __future__ import annotations

import contextlib
import os
from abc import ABC, abstractmethod
from enum import Enum

import numpy

import megadata_core as mdc
from megadata_adapters.trainers.megatron_datasets._errors import MegatronCompatError, require
from megadata_adapters.trainers.megatron_datasets.object_storage_utils import (  # noqa: F401 (Megatron's names)
    ObjectStorageConfig,
    S3Config,
    dataset_exists,
    drop_in_reads,
    get_index_cache_path,
    get_object_storage_access,
    is_object_storage_path,
)
from megadata_core.errors import DataError
from megadata_core.format import idx_layout
from megadata_core.format.sources import open_source

_INDEX_HEADER = idx_layout.MAGIC


class DType(Enum):
    """The .idx dtype codes."""

    uint8 = 1
    int8 = 2
    int16 = 3
    int32 = 4
    int64 = 5
    float64 = 6
    float32 = 7
    uint16 = 8

    @classmethod
    def code_from_dtype(cls, value: type[numpy.number]) -> int:
        return cls[numpy.dtype(value).name].value

    @classmethod
    def dtype_from_code(cls, value: int) -> type[numpy.number]:
        return getattr(numpy, cls(value).name)

    @staticmethod
    def size(key: int | type[numpy.number]) -> int:
        """Bytes per element of a dtype code or numpy type."""
        if isinstance(key, (int, numpy.integer)) and not isinstance(key, bool):
            return numpy.dtype(DType.dtype_from_code(int(key))).itemsize
        if isinstance(key, type) and issubclass(key, numpy.number):
            return numpy.dtype(key).itemsize
        raise DataError(f"DType.size: {key!r} is neither a dtype code nor a numpy number type")

    @staticmethod
    def optimal_dtype(cardinality: int | None) -> type[numpy.number]:
        """uint16 below 65,500 token ids, else int32."""
        return mdc.optimal_dtype(cardinality)


def get_idx_path(path_prefix: str) -> str:
    return path_prefix + ".idx"


def get_bin_path(path_prefix: str) -> str:
    return path_prefix + ".bin"


class _IndexReader:
    """The .idx arrays: ``sequence_lengths`` int32 [N], ``sequence_pointers`` int64 [N],
    ``document_indices`` int64 [D + 1], ``sequence_modes`` int8 [N] or None, ``dtype``
    (a numpy type), ``dtype_size``, ``sequence_count``, ``document_count`` (D + 1).

    Opened from a path (header checked against the file size), or made by
    :class:`IndexedDataset` over its megadata corpus (no second read).
    """

    def __init__(
        self,
        idx_path: str,
        multimodal: bool,
        sequences_per_dataset: tuple[int, int] | None = None,
        dtype_code: int | None = None,
    ) -> None:
        size = os.path.getsize(idx_path)
        with open(idx_path, "rb") as stream:
            header = idx_layout.parse_header(
                stream.read(idx_layout.HEADER_SIZE), size, idx_path, bool(multimodal)
            )
        buffer = numpy.memmap(idx_path, dtype=numpy.uint8, mode="r")
        count = header.sequence_count

        def view(dtype, offset, n):
            return numpy.frombuffer(buffer, dtype=dtype, count=n, offset=offset)

        self._set(
            header.dtype,
            view(numpy.int32, header.lengths_offset, count),
            view(numpy.int64, header.pointers_offset, count),
            view(numpy.int64, header.documents_offset, header.document_count),
            view(numpy.int8, header.modes_offset, count) if header.multimodal else None,
        )
        check_counts(idx_path, self, sequences_per_dataset, dtype_code)

    @classmethod
    def _of(cls, corpus: mdc.IndexedDataset) -> _IndexReader:
        return _CorpusIndex(corpus)

    def _set(self, dtype, lengths, pointers, documents, modes) -> None:
        self.dtype = numpy.dtype(dtype).type
        self.dtype_size = numpy.dtype(dtype).itemsize
        self.sequence_lengths = lengths
        self.sequence_pointers = pointers
        self.document_indices = documents
        self.sequence_modes = modes
        self.sequence_count = len(lengths)
        self.document_count = len(documents)

    def __len__(self) -> int:
        return self.sequence_count

    def __getitem__(self, idx: int) -> tuple:
        """``(pointer, length, mode or None)`` of sequence ``idx``."""
        return (
            self.sequence_pointers[idx],
            self.sequence_lengths[idx],
            self.sequence_modes[idx] if self.sequence_modes is not None else None,
        )


class _CorpusIndex(_IndexReader):
    """The :class:`_IndexReader` of an open megadata corpus: each array asked of the
    corpus at each access, never kept, so a corpus whose .idx map its ``max_open_files``
    bound released maps it again instead of being pinned open here."""

    def __init__(self, corpus: mdc.IndexedDataset) -> None:
        self._corpus = corpus
        self.dtype = numpy.dtype(corpus.dtype).type
        self.dtype_size = numpy.dtype(corpus.dtype).itemsize
        self.sequence_count = len(corpus)
        self.document_count = corpus.num_documents + 1

    sequence_lengths = property(lambda self: self._corpus.sequence_lengths)
    sequence_pointers = property(lambda self: self._corpus.sequence_pointers)
    document_indices = property(lambda self: self._corpus.document_indices)
    sequence_modes = property(lambda self: self._corpus.sequence_modes)


def check_counts(path, index, sequences_per_dataset, dtype_code) -> None:
    """Megatron trusts ``sequences_per_dataset`` / ``dtype_code`` instead of the header;
    megadata reads the header anyway and refuses a mismatch."""
    if sequences_per_dataset:
        expected = (int(sequences_per_dataset[0]), int(sequences_per_dataset[1]))
        found = (index.sequence_count, index.document_count)
        if expected != found:
            raise DataError(
                f"{path}: sequences_per_dataset says (sequences, documents + 1) = {expected}, "
                f"the index holds {found}"
            )
    if dtype_code is not None and DType.code_from_dtype(index.dtype) != dtype_code:
        raise DataError(
            f"{path}: dtype_code {dtype_code} given, the index holds "
            f"{numpy.dtype(index.dtype).name} (code {DType.code_from_dtype(index.dtype)})"
        )


class _BinReader(ABC):
    """Reads ``count`` items of ``dtype`` from byte ``offset`` of a .bin."""

    @abstractmethod
    def _bytes(self, offset: int, nbytes: int):
        """``nbytes`` bytes from ``offset`` (a buffer)."""

    def read(self, dtype: type[numpy.number], count: int, offset: int) -> numpy.ndarray:
        nbytes = int(count) * numpy.dtype(dtype).itemsize
        return numpy.frombuffer(self._bytes(int(offset), nbytes), dtype=dtype, count=int(count))


class _MMapBinReader(_BinReader):
    """A memory-mapped local .bin."""

    def __init__(self, bin_path: str) -> None:
        self._bin_path = bin_path
        size = os.path.getsize(bin_path)
        # the memmap's bytes (its view keeps the mapping), or none for an empty file
        self._map: memoryview | bytes = b""
        if size:
            self._map = numpy.memmap(bin_path, dtype=numpy.uint8, mode="r").data

    def _bytes(self, offset: int, nbytes: int):
        return memoryview(self._map)[offset : offset + nbytes]


class _SourceBinReader(_BinReader):
    """A .bin read through a megadata byte source (``os.pread`` locally)."""

    def __init__(self, bin_path: str) -> None:
        self._bin_path = bin_path
        self._source = open_source(bin_path)

    def _bytes(self, offset: int, nbytes: int):
        return self._source.read(offset, nbytes) if nbytes else b""


class _FileBinReader(_SourceBinReader):
    """A local .bin read with ``os.pread`` (megadata's reads raise on a short file;
    Megatron's retry arguments are accepted)."""

    def __init__(
        self, bin_path: str, num_max_retries: int = 3, sleep_duration_start: int = 10
    ) -> None:
        super().__init__(bin_path)
        self.num_max_retries = num_max_retries
        self.sleep_duration_start = sleep_duration_start


class _S3BinReader(_SourceBinReader):
    """An ``s3://`` .bin read through megadata's byte source for s3: boto3's
    ``get_object`` blocks (``MEGADATA_S3_CLIENT=tensorstore``: TensorStore's exact ranges)."""

    def __init__(self, bin_path: str, object_storage_config: ObjectStorageConfig) -> None:
        require(
            object_storage_config.bin_chunk_nbytes > 0,
            f"bin_chunk_nbytes: {object_storage_config.bin_chunk_nbytes} must be > 0",
        )
        with drop_in_reads():
            super().__init__(bin_path)


class _MultiStorageClientBinReader(_SourceBinReader):
    """An ``msc://`` .bin read through megadata's byte source for the Multi-Storage Client
    (:mod:`megadata_adapters.storage.msc_bins`): the same checked, coalesced reads as ``s3://``."""

    def __init__(self, bin_path: str, object_storage_config: ObjectStorageConfig) -> None:
        super().__init__(bin_path)


OBJECT_STORAGE_BIN_READERS = {"s3": _S3BinReader, "msc": _MultiStorageClientBinReader}


class IndexedDataset:
    """A Megatron .bin/.idx corpus (megatron-core's constructor and attributes).

    ``ds.corpus`` is the :class:`megadata_core.IndexedDataset` that serves every read;
    ``bin_reader`` is made at first use (opening a 1,000-prefix blend opens no .bin).
    """

    def __init__(
        self,
        path_prefix: str,
        multimodal: bool = False,
        mmap: bool = True,
        object_storage_config: ObjectStorageConfig | None = None,
        s3_config: ObjectStorageConfig | None = None,
        fast_cache_load: bool = False,
        sequences_per_dataset: tuple[int, int] | None = None,
        dtype_code: int | None = None,
    ) -> None:
        self.initialize(
            path_prefix,
            multimodal,
            mmap,
            object_storage_config or s3_config,
            fast_cache_load,
            sequences_per_dataset,
            dtype_code,
        )

    def initialize(
        self,
        path_prefix: str,
        multimodal: bool,
        mmap: bool,
        object_storage_config: ObjectStorageConfig | None,
        fast_cache_load: bool = False,
        sequences_per_dataset: tuple[int, int] | None = None,
        dtype_code: int | None = None,
        *,
        corpus: mdc.IndexedDataset | None = None,
    ) -> None:
        path_prefix = os.fspath(path_prefix)
        remote = is_object_storage_path(path_prefix)
        if mmap:
            require(
                not object_storage_config,
                f"{path_prefix}: mmap must be False with an object_storage_config",
            )
        if remote:
            require(
                object_storage_config is not None,
                f"{path_prefix}: object-storage corpora need an object_storage_config",
            )
        self.path_prefix = path_prefix
        self.multimodal = bool(multimodal)
        self.mmap = bool(mmap)
        self.object_storage_config = object_storage_config
        self.fast_cache_load = fast_cache_load
        self.sequences_per_dataset = sequences_per_dataset
        self.dtype_code = dtype_code
        if corpus is None:
            copies = {}
            if remote and object_storage_config and object_storage_config.path_to_idx_cache:
                idx_path = get_idx_path(path_prefix)
                copies[idx_path] = get_index_cache_path(idx_path, object_storage_config)
            with drop_in_reads(copies) if remote else contextlib.nullcontext():
                corpus = mdc.IndexedDataset(
                    path_prefix, multimodal=self.multimodal, mmap=self.mmap
                )
        self.corpus = corpus
        self._bin_reader: _BinReader | None = None
        self.index = _IndexReader._of(corpus)
        check_counts(get_idx_path(path_prefix), self.index, sequences_per_dataset, dtype_code)

    @classmethod
    def _of(cls, corpus: mdc.IndexedDataset, config=None) -> IndexedDataset:
        """Megatron's view of an already open megadata corpus (an object-storage one as
        Megatron's GPTDataset opens it: ``mmap=False``, the config's
        ``object_storage_cache_path``)."""
        self = cls.__new__(cls)
        storage = None
        if is_object_storage_path(corpus.path_prefix):
            # None without a config (Megatron's GPTDataset passes its Optional path too)
            cache_path = getattr(config, "object_storage_cache_path", None)
            storage = ObjectStorageConfig(path_to_idx_cache=cache_path)  # type: ignore[arg-type]
        self.initialize(
            corpus.path_prefix,
            corpus.multimodal,
            corpus.mmap and storage is None,
            storage,
            getattr(config, "fast_cache_load", False),
            None,
            None,
            corpus=corpus,
        )
        return self

    @property
    def bin_reader(self) -> _BinReader:
        """Megatron's reader class for this corpus (made at first use)."""
        if self._bin_reader is None:
            bin_path = get_bin_path(self.path_prefix)
            if self.mmap:
                self._bin_reader = _MMapBinReader(bin_path)
            elif self.object_storage_config:
                access = get_object_storage_access(self.path_prefix)
                self._bin_reader = OBJECT_STORAGE_BIN_READERS[access](
                    bin_path, self.object_storage_config
                )
            else:
                self._bin_reader = _FileBinReader(bin_path)
        return self._bin_reader

    def __getstate__(self) -> tuple:
        return (
            self.path_prefix,
            self.multimodal,
            self.mmap,
            self.object_storage_config,
            self.fast_cache_load,
            self.sequences_per_dataset,
            self.dtype_code,
        )

    def __setstate__(self, state: tuple) -> None:
        self.initialize(*state)

    def __len__(self) -> int:
        return len(self.corpus)

    def __getitem__(self, idx):
        """Sequence ``idx`` (``(tokens, mode)`` when multimodal), or a list for a
        contiguous slice (with the modes array when multimodal)."""
        if isinstance(idx, (bool, numpy.bool_)):
            raise TypeError(f"Unexpected type received for idx: {type(idx)}")
        return self.corpus[idx]

    def get(self, idx: int, offset: int = 0, length: int | None = None):
        """Tokens ``[offset, offset + length)`` of sequence ``idx``."""
        return self.corpus.get(idx, offset=int(offset), length=length)

    @property
    def sequence_lengths(self) -> numpy.ndarray:
        return self.index.sequence_lengths

    @property
    def document_indices(self) -> numpy.ndarray:
        return self.index.document_indices

    def get_document_indices(self) -> numpy.ndarray:
        return self.index.document_indices

    def set_document_indices(self, document_indices: numpy.ndarray) -> None:
        raise DataError(
            f"{self.path_prefix}: set_document_indices is not supported (megadata's corpus "
            "index is read-only; write a new corpus instead)"
        )

    @property
    def sequence_modes(self) -> numpy.ndarray:
        if self.index.sequence_modes is None:
            raise MegatronCompatError(
                f"{self.path_prefix}: sequence_modes of a corpus opened with multimodal=False"
            )
        return self.index.sequence_modes

    @staticmethod
    def exists(path_prefix: str) -> bool:
        """Whether both files (objects) exist."""
        if is_object_storage_path(path_prefix):
            return dataset_exists(path_prefix, get_idx_path(path_prefix), get_bin_path(path_prefix))
        return os.path.exists(get_idx_path(path_prefix)) and os.path.exists(
            get_bin_path(path_prefix)
        )


def _tokens(values, dtype) -> numpy.ndarray:
    """Tokens as an array: torch tensors, lists, and lists of digit strings (Megatron's
    tests pass those; numpy parses them)."""
    if hasattr(values, "numpy") and not isinstance(values, numpy.ndarray):
        values = values.numpy()
    array = numpy.asarray(values)
    if array.dtype.kind in "US":
        try:
            array = array.astype(numpy.int64)
        except ValueError:
            raise DataError(f"tokens: {values!r} holds a string that is not an integer") from None
    return array


class IndexedDatasetBuilder:
    """Writes a corpus: ``IndexedDatasetBuilder(prefix + ".bin", dtype)``, ``add_item`` /
    ``add_document`` / ``end_document`` / ``add_index``, then ``finalize(prefix + ".idx")``.

    Both files appear (renamed from temporary names) at ``finalize``; an error before
    leaves nothing. ``finalize`` must name the .idx beside the .bin.
    """

    def __init__(
        self, bin_path: str, dtype: type[numpy.number] = numpy.int32, multimodal: bool = False
    ) -> None:
        bin_path = os.fspath(bin_path)
        if not bin_path.endswith(".bin"):
            raise DataError(f"bin_path: {bin_path!r} does not end in .bin")
        self.dtype = dtype
        self.multimodal = multimodal
        self._writer = mdc.IndexedDatasetWriter(
            bin_path[: -len(".bin")], dtype, multimodal=multimodal
        )

    def add_item(self, tensor, mode: int = 0) -> None:
        self._writer.add_item(_tokens(tensor, self.dtype), mode=mode)

    def add_document(self, tensor, lengths: list[int], modes: list[int] | None = None) -> None:
        self._writer.add_document(_tokens(tensor, self.dtype), lengths, modes)

    def end_document(self) -> None:
        self._writer.end_document()

    def add_index(self, path_prefix: str) -> None:
        self._writer.add_index(path_prefix)

    def finalize(self, idx_path: str) -> None:
        self._writer.finalize(idx_path)
