"""JSON-lines text to Megatron ``.bin/.idx`` corpora (Megatron's ``tools/preprocess_data.py``).

Each non-blank input line is a JSON object; for every key in ``json_keys`` its
string value is tokenized into one document holding one sequence (plus the EOD
id when ``append_eod``), written to ``{output_prefix}_{key}_document.bin/.idx``;
with a sentence splitter, one sequence per sentence, written to
``{output_prefix}_{key}_sentence.bin/.idx``. As in Megatron's encoder, a text that
tokenizes to nothing gives a document with zero sequences (and no EOD).

Work is split into chunks of consecutive lines that a pool of worker processes
tokenizes (:func:`_tokenized_in_order`); results are written strictly in input order, so
the output bytes do not depend on the worker count, the chunk size or the number of
partitions.
Only numpy and the standard library are used here; real tokenizers live in
``adapters/tokenizing/text_tokenizers.py`` and reach this module as zero-argument factories.
"""

from __future__ import annotations

import collections
import contextlib
import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, BinaryIO

import numpy as np

from megadata_core.errors import DataError
from megadata_core.format import IndexedDatasetWriter, merge_datasets, optimal_dtype
from megadata_core.preprocess import threads
from megadata_core.preprocess.block_encoding import tokenize_block
from megadata_core.preprocess.encoding import (
    MAX_EXAMPLES,
    SentenceSplitter,
    TokenizedChunk,
    Tokenizer,
)
from megadata_core.preprocess.plan import TableReader, is_table, plan_tasks
from megadata_core.preprocess.processes import ProcessPool
from megadata_core.preprocess.reading import (
    Chunk,
    TableRows,
    count_lines,
    open_input,
    read_chunks,
)
from megadata_core.preprocess.table_encoding import tokenize_table_rows
from megadata_core.preprocess.workdir import staging_for, write_documents


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
    # key -> the data-args file listing the shards, when they were left unmerged (no
    # output_prefixes then)
    data_args_paths: dict[str, str] = field(default_factory=dict)

    @property
    def documents_per_second(self) -> float:
        return self.documents / self.seconds if self.seconds > 0 else 0.0

    @property
    def megabytes_per_second(self) -> float:
        return self.bytes / 1e6 / self.seconds if self.seconds > 0 else 0.0


def document_prefix(output_prefix: str, key: str, level: str = "document") -> str:
    """Megatron's output naming: ``{output_prefix}_{key}_{level}`` (document or sentence)."""
    return f"{output_prefix}_{key}_{level}"


