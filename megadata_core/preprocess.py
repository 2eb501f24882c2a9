"""JSON-lines text to Megatron ``.bin/.idx`` corpora (Megatron's ``tools/preprocess_data.py``).

Each non-blank input line is a JSON object; for every key in ``json_keys`` its
string value is tokenized into one document holding one sequence (plus the EOD
id when ``append_eod``), written to ``{output_prefix}_{key}_document.bin/.idx``.
As in Megatron's encoder, a text that tokenizes to nothing gives a document with
zero sequences (and no EOD).

Work is split into chunks of consecutive lines that a ``multiprocessing`` pool
tokenizes; results are written strictly in input order, so the output bytes do
not depend on the worker count, the chunk size or the number of partitions.
Only numpy and the standard library are used here; real tokenizers live in
``adapters/text_tokenizers.py`` and reach this module as zero-argument factories.
"""

from __future__ import annotations

import collections
import contextlib
import gzip
import json
import multiprocessing
import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import BinaryIO, Protocol, runtime_checkable

import numpy as np

from megadata_core.errors import DataError
from megadata_core.format import IndexedDatasetWriter, merge_datasets, optimal_dtype
from megadata_core.format.reader import bin_path_of, idx_path_of

__all__ = [
    "BadLineError",
    "ByteTokenizer",
    "PreprocessSummary",
    "TokenizedChunk",
    "Tokenizer",
    "count_lines",
    "document_prefix",
    "open_input",
    "parse_record",
    "preprocess_jsonl",
    "tokenize_chunk",
]

_MAX_EXAMPLES = 10  # bad-line messages kept in the summary
_BOM = b"\xef\xbb\xbf"


# -- tokenizers ------------------------------------------------------------------


@runtime_checkable
class Tokenizer(Protocol):
    """What preprocessing needs from a tokenizer."""

    eod_id: int
    vocab_size: int

    def encode(self, text: str) -> Sequence[int] | np.ndarray:
        """Token ids of ``text`` (1-D, integers in ``[0, vocab_size)``)."""
        ...


class ByteTokenizer:
    """UTF-8 bytes as tokens: ids 0..255 are bytes, 256 is EOD (vocab_size 257)."""

    vocab_size = 257
    eod_id = 256

    def encode(self, text: str) -> np.ndarray:
        """uint8[len(text.encode('utf-8'))]; UnicodeEncodeError on lone surrogates."""
        return np.frombuffer(text.encode("utf-8"), dtype=np.uint8)

    def decode(self, tokens: Sequence[int] | np.ndarray) -> str:
        """Text of byte tokens; ids >= 256 (EOD) are dropped, bad UTF-8 is replaced."""
        array = np.asarray(tokens).reshape(-1)
        return array[array < 256].astype(np.uint8).tobytes().decode("utf-8", "replace")

    def __repr__(self) -> str:
        return "ByteTokenizer()"


# -- parsing one line ---------------------------------------------------------------


class BadLineError(DataError):
    """A line that is not a usable record; ``kind`` says why.

    Kinds: ``invalid_utf8``, ``invalid_json``, ``not_object``, ``missing_key``,
    ``not_string``.
    """

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind

    def __reduce__(self):  # crosses process boundaries intact
        return (type(self), (str(self), self.kind))


_JSON_TYPE_NAMES = {
    dict: "an object",
    list: "an array",
    int: "a number",
    float: "a number",
    bool: "a boolean",
    type(None): "null",
}


def _where(path: str, line_number: int) -> str:
    return f"{path}, line {line_number}"


