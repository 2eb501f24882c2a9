"""Mock GPT data, as megatron-core 0.16.1's ``MockGPTLowLevelDataset``: no files needed.

Megatron's mock corpus has 100,000 documents whose lengths are
``numpy.random.default_rng(0).integers(1, 4096, size=100000, dtype=int32)``; document d
of length L holds the tokens ``(1, 2, ..., L - 1) % vocab_size`` followed by the EOD id.
:class:`MockGPTLowLevelDataset` is that corpus behind the interface GPTDataset reads
(``sequence_lengths``, ``sequence_pointers``, ``dtype``, ``read_bytes``), with the tokens
computed on request (never materialized: the corpus is ~205M tokens). A GPTDataset over
it (``mdc.build_datasets(config, sizes, mock=True, vocab_size=V)``, or directly) gives
the same samples as Megatron's ``MockGPTDataset`` for the same config; tokens are int32
here (int64 in Megatron) unless the ids need int64.
"""

from __future__ import annotations

import numpy as np

from megadata_core.errors import DataError

MOCK_SEED = 0
MOCK_DOCUMENTS = 100_000
MOCK_MAX_LENGTH = 4096


def _integer(field: str, value: object) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise DataError(f"{field}: {value!r} is not an integer")
    return int(value)


class MockGPTLowLevelDataset:
    """Megatron's deterministic mock corpus (one sequence per document).

    Args:
        vocab_size: V (Megatron: ``tokenizer.vocab_size``); tokens are ``(i + 1) % V``.
        eod_id: the id ending every document (Megatron: ``tokenizer.eod``).
        documents: number of documents (Megatron's is fixed at 100,000; another count
            draws other lengths).

    Attributes:
        sequence_lengths: int32 [N] lengths in ``[1, 4096)``.
        sequence_pointers: int64 [N] byte offsets in the (virtual) flat token stream.
        document_indices: int64 [N + 1] ``0..N`` (one sequence per document).
        dtype: int32 (int64 when the ids need it).
    """

    multimodal = False
    sequence_modes = None
    pointers_aligned = True

    def __init__(self, vocab_size: int, eod_id: int, *, documents: int = MOCK_DOCUMENTS) -> None:
        self.vocab_size = _integer("vocab_size", vocab_size)
        self.eod_id = _integer("eod_id", eod_id)
        self.documents = _integer("documents", documents)
        if self.vocab_size < 1:
            raise DataError(f"vocab_size: {self.vocab_size} must be >= 1")
        if self.documents < 1:
            raise DataError(f"documents: {self.documents} must be >= 1")
        if not 0 <= self.eod_id < self.vocab_size:
            raise DataError(
                f"eod_id: {self.eod_id} is not a token of vocab_size {self.vocab_size} "
                f"(ids 0..{self.vocab_size - 1})"
            )
        info = np.iinfo(np.int32)
        fits = self.vocab_size - 1 <= info.max and info.min <= self.eod_id <= info.max
        self.dtype = np.dtype(np.int32 if fits else np.int64)
        if not np.iinfo(np.int64).min <= self.eod_id <= np.iinfo(np.int64).max:
            raise DataError(f"eod_id: {self.eod_id} does not fit int64")
        rng = np.random.default_rng(seed=MOCK_SEED)
        self.sequence_lengths = rng.integers(
            low=1, high=MOCK_MAX_LENGTH, size=self.documents, dtype=np.int32
        )
        ends = np.cumsum(self.sequence_lengths, dtype=np.int64)
        self._starts = ends - self.sequence_lengths
        self._total = int(ends[-1])
        self.sequence_pointers = self._starts * self.dtype.itemsize
        self.document_indices = np.arange(self.documents + 1, dtype=np.int64)
        self.path_prefix = f"mock://vocab_size={self.vocab_size},eod_id={self.eod_id}"
        for array in (self.sequence_lengths, self.sequence_pointers, self.document_indices):
            array.flags.writeable = False

    def __len__(self) -> int:
        return self.documents

    @property
    def num_documents(self) -> int:
        return self.documents

    @property
    def bin_size(self) -> int:
        """Bytes of the virtual flat token stream."""
        return self._total * self.dtype.itemsize

    def _tokens(self, first: int, count: int) -> np.ndarray:
        """[count] tokens of the flat stream from token ``first``."""
        if first < 0 or count < 0 or first + count > self._total:
            raise DataError(f"{self.path_prefix}: tokens [{first}, {first + count}) out of range")
        where = np.arange(first, first + count, dtype=np.int64)
        document = np.searchsorted(self._starts, where, side="right") - 1
        where -= self._starts[document]
        last = where == self.sequence_lengths[document] - 1
        where += 1
        where %= self.vocab_size
        where[last] = self.eod_id
        return where.astype(self.dtype)

    def read_bytes(self, byte_offset: int, count: int) -> np.ndarray:
        """``count`` tokens from byte ``byte_offset`` of the virtual stream."""
        return self._tokens(int(byte_offset) // self.dtype.itemsize, int(count))

    def token_view(self) -> None:
        """None: there is no file to map (readers go through :meth:`read_bytes`)."""
        return None

    def get(self, index: int, offset: int = 0, length: int | None = None) -> np.ndarray:
        """Tokens ``[offset, offset + length)`` of document ``index``."""
        index = int(index)
        if not -self.documents <= index < self.documents:
            raise IndexError(f"{self.path_prefix}: document {index} out of range")
        index %= self.documents
        size = int(self.sequence_lengths[index])
        if length is None:
            length = size - offset
        if not 0 <= offset <= size or length < 0 or offset + length > size:
            raise DataError(
                f"{self.path_prefix}: [{offset}, {offset + length}) outside document {index} "
                f"of length {size}"
            )
        return self._tokens(int(self._starts[index]) + offset, length)

    def __getitem__(self, index: int) -> np.ndarray:
        """Document ``index``: ``[(1 .. L - 1) % vocab_size, eod_id]``."""
        if isinstance(index, (bool, np.bool_)) or not isinstance(index, (int, np.integer)):
            raise TypeError(f"document index must be an int, got {type(index).__name__}")
        return self.get(index)

    def __getstate__(self) -> dict:
        return {"vocab_size": self.vocab_size, "eod_id": self.eod_id, "documents": self.documents}

    def __setstate__(self, state: dict) -> None:
        type(self).__init__(
            self, state["vocab_size"], state["eod_id"], documents=state["documents"]
        )

    def __repr__(self) -> str:
        return (
            f"MockGPTLowLevelDataset(vocab_size={self.vocab_size}, eod_id={self.eod_id}, "
            f"documents={self.documents})"
        )
