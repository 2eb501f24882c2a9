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
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np

from megadata_core.errors import DataError
from megadata_core.format import IndexedDatasetWriter, merge_datasets, optimal_dtype
from megadata_core.format.reader import bin_path_of, idx_path_of
from megadata_core.preprocess.encoding import MAX_EXAMPLES
from megadata_core.preprocess.pool import tokenized_in_order
from megadata_core.preprocess.reading import count_lines, open_input, read_chunks
from megadata_core.preprocess.tokenizers import Tokenizer


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
    chunks = read_chunks(paths, open_binary, shard_starts, chunk_lines, chunk_bytes=1 << 22)
    try:
        current = 0
        open_shard(0)
        with tokenized_in_order(
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
                examples.extend(result.bad_examples[: MAX_EXAMPLES - len(examples)])
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