def parse_record(line: bytes, json_keys: Sequence[str], path: str, line_number: int) -> list[str]:
    """The string values of ``json_keys`` in one JSON-lines record.

    ``line`` is the raw line (bytes, strict UTF-8); ``line_number`` is 1-based and
    only used in messages. Raises BadLineError naming the file and line.
    """
    where = _where(path, line_number)
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as error:
        raise BadLineError(
            f"{where}: invalid UTF-8 at byte {error.start} ({error.reason})", "invalid_utf8"
        ) from None
    try:
        record = json.loads(text)
    except json.JSONDecodeError as error:
        raise BadLineError(
            f"{where}: invalid JSON: {error.msg} at column {error.colno}", "invalid_json"
        ) from None
    except RecursionError:
        raise BadLineError(f"{where}: invalid JSON: nested too deeply", "invalid_json") from None
    if not isinstance(record, dict):
        kind_name = _JSON_TYPE_NAMES.get(type(record), type(record).__name__)
        raise BadLineError(f"{where}: expected a JSON object, found {kind_name}", "not_object")
    values = []
    for key in json_keys:
        if key not in record:
            present = ", ".join(repr(k) for k in list(record)[:8])
            more = ", ..." if len(record) > 8 else ""
            raise BadLineError(
                f"{where}: missing key {key!r} (keys present: {present or 'none'}{more})",
                "missing_key",
            )
        value = record[key]
        if not isinstance(value, str):
            kind_name = _JSON_TYPE_NAMES.get(type(value), type(value).__name__)
            raise BadLineError(
                f"{where}: key {key!r} holds {kind_name}, not a string", "not_string"
            )
        values.append(value)
    return values


def _encode(tokenizer: Tokenizer, text: str, key: str, path: str, line_number: int) -> np.ndarray:
    """Token ids of one text as a 1-D integer array."""
    try:
        ids = tokenizer.encode(text)
    except UnicodeEncodeError as error:
        raise BadLineError(
            f"{_where(path, line_number)}: key {key!r} holds text that is not valid Unicode "
            f"({error.reason} at character {error.start})",
            "invalid_utf8",
        ) from None
    array = np.asarray(ids).reshape(-1)
    if array.size and array.dtype.kind not in "iu":
        raise DataError(
            f"{_where(path, line_number)}: tokenizer {tokenizer!r} returned {array.dtype} "
            "values, not integer ids"
        )
    return array


# -- tokenizing a chunk of lines --------------------------------------------------------


@dataclass
class TokenizedChunk:
    """Tokens of consecutive lines, per key.

    ``tokens[key]``: 1-D array of the output dtype, every document's tokens
    concatenated; ``lengths[key]``: int64[documents], tokens per document
    (EOD included; 0 means a document with zero sequences).
    """

    documents: int
    tokens: dict[str, np.ndarray]
    lengths: dict[str, np.ndarray]
    blank_lines: int = 0
    bad_lines: dict[str, int] = field(default_factory=dict)
    bad_examples: list[str] = field(default_factory=list)


def tokenize_chunk(
    lines: Sequence[bytes],
    tokenizer: Tokenizer,
    json_keys: Sequence[str],
    *,
    path: str = "<input>",
    first_line: int = 1,
    append_eod: bool = False,
    dtype: np.typing.DTypeLike = np.int32,
    skip_bad_lines: bool = False,
) -> TokenizedChunk:
    """Tokenize raw JSON-lines ``lines`` (line ``first_line + i`` of ``path``).

    Blank lines are skipped; a bad line raises BadLineError, or is counted by
    kind when ``skip_bad_lines``. Loops once per line, never per token.
    """
    pieces: dict[str, list[np.ndarray]] = {key: [] for key in json_keys}
    lengths: dict[str, list[int]] = {key: [] for key in json_keys}
    eod = np.array([tokenizer.eod_id], dtype=np.int64)
    documents = blank = 0
    bad: collections.Counter[str] = collections.Counter()
    examples: list[str] = []
    for offset, line in enumerate(lines):
        if not line.strip():
            blank += 1
            continue
        line_number = first_line + offset
        try:
            texts = parse_record(line, json_keys, path, line_number)
            encoded = [
                _encode(tokenizer, text, key, path, line_number)
                for key, text in zip(json_keys, texts)
            ]
        except BadLineError as error:
            if not skip_bad_lines:
                raise
            bad[error.kind] += 1
            if len(examples) < _MAX_EXAMPLES:
                examples.append(str(error))
            continue
        documents += 1
        for key, ids in zip(json_keys, encoded):
            if ids.size == 0:  # Megatron: no sentence, hence no EOD either
                lengths[key].append(0)
                continue
            pieces[key].append(ids)
            if append_eod:
                pieces[key].append(eod)
            lengths[key].append(ids.size + int(append_eod))
    last_line = first_line + len(lines) - 1
    tokens = {
        key: _as_token_dtype(pieces[key], np.dtype(dtype), path, first_line, last_line)
        for key in json_keys
    }
    return TokenizedChunk(
        documents=documents,
        tokens=tokens,
        lengths={key: np.asarray(lengths[key], dtype=np.int64) for key in json_keys},
        blank_lines=blank,
        bad_lines=dict(bad),
        bad_examples=examples,
    )


