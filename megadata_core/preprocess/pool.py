"""Tokenizing chunks in a process pool, yielding the results strictly in input order."""

from __future__ import annotations

import collections
import contextlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from megadata_core.preprocess import threads
from megadata_core.preprocess.block_encoding import tokenize_block
from megadata_core.preprocess.encoding import TokenizedChunk
from megadata_core.preprocess.processes import ProcessPool
from megadata_core.preprocess.reading import Chunk, TableRows
from megadata_core.preprocess.table_encoding import tokenize_table_rows
from megadata_core.preprocess.tokenizers import SentenceSplitter, Tokenizer


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
def tokenized_in_order(
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