def check_arguments(
    inputs: Sequence[str],
    output_prefix: str,
    json_keys: Sequence[str],
    workers: int,
    partitions: int,
    chunk_lines: int,
) -> tuple[list[str], list[str]]:
    """The input paths and JSON keys, checked with the other arguments of a run
    (DataError naming the argument)."""
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
    chunk_lines: int = 1 << 16,
    chunk_bytes: int = 4 << 20,
    start_method: str | None = None,
    splitter_factory: Callable[[], SentenceSplitter] | None = None,
    keep_sequential_samples: bool = False,
    merge_progress: Callable[[int], object] | None = None,
    keep_empty: bool = False,
    table_reader: TableReader | None = None,
) -> PreprocessSummary:
    """Tokenize JSON-lines files into ``{output_prefix}_{key}_document.bin/.idx``.

    ``tokenizer_factory`` is a picklable zero-argument callable returning a
    Tokenizer (e.g. ``ByteTokenizer`` or ``functools.partial(load_tokenizer, ...)``);
    each worker process calls it once. Tokens are stored as
    ``optimal_dtype(tokenizer.vocab_size)``. ``splitter_factory`` (picklable, called
    once per process) gives a SentenceSplitter: one sequence per sentence, outputs
    named ``..._sentence``.

    ``partitions`` K > 1 writes K shards and merges them in shard order, as
    Megatron's ``--partitions``: input line i (0-based over all inputs, blank lines
    counted) goes to shard i mod K, so the corpus holds lines 0, K, 2K, ..., then 1,
    K+1, ...; with ``keep_sequential_samples`` shard k holds lines
    [k*ceil(n/K), (k+1)*ceil(n/K)) (one extra read counts the n lines) and the corpus
    keeps the input order. ``keep_partitions`` keeps the shards as
    ``{output_prefix}_{k}_{key}_{level}``. ``progress(documents, bytes)`` gets running
    totals after each chunk; ``merge_progress(1)`` is called after each shard is merged
    (``partitions`` x keys calls in all). Lines are read in blocks of about
    ``chunk_bytes`` (at most ``chunk_lines`` lines), each tokenized by
    ``block_encoding.tokenize_block``: natively where the tokenizer has a block encoder and
    the lines are proven to read the same, else line by line. ``keep_empty`` writes what
    Megatron's ``preprocess_data_fast.py`` writes: a text that tokenizes to nothing is a
    document of one empty sequence, and every document gets the EOD.

    All work happens in a hidden directory beside the outputs (``outputs.Staging``);
    finished corpora get their final names only at the end, so on any error, or
    after a kill, nothing corpus-like is left (a killed run's directory is removed
    by the next run for the same ``output_prefix``). An output directory that cannot
    be written is a DataError before any tokenizing.
    """
    paths, keys = check_arguments(
        inputs, output_prefix, json_keys, workers, partitions, chunk_lines
    )
    output_prefix = os.fspath(output_prefix)
    started = time.perf_counter()
    level = "document" if splitter_factory is None else "sentence"
    finals = {key: document_prefix(output_prefix, key, level) for key in keys}
    shard_names = [f"{output_prefix}_{k}" for k in range(partitions)] if partitions > 1 else []
    shards = {key: [document_prefix(name, key, level) for name in shard_names] for key in keys}
    with staging_for(output_prefix, [*finals.values(), *sum(shards.values(), [])]) as staging:
        tokenizer = make_tokenizer(tokenizer_factory, append_eod)
        dtype = np.dtype(optimal_dtype(int(tokenizer.vocab_size)))
        if splitter_factory is not None:
            splitter_factory()  # a missing splitter fails here, before any work
        round_robin = partitions > 1 and not keep_sequential_samples
        tables = [path for path in paths if is_table(path)]
        if tables and table_reader is None:
            plan_tasks(tables[:1], 1)  # raises the DataError saying what parquet needs
        table_rows = table_reader.row_group_rows if table_reader is not None else None
        if partitions == 1:
            shard_starts = [0]
            shard_prefixes = [{key: staging.staged(finals[key]) for key in keys}]
        else:
            shard_starts = [0]
            if keep_sequential_samples:
                total_lines = sum(
                    sum(table_rows(path))
                    if is_table(path) and table_rows is not None  # else raised above
                    else count_lines(path, open_binary)
                    for path in paths)
                size = -(-total_lines // partitions)
                shard_starts = [min(k * size, total_lines) for k in range(partitions)]
            shard_prefixes = [
                {key: staging.staged(shards[key][k]) for key in keys} for k in range(partitions)
            ]
        counts = _Counts(keys)
        options = (keys, bool(append_eod), dtype, bool(skip_bad_lines), splitter_factory,
                   bool(keep_empty), table_reader)
        chunks = read_chunks(paths, open_binary, shard_starts, chunk_lines, chunk_bytes,
                             table_rows)
        with contextlib.closing(chunks), _tokenized_in_order(
            chunks, tokenizer, tokenizer_factory, options, workers, start_method
        ) as results:
            if round_robin:
                _write_round_robin(results, shard_prefixes, dtype, counts, progress)
            else:
                _write_shards(results, shard_prefixes, dtype, counts, progress)
        if partitions > 1:
            for key in keys:
                merge_datasets([staging.staged(shard) for shard in shards[key]],
                               staging.staged(finals[key]), progress=merge_progress)
        kept = shards if keep_partitions else {key: [] for key in keys}
        staging.publish([*finals.values(), *sum(kept.values(), [])])
    return PreprocessSummary(
        documents=counts.documents,
        tokens=sum(counts.tokens_per_key.values()),
        tokens_per_key=counts.tokens_per_key,
        bad_lines=sum(counts.bad.values()),
        bad_line_kinds=dict(counts.bad),
        bad_line_examples=counts.examples,
        blank_lines=counts.blank,
        bytes=counts.bytes,
        seconds=time.perf_counter() - started,
        output_prefixes=finals,
        partition_prefixes=kept,
    )


def make_tokenizer(tokenizer_factory: Callable[[], Tokenizer], append_eod: bool) -> Tokenizer:
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
    return tokenizer


class _Counts:
    """Running totals of a run."""

    def __init__(self, keys: Sequence[str]) -> None:
        self.documents = self.blank = self.bytes = 0
        self.tokens_per_key = dict.fromkeys(keys, 0)
        self.bad: collections.Counter[str] = collections.Counter()
        self.examples: list[str] = []

    def add(self, chunk: Chunk, result: TokenizedChunk) -> None:
        for key, tokens in result.tokens.items():
            self.tokens_per_key[key] += int(tokens.size)
        self.documents += result.documents
        self.blank += result.blank_lines
        self.bytes += chunk.nbytes or result.nbytes  # a table's rows: known once read
        self.bad.update(result.bad_lines)
        self.examples.extend(result.bad_examples[: MAX_EXAMPLES - len(self.examples)])


def _open_writers(
    stack: contextlib.ExitStack, prefixes: dict[str, str], dtype: np.dtype
) -> dict[str, IndexedDatasetWriter]:
    """One writer per key, each aborted by ``stack`` on error."""
    return {
        key: stack.enter_context(IndexedDatasetWriter(prefix, dtype))
        for key, prefix in prefixes.items()
    }


def _write_shards(
    results: Iterator[tuple[Chunk, TokenizedChunk]],
    shard_prefixes: Sequence[dict[str, str]],
    dtype: np.dtype,
    counts: _Counts,
    progress: Callable[[int, int], None] | None,
) -> None:
    """Write each shard's documents to its corpora (one per key), shard after shard."""
    current = 0
    with contextlib.ExitStack() as stack:  # aborts the open writers on error
        writers = _open_writers(stack, shard_prefixes[0], dtype)
        for chunk, result in results:
            while current < chunk.shard:
                for writer in writers.values():
                    writer.finalize()
                current += 1
                writers = _open_writers(stack, shard_prefixes[current], dtype)
            for key, writer in writers.items():
                write_documents(
                    writer,
                    result.tokens[key],
                    result.sequence_lengths[key],
                    result.document_sequences[key],
                )
            counts.add(chunk, result)
            if progress is not None:
                progress(counts.documents, counts.bytes)
        for writer in writers.values():
            writer.finalize()
        for prefixes in shard_prefixes[current + 1 :]:  # shards past the last line are empty
            for prefix in prefixes.values():
                IndexedDatasetWriter(prefix, dtype).finalize()


def _write_round_robin(
    results: Iterator[tuple[Chunk, TokenizedChunk]],
    shard_prefixes: Sequence[dict[str, str]],
    dtype: np.dtype,
    counts: _Counts,
    progress: Callable[[int, int], None] | None,
) -> None:
    """Write the document of input line i to shard i mod K (Megatron's partition files)."""
    shards = len(shard_prefixes)
    with contextlib.ExitStack() as stack:  # aborts the open writers on error
        writers = [_open_writers(stack, prefixes, dtype) for prefixes in shard_prefixes]
        for chunk, result in results:
            shard_of = (chunk.first_index + result.line_offsets) % shards
            for shard in np.unique(shard_of):
                mask = shard_of == shard
                for key, writer in writers[shard].items():
                    write_documents(
                        writer,
                        result.tokens[key],
                        result.sequence_lengths[key],
                        result.document_sequences[key],
                        mask,
                    )
            counts.add(chunk, result)
            if progress is not None:
                progress(counts.documents, counts.bytes)
        for shard_writers in writers:
            for writer in shard_writers.values():
                writer.finalize()


class _ChunkWorker:
    """Per-process state: the tokenizer, built once, and the fixed options."""

    def __init__(
        self,
        tokenizer: Tokenizer,
        json_keys: Sequence[str],
        append_eod: bool,
        dtype: np.dtype,
        skip_bad_lines: bool,
        splitter_factory: Callable[[], SentenceSplitter] | None = None,
        keep_empty: bool = False,
        table_reader=None,
    ) -> None:
        self.tokenizer = tokenizer
        self.table_reader = table_reader
        self.json_keys = tuple(json_keys)
        self.append_eod = append_eod
        self.dtype = dtype
        self.skip_bad_lines = skip_bad_lines
        self.splitter = None if splitter_factory is None else splitter_factory()
        self.keep_empty = keep_empty

    def __call__(self, path: str, first_line: int, data: bytes | TableRows) -> TokenizedChunk:
        options: dict[str, Any] = dict(
            append_eod=self.append_eod, dtype=self.dtype, skip_bad_lines=self.skip_bad_lines,
            splitter=self.splitter, keep_empty=self.keep_empty,
        )
        if isinstance(data, TableRows):
            return tokenize_table_rows(self.table_reader, path, data, self.tokenizer,
                                       self.json_keys, **options)
        return tokenize_block(data, self.tokenizer, self.json_keys, path=path,
                              first_line=first_line, **options)

    def run(self, chunk: Chunk) -> TokenizedChunk:
        return self(chunk.path, chunk.first_line, chunk.data)


_WORKER: _ChunkWorker | None = None


def _init_worker(tokenizer_factory: Callable[[], Tokenizer], *options) -> None:
    """Each pool process builds its tokenizer once."""
    global _WORKER
    _WORKER = _ChunkWorker(tokenizer_factory(), *options)


def _run_worker(path: str, first_line: int, data: bytes | TableRows) -> TokenizedChunk:
    if _WORKER is None:
        raise RuntimeError("_run_worker: the pool process was not initialized")
    return _WORKER(path, first_line, data)


@contextlib.contextmanager
def _tokenized_in_order(
    chunks: Iterable[Chunk],
    tokenizer: Tokenizer,
    tokenizer_factory: Callable[[], Tokenizer],
    options: tuple,
    workers: int,
    start_method: str | None,
) -> Iterator[Iterator[tuple[Chunk, TokenizedChunk]]]:
    """Yields (chunk, result) pairs in input order, tokenized by ``workers`` processes.

    ``workers == 1`` uses ``tokenizer`` in this process (in a few threads when it has a
    native block encoder, ``threads``); otherwise each pool process calls
    ``tokenizer_factory`` once. Chunk k goes to process k mod ``workers``; at most
    ``4 * workers`` chunks are in flight, so memory stays bounded however large the input.
    Leaving the block stops the processes at once on an error or Ctrl-C
    (:class:`~megadata_core.preprocess.processes.ProcessPool`).
    """
    if workers <= 1:
        worker = _ChunkWorker(tokenizer, *options)
        if worker.splitter is None and getattr(tokenizer, "block_encoder", None) is not None:
            # a native encoder releases the GIL: a few threads overlap the blocks' stages
            with threads.in_order(chunks, worker.run, threads.threads_for_native()) as results:
                yield results
            return
        yield ((c, worker.run(c)) for c in chunks)
        return
    initargs = (tokenizer_factory, *options)
    with ProcessPool(workers, _run_worker, _init_worker, initargs, start_method) as pool:
        yield _windowed(pool, chunks, 4 * workers)


def _windowed(pool: ProcessPool, chunks: Iterable[Chunk], window: int):
    pending: collections.deque = collections.deque()
    for number, chunk in enumerate(chunks):
        worker = number % pool.size
        pool.send(worker, (chunk.path, chunk.first_line, chunk.data))
        chunk.data = b""  # the worker has its own copy; keep this process's memory small
        pending.append((chunk, worker))
        if len(pending) >= window:
            done, worker = pending.popleft()
            yield done, pool.receive(worker)
    while pending:
        done, worker = pending.popleft()
        yield done, pool.receive(worker)