def _as_token_dtype(
    pieces: list[np.ndarray], dtype: np.dtype, path: str, first: int, last: int
) -> np.ndarray:
    """Concatenate id arrays into ``dtype``, checking the ids fit (one pass, vectorized)."""
    if not pieces:
        return np.empty(0, dtype=dtype)
    ids = np.concatenate(pieces)
    info = np.iinfo(dtype)
    low, high = int(ids.min()), int(ids.max())
    if low < 0 or high > info.max:
        bad = low if low < 0 else high
        raise DataError(
            f"{path}, lines {first}-{last}: the tokenizer produced id {bad}, outside "
            f"[0, {info.max}] of the output dtype {dtype} (is vocab_size right?)"
        )
    return ids.astype(dtype, copy=False)


# -- reading input ------------------------------------------------------------------------


def open_input(path: str) -> BinaryIO:
    """Open a ``.jsonl`` (plain) or ``.jsonl.gz`` file for binary line reading."""
    if str(path).endswith(".zst"):
        raise DataError(
            f"{path}: zstd input needs an open_binary that decompresses it "
            "(tools/preprocess_data.py passes one built on the zstandard package)"
        )
    try:
        if str(path).endswith(".gz"):
            return gzip.open(path, "rb")
        return open(path, "rb", buffering=1 << 20)
    except FileNotFoundError:
        raise DataError(f"{path}: input file not found") from None
    except IsADirectoryError:
        raise DataError(f"{path}: input path is a directory, not a file") from None


def count_lines(path: str, open_binary: Callable[[str], BinaryIO] = open_input) -> int:
    """Lines in a file as iterating it yields them (a last line without newline counts)."""
    count = 0
    last = b"\n"
    with _reading(path), open_binary(path) as stream:
        while block := stream.read(1 << 24):
            count += block.count(b"\n")
            last = block[-1:]
    return count + (last != b"\n")


@contextlib.contextmanager
def _reading(path: str) -> Iterator[None]:
    """Turn read failures (missing file, truncated gzip, ...) into DataError naming ``path``."""
    try:
        yield
    except DataError:
        raise
    except FileNotFoundError:
        raise DataError(f"{path}: input file not found") from None
    except (OSError, EOFError) as error:
        raise DataError(f"{path}: cannot read input: {error}") from error


@dataclass
class _Chunk:
    shard: int
    path: str
    first_line: int
    lines: list[bytes]
    nbytes: int


def _read_chunks(
    paths: Sequence[str],
    open_binary: Callable[[str], BinaryIO],
    shard_starts: Sequence[int],
    chunk_lines: int,
    chunk_bytes: int,
) -> Iterator[_Chunk]:
    """Consecutive lines of all inputs, in order; no chunk spans two files or two shards.

    ``shard_starts[k]`` is the global line index (over all files) where shard k begins.
    """
    line_index = 0
    shard = 0
    for path in paths:
        lines: list[bytes] = []
        nbytes = 0
        first_line = 1
        line_number = 0
        with _reading(path), open_binary(path) as stream:
            for line in stream:
                line_number += 1
                while shard + 1 < len(shard_starts) and line_index >= shard_starts[shard + 1]:
                    if lines:
                        yield _Chunk(shard, path, first_line, lines, nbytes)
                        lines, nbytes, first_line = [], 0, line_number
                    shard += 1
                line_index += 1
                nbytes += len(line)
                if line_number == 1 and line.startswith(_BOM):
                    line = line[len(_BOM) :]
                lines.append(line)
                if len(lines) >= chunk_lines or nbytes >= chunk_bytes:
                    yield _Chunk(shard, path, first_line, lines, nbytes)
                    lines, nbytes, first_line = [], 0, line_number + 1
        if lines:
            yield _Chunk(shard, path, first_line, lines, nbytes)


