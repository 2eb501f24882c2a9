"""Writing a Megatron .bin/.idx pair, byte-identical to megatron-core's builder.

Memory stays bounded however large the corpus: per-sequence lengths, modes and
document boundaries are buffered in small arrays and spilled to temporary files
next to the output; ``finalize`` streams them into the .idx, computing the byte
pointers chunk by chunk in int64. Both files are written under temporary names
(:mod:`megadata_core.files.atomic`: they name their writer's pid and host) and
``os.replace``d into place at the end, so a crash never leaves a half corpus under the
final name; a new writer of the same prefix removes the temporaries that dead writers
left behind.
Files get the usual ``0o666 & ~umask`` mode.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import numpy as np

from megadata_core.errors import DataError
from megadata_core.files import atomic as temp_files
from megadata_core.format import idx_layout
from megadata_core.format.idx_layout import code_of
from megadata_core.format.reader import IndexedDataset, bin_path_of, idx_path_of
from megadata_core.format.sources import is_local, local_path

_SPILL_ITEMS = 1 << 16  # entries buffered before a spill to disk
_COPY_CHUNK = 1 << 20  # entries per chunk when streaming arrays
_INT32_MAX = int(np.iinfo(np.int32).max)
_TEMP_PARTS = ("bin", "idx", "lengths", "documents", "modes")  # labels {name}.{part}


class _SpilledArray:
    """An append-only 1-D array of one dtype kept in a temporary file.

    Scalars collect in a Python list (cheap per call) and whole arrays are written
    straight through; either way at most ``_SPILL_ITEMS`` entries sit in memory.
    """

    def __init__(self, directory: str, dtype: type, label: str) -> None:
        self.dtype = np.dtype(dtype)
        handle, self.path = temp_files.create_file(directory, label)
        self._file = os.fdopen(handle, "wb")
        self._pending: list[int] = []
        self.count = 0

    def append(self, value: int) -> None:
        self._pending.append(value)
        self.count += 1
        if len(self._pending) >= _SPILL_ITEMS:
            self.flush()

    def extend(self, values) -> None:
        """Append a list of ints or a 1-D array."""
        if isinstance(values, list):
            self._pending.extend(values)
            self.count += len(values)
            if len(self._pending) >= _SPILL_ITEMS:
                self.flush()
            return
        values = np.asarray(values, dtype=self.dtype).reshape(-1)
        if values.size:
            self.flush()
            self._file.write(values.tobytes())
            self.count += values.size

    def flush(self) -> None:
        if self._pending:
            self._file.write(np.array(self._pending, dtype=self.dtype).tobytes())
            self._pending.clear()
        self._file.flush()

    def chunks(self):
        """The stored values, in order, ``_COPY_CHUNK`` at a time."""
        self.flush()
        with open(self.path, "rb") as stream:
            while True:
                chunk = np.fromfile(stream, dtype=self.dtype, count=_COPY_CHUNK)
                if chunk.size == 0:
                    return
                yield chunk

    def discard(self) -> None:
        self._file.close()
        _remove_quietly(self.path)


class IndexedDatasetWriter:
    """Builds ``{path_prefix}.bin`` and ``{path_prefix}.idx``.

    Calls mirror megatron-core's ``IndexedDatasetBuilder``: ``add_item`` appends one
    sequence, ``end_document`` closes a document, ``add_document`` appends a whole
    document of several sequences, ``add_index`` appends another corpus, and
    ``finalize`` writes the index. As a context manager it finalizes on success and
    removes every temporary file on error.
    """

    def __init__(
        self, path_prefix: str, dtype: np.typing.DTypeLike = np.uint16, *, multimodal: bool = False
    ) -> None:
        if not is_local(str(path_prefix)):
            raise DataError(f"{path_prefix}: writing is supported for local paths only")
        self.path_prefix = local_path(str(path_prefix))
        self._dtype_code = code_of(dtype, field="IndexedDatasetWriter dtype")
        self.dtype = np.dtype(dtype).newbyteorder("=")
        self.multimodal = bool(multimodal)
        directory = os.path.dirname(os.path.abspath(self.path_prefix))
        if not os.path.isdir(directory):
            raise DataError(f"{self.path_prefix}: output directory {directory} does not exist")
        self._directory = directory
        name = os.path.basename(self.path_prefix)
        temp_files.check_name_fits(directory, f"{name}.bin", self.path_prefix)
        temp_files.remove_stale(directory, [f"{name}.{part}" for part in _TEMP_PARTS])
        bin_temp = lengths = documents = modes = None
        try:
            handle, bin_temp = temp_files.create_file(directory, f"{name}.bin")
            self._bin = os.fdopen(handle, "wb")
            lengths = _SpilledArray(directory, np.int32, f"{name}.lengths")
            documents = _SpilledArray(directory, np.int64, f"{name}.documents")
            if self.multimodal:
                modes = _SpilledArray(directory, np.int8, f"{name}.modes")
        except OSError as error:
            if bin_temp is not None:
                self._bin.close()
                _remove_quietly(bin_temp)
            for spill in (lengths, documents, modes):
                if spill is not None:
                    spill.discard()
            self._closed = True
            raise DataError(
                f"{self.path_prefix}: cannot write in output directory {directory}: "
                f"{error.strerror or error}"
            ) from None
        self._bin_temp: str = bin_temp
        self._lengths: _SpilledArray = lengths
        self._documents: _SpilledArray = documents
        self._modes: _SpilledArray | None = modes
        self._documents.append(0)
        self._last_boundary = 0
        if self.dtype.kind in "iu":
            info = np.iinfo(self.dtype)
            self._low, self._high = int(info.min), int(info.max)
        self._closed = False

    # -- adding data ----------------------------------------------------------

    def _tokens(self, tokens) -> np.ndarray:
        """``tokens`` as a 1-D array of the writer's dtype, range-checked."""
        if type(tokens) is np.ndarray:
            if tokens.dtype == self.dtype:
                return tokens.reshape(-1)  # holds only representable values by construction
        elif not isinstance(tokens, (list, tuple)) and hasattr(tokens, "numpy"):
            tokens = tokens.numpy()  # torch tensors, as Megatron accepts them
        array = np.asarray(tokens).reshape(-1)
        if array.size == 0:
            return np.empty(0, dtype=self.dtype)
        kind = array.dtype.kind
        if self.dtype.kind in "iu":
            if kind not in "iub":
                raise DataError(
                    f"{self.path_prefix}: tokens have dtype {array.dtype}; integer tokens are "
                    f"needed for a {self.dtype} corpus"
                )
            if not np.can_cast(array.dtype, self.dtype, "safe") and not self._in_range(array):
                low, high = int(array.min()), int(array.max())
                what = "negative token" if low < 0 and self._low == 0 else "token out of range"
                bad = low if low < self._low else high
                raise DataError(
                    f"{self.path_prefix}: tokens hold {what} {bad}; {self.dtype} holds "
                    f"[{self._low}, {self._high}]"
                )
        elif kind not in "iubf":
            raise DataError(f"{self.path_prefix}: tokens have dtype {array.dtype}, not numeric")
        return array.astype(self.dtype, copy=False)

    def _in_range(self, array: np.ndarray) -> bool:
        """Whether every integer token fits the writer's dtype (one reduction when unsigned)."""
        if self._low == 0 and array.dtype.kind == "i":
            # Seen as unsigned, negative values become huge: one max() checks both ends.
            return int(array.view(array.dtype.str.replace("i", "u")).max()) <= self._high
        return self._low <= int(array.min()) and int(array.max()) <= self._high

    def add_item(self, tokens, mode: int = 0) -> None:
        """Append one sequence (and its int8 mode when multimodal)."""
        if self._closed:
            self._raise_closed()
        array = self._tokens(tokens)
        # Contiguous arrays reach the file through the buffer protocol, without a copy.
        self._bin.write(array.data if array.flags.c_contiguous else array.tobytes())
        self._lengths.append(array.size)
        if self._modes is not None:
            self._modes.append(int(mode))

    def _raise_closed(self) -> None:
        raise DataError(f"{self.path_prefix}: writer already finalized or aborted")

    def _check_open(self) -> None:
        if self._closed:
            self._raise_closed()

    def end_document(self) -> None:
        """Close the current document after ``add_item`` calls."""
        self._check_open()
        self._documents.append(self._lengths.count)
        self._last_boundary = self._lengths.count

    def add_document(self, tokens, lengths, modes=None) -> None:
        """Append a document: ``tokens`` split into sequences of ``lengths``."""
        if self._closed:
            self._raise_closed()
        array = self._tokens(tokens)
        lengths = self._lengths_list(lengths, array.size)
        if self._modes is not None:
            modes = [0] * len(lengths) if modes is None else [int(m) for m in modes]
            if len(modes) != len(lengths):
                raise DataError(
                    f"{self.path_prefix}: {len(modes)} modes for {len(lengths)} sequences"
                )
        self._bin.write(array.data if array.flags.c_contiguous else array.tobytes())
        self._lengths.extend(lengths)
        if self._modes is not None:
            self._modes.extend(modes)
        count = self._lengths.count
        self._documents.append(count)
        self._last_boundary = count

    def add_documents(self, tokens, sequence_lengths, sequence_counts=None, modes=None) -> None:
        """Append many documents at once (vectorized; same bytes as one call per document).

        tokens: 1-D, every sequence concatenated; sequence_lengths: int [M];
        sequence_counts: int [D], sequences per document (default: one each, D = M);
        modes: int8 [M] when multimodal (default zeros).
        """
        self._check_open()
        array = self._tokens(tokens)
        lengths = np.asarray(sequence_lengths).reshape(-1)
        if lengths.size and (lengths.dtype.kind not in "iu" or lengths.min() < 0):
            raise DataError(f"{self.path_prefix}: sequence_lengths must be non-negative integers")
        lengths = lengths.astype(np.int64)
        if lengths.size and lengths.max() > _INT32_MAX:
            raise DataError(
                f"{self.path_prefix}: a sequence of {lengths.max()} tokens exceeds int32"
            )
        if int(lengths.sum()) != array.size:
            raise DataError(
                f"{self.path_prefix}: sequence_lengths sum to {int(lengths.sum())} but tokens "
                f"has {array.size} entries"
            )
        if sequence_counts is None:
            counts = np.ones(lengths.size, dtype=np.int64)
        else:
            counts = np.asarray(sequence_counts).reshape(-1).astype(np.int64)
            if counts.size and counts.min() < 0:
                raise DataError(f"{self.path_prefix}: sequence_counts hold a negative value")
            if int(counts.sum()) != lengths.size:
                raise DataError(
                    f"{self.path_prefix}: sequence_counts sum to {int(counts.sum())} but there "
                    f"are {lengths.size} sequences"
                )
        if self._modes is not None:
            modes = np.zeros(lengths.size, np.int8) if modes is None else np.asarray(modes)
            if modes.shape != lengths.shape:
                raise DataError(
                    f"{self.path_prefix}: {modes.size} modes for {lengths.size} sequences"
                )
        self._bin.write(array.data if array.flags.c_contiguous else array.tobytes())
        boundaries = self._lengths.count + np.cumsum(counts)
        self._lengths.extend(lengths)
        if self._modes is not None:
            self._modes.extend(modes)
        self._documents.extend(boundaries)
        self._last_boundary = self._lengths.count if counts.size else self._last_boundary

    def _lengths_list(self, lengths, token_count: int) -> list[int]:
        """``lengths`` as a list of ints, checked: non-negative, int32, summing to the tokens."""
        if type(lengths) is list and len(lengths) == 1 and type(lengths[0]) is int:
            if lengths[0] == token_count and token_count <= _INT32_MAX:
                return lengths  # the common one-sequence document
        if hasattr(lengths, "tolist"):
            lengths = lengths.tolist()
        lengths = [int(length) for length in lengths]
        if lengths and (min(lengths) < 0 or max(lengths) > _INT32_MAX):
            bad = min(lengths) if min(lengths) < 0 else max(lengths)
            raise DataError(
                f"{self.path_prefix}: lengths hold {bad}; each must be in [0, {_INT32_MAX}] "
                "(negative or over int32)"
            )
        if sum(lengths) != token_count:
            raise DataError(
                f"{self.path_prefix}: lengths sum to {sum(lengths)} but the document "
                f"has {token_count} tokens"
            )
        return lengths

    def add_index(self, other_prefix: str) -> None:
        """Append every sequence and document of another corpus with the same dtype."""
        self._check_open()
        other = IndexedDataset(other_prefix, multimodal=self.multimodal or None)
        if other.dtype != self.dtype:
            raise DataError(
                f"{other.idx_path}: dtype {other.dtype} does not match the writer's {self.dtype}"
            )
        if other.multimodal != self.multimodal:
            raise DataError(
                f"{other.idx_path}: multimodal={other.multimodal} does not match the writer's "
                f"multimodal={self.multimodal}"
            )
        offset = self._lengths.count
        count = len(other)
        for start in range(0, count, _COPY_CHUNK):
            self._lengths.extend(other.sequence_lengths[start : start + _COPY_CHUNK])
            if self._modes is not None and other.sequence_modes is not None:  # both or neither
                self._modes.extend(other.sequence_modes[start : start + _COPY_CHUNK])
        boundaries = other.document_indices
        for start in range(1, len(boundaries), _COPY_CHUNK):
            self._documents.extend(boundaries[start : start + _COPY_CHUNK] + offset)
        if len(boundaries) > 1:
            self._last_boundary = offset + count
        used = 0
        if count:
            used = int(other.sequence_pointers[-1])
            used += int(other.sequence_lengths[-1]) * self.dtype.itemsize
        other.close()
        self._bin.flush()
        with open(local_path(other.bin_path), "rb") as source:
            _copy_bytes(source, self._bin, used)

    # -- finishing ------------------------------------------------------------

    def finalize(self, idx_path: str | None = None) -> None:
        """Write the .idx and move both files to their final names.

        ``idx_path`` is accepted for megatron-core compatibility and must name
        this writer's ``{path_prefix}.idx`` if given.
        """
        self._check_open()
        final_idx = idx_path_of(self.path_prefix)
        if self._last_boundary != self._lengths.count:
            dangling = self._lengths.count - self._last_boundary
            self.abort()
            raise DataError(
                f"{self.path_prefix}: {dangling} sequence(s) added after the last "
                "end_document(); call end_document() before finalize (megatron-core would "
                "write an index its own reader rejects)"
            )
        if idx_path is not None and os.path.abspath(idx_path) != os.path.abspath(final_idx):
            raise DataError(f"finalize: idx_path {idx_path} is not this writer's {final_idx}")
        idx_temp = None
        try:
            self._bin.close()
            name = os.path.basename(self.path_prefix)
            handle, idx_temp = temp_files.create_file(self._directory, f"{name}.idx")
            with os.fdopen(handle, "wb") as idx:
                self._write_idx(idx)
            os.replace(self._bin_temp, bin_path_of(self.path_prefix))
            os.replace(idx_temp, final_idx)
        except BaseException:
            self.abort()
            if idx_temp is not None:
                _remove_quietly(idx_temp)
            raise
        finally:
            self._discard_spills()
        self._closed = True

    def _write_idx(self, idx) -> None:
        count = self._lengths.count
        idx.write(idx_layout.pack_header(self._dtype_code, count, self._documents.count))
        for chunk in self._lengths.chunks():
            idx.write(chunk.tobytes())
        itemsize = self.dtype.itemsize
        position = 0
        for chunk in self._lengths.chunks():
            ends = np.cumsum(chunk.astype(np.int64) * itemsize) + position
            pointers = np.empty_like(ends)
            pointers[0] = position
            pointers[1:] = ends[:-1]
            idx.write(pointers.tobytes())
            position = int(ends[-1])
        for chunk in self._documents.chunks():
            idx.write(chunk.tobytes())
        if self._modes is not None:
            for chunk in self._modes.chunks():
                idx.write(chunk.tobytes())
        idx.flush()
        os.fsync(idx.fileno())

    def _discard_spills(self) -> None:
        for spill in (self._lengths, self._documents, self._modes):
            if spill is not None:
                spill.discard()

    def abort(self) -> None:
        """Remove every temporary file; nothing appears under the final names."""
        if self._closed:
            return
        self._closed = True
        self._bin.close()
        _remove_quietly(self._bin_temp)
        self._discard_spills()

    def __enter__(self) -> IndexedDatasetWriter:
        return self

    def __exit__(self, exc_type, exc, traceback) -> None:
        if exc_type is None:
            if not self._closed:
                self.finalize()
        else:
            self.abort()

    def __del__(self) -> None:
        try:
            self.abort()
        except Exception:
            pass


