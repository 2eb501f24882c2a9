"""Tokenizing chunks in a process pool, yielding the results strictly in input order."""

from __future__ import annotations

import collections
import contextlib
import multiprocessing
from collections.abc import Callable, Iterable, Iterator, Sequence

import numpy as np

from megadata_core.preprocess import threads
from megadata_core.preprocess.block_encoding import tokenize_block
from megadata_core.preprocess.encoding import TokenizedChunk
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
        options = dict(append_eod=self.append_eod, dtype=self.dtype,
                       skip_bad_lines=self.skip_bad_lines, splitter=self.splitter,
                       keep_empty=self.keep_empty)
        if isinstance(data, TableRows):
            return tokenize_table_rows(self.table_reader, path, data, self.tokenizer,
                                       self.json_keys, **options)
        return tokenize_block(data, self.tokenizer, self.json_keys, path=path,
                              first_line=first_line, **options)

    def run(self, chunk: Chunk) -> TokenizedChunk:
        return self(chunk.path, chunk.first_line, chunk.data)


_WORKER: _ChunkWorker | BaseException | None = None


def _init_worker(tokenizer_factory: Callable[[], Tokenizer], *options) -> None:
    """Pool initializer; a failure is kept and raised by the first task (no respawn loop)."""
    global _WORKER
    try:
        _WORKER = _ChunkWorker(tokenizer_factory(), *options)
    except BaseException as error:  # noqa: BLE001 - reported through the first task
        _WORKER = error


def _run_worker(path: str, first_line: int, data: bytes | TableRows) -> TokenizedChunk:
    if isinstance(_WORKER, BaseException):
        raise _WORKER
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
    native block encoder, ``threads``); otherwise each pool process
    calls ``tokenizer_factory`` once. At most ``4 * workers`` chunks are in flight, so
    memory stays bounded however large the input (``Pool.imap`` would read the whole
    input ahead).
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
    context = multiprocessing.get_context(start_method)
    initargs = (tokenizer_factory, *options)
    with context.Pool(workers, initializer=_init_worker, initargs=initargs) as pool:
        yield _windowed(pool, chunks, 4 * workers)


def _windowed(pool, chunks: Iterable[Chunk], window: int):
    pending: collections.deque = collections.deque()
    for chunk in chunks:
        task = pool.apply_async(_run_worker, (chunk.path, chunk.first_line, chunk.data))
        chunk.data = b""  # the pool has its own copy; keep main-process memory small
        pending.append((chunk, task))
        if len(pending) >= window:
            done, task = pending.popleft()
            yield done, task.get()
    while pending:
        done, task = pending.popleft()
        yield done, task.get()