# -- running chunks through a pool, in order ------------------------------------------------


class _ChunkWorker:
    """Per-process state: the tokenizer, built once, and the fixed options."""

    def __init__(
        self,
        tokenizer: Tokenizer,
        json_keys: Sequence[str],
        append_eod: bool,
        dtype: np.dtype,
        skip_bad_lines: bool,
    ) -> None:
        self.tokenizer = tokenizer
        self.json_keys = tuple(json_keys)
        self.append_eod = append_eod
        self.dtype = dtype
        self.skip_bad_lines = skip_bad_lines

    def __call__(self, path: str, first_line: int, lines: list[bytes]) -> TokenizedChunk:
        return tokenize_chunk(
            lines,
            self.tokenizer,
            self.json_keys,
            path=path,
            first_line=first_line,
            append_eod=self.append_eod,
            dtype=self.dtype,
            skip_bad_lines=self.skip_bad_lines,
        )


_WORKER: _ChunkWorker | BaseException | None = None


def _init_worker(tokenizer_factory: Callable[[], Tokenizer], *options) -> None:
    """Pool initializer; a failure is kept and raised by the first task (no respawn loop)."""
    global _WORKER
    try:
        _WORKER = _ChunkWorker(tokenizer_factory(), *options)
    except BaseException as error:  # noqa: BLE001 - reported through the first task
        _WORKER = error


def _run_worker(path: str, first_line: int, lines: list[bytes]) -> TokenizedChunk:
    if isinstance(_WORKER, BaseException):
        raise _WORKER
    return _WORKER(path, first_line, lines)


@contextlib.contextmanager
def _tokenized_in_order(
    chunks: Iterable[_Chunk],
    tokenizer: Tokenizer,
    tokenizer_factory: Callable[[], Tokenizer],
    options: tuple,
    workers: int,
    start_method: str | None,
) -> Iterator[Iterator[tuple[_Chunk, TokenizedChunk]]]:
    """Yields (chunk, result) pairs in input order, tokenized by ``workers`` processes.

    ``workers == 1`` uses ``tokenizer`` in this process; otherwise each pool process
    calls ``tokenizer_factory`` once. At most ``4 * workers`` chunks are in flight, so
    memory stays bounded however large the input (``Pool.imap`` would read the whole
    input ahead).
    """
    if workers <= 1:
        worker = _ChunkWorker(tokenizer, *options)
        yield ((c, worker(c.path, c.first_line, c.lines)) for c in chunks)
        return
    context = multiprocessing.get_context(start_method)
    initargs = (tokenizer_factory, *options)
    with context.Pool(workers, initializer=_init_worker, initargs=initargs) as pool:
        yield _windowed(pool, chunks, 4 * workers)


def _windowed(pool, chunks: Iterable[_Chunk], window: int):
    pending: collections.deque = collections.deque()
    for chunk in chunks:
        task = pool.apply_async(_run_worker, (chunk.path, chunk.first_line, chunk.lines))
        chunk.lines = []  # the pool has its own copy; keep main-process memory small
        pending.append((chunk, task))
        if len(pending) >= window:
            done, task = pending.popleft()
            yield done, task.get()
    while pending:
        done, task = pending.popleft()
        yield done, task.get()


# -- the driver ---------------------------------------------------------------------------