def _copy_bytes(source, target, count: int) -> None:
    """Copy ``count`` bytes from one open binary file to another."""
    remaining = count
    try:
        while remaining > 0:
            sent = os.copy_file_range(source.fileno(), target.fileno(), remaining)
            if sent == 0:
                break
            remaining -= sent
    except (AttributeError, OSError):
        pass
    if remaining > 0:
        source.seek(count - remaining)
        target.seek(0, os.SEEK_END)
        while remaining > 0:
            block = source.read(min(remaining, 1 << 24))
            if not block:
                raise DataError(f"{source.name}: ended {remaining} bytes early while merging")
            target.write(block)
            remaining -= len(block)
    target.flush()


def _remove_quietly(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


def merge_datasets(
    part_prefixes,
    output_prefix: str,
    *,
    dtype=None,
    multimodal=None,
    progress: Callable[[int], object] | None = None,
) -> None:
    """Concatenate corpora into one, in order, with bounded memory.

    dtype and multimodal default to those of the first part. ``progress(1)`` is called
    after each part is copied (e.g. a progress bar's update).
    """
    part_prefixes = list(part_prefixes)
    if not part_prefixes:
        raise DataError("merge_datasets: no input prefixes")
    first = IndexedDataset(part_prefixes[0], multimodal=multimodal)
    dtype = first.dtype if dtype is None else dtype
    multimodal = first.multimodal if multimodal is None else multimodal
    first.close()
    with IndexedDatasetWriter(output_prefix, dtype, multimodal=multimodal) as writer:
        for prefix in part_prefixes:
            writer.add_index(prefix)
            if progress is not None:
                progress(1)