@dataclass
class PreprocessSummary:
    """What ``preprocess_jsonl`` did."""

    documents: int
    tokens: int  # over all keys, EOD included
    tokens_per_key: dict[str, int]
    bad_lines: int
    bad_line_kinds: dict[str, int]
    bad_line_examples: list[str]
    blank_lines: int
    bytes: int  # raw input bytes read (decompressed)
    seconds: float
    output_prefixes: dict[str, str]  # key -> prefix of its .bin/.idx
    partition_prefixes: dict[str, list[str]]  # key -> kept shard prefixes (keep_partitions)

    @property
    def documents_per_second(self) -> float:
        return self.documents / self.seconds if self.seconds > 0 else 0.0

    @property
    def megabytes_per_second(self) -> float:
        return self.bytes / 1e6 / self.seconds if self.seconds > 0 else 0.0


def document_prefix(output_prefix: str, key: str) -> str:
    """Megatron's output naming: ``{output_prefix}_{key}_document``."""
    return f"{output_prefix}_{key}_document"


def _remove_pair(prefix: str) -> None:
    for path in (bin_path_of(prefix), idx_path_of(prefix)):
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)


def _validate(
    inputs: Sequence[str],
    output_prefix: str,
    json_keys: Sequence[str],
    workers: int,
    partitions: int,
    chunk_lines: int,
) -> tuple[list[str], list[str]]:
    if isinstance(inputs, (str, os.PathLike)):
        inputs = [inputs]
    paths = [os.fspath(path) for path in inputs]
    if not paths:
        raise DataError("inputs: no input files given")
    for path in paths:
        if "://" not in path and not os.path.isfile(path):
            what = "is a directory, not a file" if os.path.isdir(path) else "not found"
            raise DataError(f"{path}: input file {what}")
    if isinstance(json_keys, str):
        json_keys = [json_keys]
    keys = list(json_keys)
    if not keys:
        raise DataError("json_keys: no keys given")
    if len(set(keys)) != len(keys) or not all(isinstance(k, str) and k for k in keys):
        raise DataError(f"json_keys: {keys!r} must be distinct non-empty strings")
    for name, value in (("workers", workers), ("partitions", partitions)):
        if not isinstance(value, int) or value < 1:
            raise DataError(f"{name}: {value!r} must be an integer >= 1")
    if not isinstance(chunk_lines, int) or chunk_lines < 1:
        raise DataError(f"chunk_lines: {chunk_lines!r} must be an integer >= 1")
    directory = os.path.dirname(os.path.abspath(os.fspath(output_prefix)))
    if not os.path.isdir(directory):
        raise DataError(f"output_prefix: directory {directory} does not exist")
    return paths, keys


def preprocess_jsonl(
    inputs: Sequence[str],
    output_prefix: str,
    tokenizer_factory: Callable[[], Tokenizer],
    *,
    json_keys: Sequence[str] = ("text",),
    append_eod: bool = False,
    workers: int = 1,
    partitions: int = 1,
    keep_partitions: bool = False,
    skip_bad_lines: bool = False,
    open_binary: Callable[[str], BinaryIO] = open_input,
    progress: Callable[[int, int], None] | None = None,
    chunk_lines: int = 256,
    start_method: str | None = None,
) -> PreprocessSummary:
    """Tokenize JSON-lines files into ``{output_prefix}_{key}_document.bin/.idx``.

    ``tokenizer_factory`` is a picklable zero-argument callable returning a
    Tokenizer (e.g. ``ByteTokenizer`` or ``functools.partial(load_tokenizer, ...)``);
    each worker process calls it once. Tokens are stored as
    ``optimal_dtype(tokenizer.vocab_size)``. With ``partitions`` K > 1 the documents
    are cut into K contiguous shards by input line (one extra read of the inputs
    counts them), written as ``{output_prefix}_{k}_{key}_document`` and merged;
    the shards are removed unless ``keep_partitions``. ``progress(documents, bytes)``
    gets running totals after each chunk. On any error no output file is left.
    """
    paths, keys = _validate(inputs, output_prefix, json_keys, workers, partitions, chunk_lines)
    output_prefix = os.fspath(output_prefix)
    started = time.perf_counter()
    tokenizer = tokenizer_factory()
    if not isinstance(tokenizer, Tokenizer):
        raise DataError(
            f"tokenizer_factory: {tokenizer_factory!r} returned {tokenizer!r}, which lacks "
            "encode, eod_id or vocab_size"
        )
    dtype = np.dtype(optimal_dtype(int(tokenizer.vocab_size)))
    if append_eod and not 0 <= int(tokenizer.eod_id) <= np.iinfo(dtype).max:
        raise DataError(
            f"tokenizer {tokenizer!r}: eod_id {tokenizer.eod_id} does not fit the output dtype "
            f"{dtype} chosen for vocab_size {tokenizer.vocab_size}"
        )

    if partitions == 1:
        shard_starts = [0]
        shard_names = [output_prefix]
    else:
        total_lines = sum(count_lines(path, open_binary) for path in paths)
        shard_starts = [k * total_lines // partitions for k in range(partitions)]
        shard_names = [f"{output_prefix}_{k}" for k in range(partitions)]

    finals = {key: document_prefix(output_prefix, key) for key in keys}
    writers: dict[str, IndexedDatasetWriter] = {}
    created: list[str] = []  # prefixes this call finalized, removed again on failure
    documents = blank = total_bytes = 0
    tokens_per_key = dict.fromkeys(keys, 0)
    bad: collections.Counter[str] = collections.Counter()
    examples: list[str] = []

    def open_shard(shard: int) -> None:
        for key in keys:
            prefix = document_prefix(shard_names[shard], key)
            writers[key] = IndexedDatasetWriter(prefix, dtype)

    def close_shard() -> None:
        for key in keys:
            writer = writers.pop(key)
            writer.finalize()
            created.append(writer.path_prefix)

    options = (keys, bool(append_eod), dtype, bool(skip_bad_lines))
    chunks = _read_chunks(paths, open_binary, shard_starts, chunk_lines, chunk_bytes=1 << 22)
    try:
        current = 0
        open_shard(0)
        with _tokenized_in_order(
            chunks, tokenizer, tokenizer_factory, options, workers, start_method
        ) as results:
            for chunk, result in results:
                while current < chunk.shard:
                    close_shard()
                    current += 1
                    open_shard(current)
                for key in keys:
                    _write_documents(writers[key], result.tokens[key], result.lengths[key])
                    tokens_per_key[key] += int(result.tokens[key].size)
                documents += result.documents
                blank += result.blank_lines
                total_bytes += chunk.nbytes
                bad.update(result.bad_lines)
                examples.extend(result.bad_examples[: _MAX_EXAMPLES - len(examples)])
                if progress is not None:
                    progress(documents, total_bytes)
        close_shard()
        while current < partitions - 1:  # shards past the last line are empty
            current += 1
            open_shard(current)
            close_shard()
        kept: dict[str, list[str]] = {key: [] for key in keys}
        if partitions > 1:
            for key in keys:
                shards = [document_prefix(name, key) for name in shard_names]
                merge_datasets(shards, finals[key])
                created.append(finals[key])
                if keep_partitions:
                    kept[key] = shards
                else:
                    for shard in shards:
                        _remove_pair(shard)
    except BaseException:
        chunks.close()
        for writer in writers.values():
            writer.abort()
        for prefix in created:
            _remove_pair(prefix)
        raise
    return PreprocessSummary(
        documents=documents,
        tokens=sum(tokens_per_key.values()),
        tokens_per_key=tokens_per_key,
        bad_lines=sum(bad.values()),
        bad_line_kinds=dict(bad),
        bad_line_examples=examples,
        blank_lines=blank,
        bytes=total_bytes,
        seconds=time.perf_counter() - started,
        output_prefixes=finals,
        partition_prefixes=kept,
    )


def _write_documents(writer: IndexedDatasetWriter, tokens: np.ndarray, lengths: np.ndarray) -> None:
    """One single-sequence document per entry of ``lengths`` (0: zero sequences)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    nonempty = lengths > 0
    writer.add_documents(tokens, lengths[nonempty], nonempty.astype(np.int64))
