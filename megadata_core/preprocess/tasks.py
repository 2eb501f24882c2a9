"""Running one planned task: read its records, tokenize, write its shards, then its manifest.

:class:`TaskRunner` is picklable (it carries factories, not a tokenizer) and builds its
tokenizer once per process, so any engine can ship it to workers: the local engine
(:func:`local_engine`: a tokenizer with a native block encoder runs its ``workers`` as
threads of this process; any other, a process pool, where with fewer tasks than
processes each task's blocks are spread over them in order) or Ray
(``adapters/engines/ray_preprocess.py``). An engine is a callable
``engine(runner, tasks) -> iterator of manifests`` (any order; the driver puts them in
plan order).
"""

from __future__ import annotations

import collections
import contextlib
import functools
from collections.abc import Callable, Iterator, Sequence
from typing import Any, BinaryIO, cast

import numpy as np

from megadata_core.errors import DataError
from megadata_core.format import IndexedDatasetWriter
from megadata_core.preprocess import threads as block_threads
from megadata_core.preprocess.block_encoding import tokenize_block
from megadata_core.preprocess.conversations import (
    ConversationEncoder,
    output_dtype,
    tokenize_conversation_rows,
    tokenize_conversations,
)
from megadata_core.preprocess.encoding import (
    MAX_EXAMPLES,
    SentenceSplitter,
    TokenizedChunk,
    Tokenizer,
)
from megadata_core.preprocess.plan import Parts, TableReader, Task
from megadata_core.preprocess.processes import ProcessPool
from megadata_core.preprocess.reading import (
    lines_in,
    naming_read_errors,
    read_blocks,
    split_lines,
    strip_bom,
    take_lines,
)
from megadata_core.preprocess.remote import bound_reads, is_remote, remember_size
from megadata_core.preprocess.table_encoding import tokenize_rows
from megadata_core.preprocess.workdir import (
    file_records,
    manifest_path,
    remove_task_files,
    shard_files,
    shard_prefix,
    write_documents,
    write_json,
)

Engine = Callable[["TaskRunner", Sequence[Task]], Iterator[dict]]

CHUNK_LINES = 1 << 16
CHUNK_BYTES = 4 << 20
_MIN_BLOCK_BYTES = 1 << 20  # (smaller blocks cost more per byte than the threads give)


class TaskRunner:
    """Everything a worker needs to run tasks; ``runner(task) -> manifest`` (a dict);
    ``runner(task, threads=n)`` tokenizes a lines task's blocks on ``n`` threads of this
    process when the tokenizer has a native block encoder (which releases the GIL), as
    ``preprocess_jsonl`` does with one worker: the engine that runs tasks in its own
    process asks for the usable cores; pools of processes take one each.
    ``runner(task, pool=p)`` spreads the blocks (row groups) over the processes of ``p``,
    each holding this runner. ``parts``: Megatron's partitions (one shard per partition);
    ``on_part(task, part)``: called here after each block of a task run here. ``objects``:
    ``[url, size, generation]`` of the inputs by URL, as the driver found them (each
    process opening them then asks the store for no size)."""

    def __init__(
        self,
        directory: str,
        fingerprint: str,
        tokenizer_factory: Callable[[], Tokenizer],
        json_keys: Sequence[str],
        level: str,
        dtype: np.dtype,
        append_eod: bool,
        skip_bad_lines: bool,
        open_binary: Callable[[str], BinaryIO],
        table_reader: TableReader | None = None,
        splitter_factory: Callable[[], SentenceSplitter] | None = None,
        keep_empty: bool = False,
        objects: Sequence[Sequence] = (),
        parts: Parts | None = None,
        chunk_lines: int = CHUNK_LINES,
        chunk_bytes: int = CHUNK_BYTES,
    ) -> None:
        self.directory = directory
        self.parts = parts or Parts(1, [0], None)
        self.chunk_lines, self.chunk_bytes = chunk_lines, chunk_bytes
        self.digests = True  # (a run that never resumes verifies no manifest)
        self.on_part: Callable[[Task, TokenizedChunk], object] | None = None  # in this process
        self.objects = [list(identity) for identity in objects]
        self.keep_empty = bool(keep_empty)
        self.fingerprint = fingerprint
        self.tokenizer_factory = tokenizer_factory
        self.json_keys = tuple(json_keys)
        #: the corpora each task writes: one per key, and with a conversation encoder each
        #: key's roles beside it (:func:`~megadata_core.preprocess.encoding.output_keys`)
        self.outputs = self.json_keys
        self.level = level
        self.dtype = np.dtype(dtype)
        self.append_eod = bool(append_eod)
        self.skip_bad_lines = bool(skip_bad_lines)
        self.open_binary = open_binary
        self.table_reader = table_reader
        self.splitter_factory = splitter_factory
        # (tokenizer, splitter), built on first use in each process
        self._tools: tuple[Tokenizer, SentenceSplitter | None] | None = None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_tools": None, "on_part": None}

    def tools(self) -> tuple[Tokenizer, SentenceSplitter | None]:
        if self._tools is None:
            for url, size, generation in self.objects:  # sizes the driver found: no probes
                remember_size(url, size, generation)
            splitter = None if self.splitter_factory is None else self.splitter_factory()
            self._tools = (self.tokenizer_factory(), splitter)
        return self._tools

    def native_blocks(self) -> bool:
        """Whether this runner's blocks go to a native block encoder (it releases the GIL:
        threads of one process run them side by side); builds the tokenizer here."""
        if self.splitter_factory is not None:
            return False
        return getattr(self.tools()[0], "block_encoder", None) is not None

    def __call__(self, task: Task, threads: int = 1, pool: ProcessPool | None = None) -> dict:
        """Write the task's shards (one per partition and key) and manifest; returns the
        manifest. ``pool``: processes holding this runner that tokenize its blocks."""
        remove_task_files(self.directory, task)  # a killed attempt's partial shards
        documents = nbytes = blank = 0
        tokens_per_key = dict.fromkeys(self.outputs, 0)
        bad: collections.Counter[str] = collections.Counter()
        examples: list[str] = []
        names = [None] if self.parts.count == 1 else range(self.parts.count)
        with contextlib.ExitStack() as stack:  # aborts the open writers on error
            writers = [{
                key: stack.enter_context(IndexedDatasetWriter(
                    shard_prefix(self.directory, task, key, self.level, name),
                    output_dtype(key, self.dtype)))
                for key in self.outputs} for name in names]
            parts = (self._table_parts(task, threads, pool) if task.kind == "rows"
                     else self._line_parts(task, threads, pool))
            for first, part in parts:
                where = self.parts.of(task, first, part.line_offsets)
                for k in range(len(writers)) if where is None else np.unique(where):
                    mask = None if where is None else where == k
                    for key, writer in writers[k].items():
                        write_documents(writer, part.tokens[key], part.sequence_lengths[key],
                                        part.document_sequences[key], mask)
                for key in self.outputs:
                    tokens_per_key[key] += int(part.tokens[key].size)
                documents += part.documents
                nbytes += part.nbytes
                blank += part.blank_lines
                bad.update(part.bad_lines)
                examples.extend(part.bad_examples[: MAX_EXAMPLES - len(examples)])
                if self.on_part is not None:
                    self.on_part(task, part)
            for shard in writers:
                for writer in shard.values():
                    writer.finalize()
        files = shard_files(self.directory, task, self.outputs, self.level, self.parts.count)
        manifest = {
            "fingerprint": self.fingerprint,
            "index": task.index,  # an input named twice has two tasks of equal as_list()
            "task": task.as_list(),
            "documents": documents,
            "tokens": tokens_per_key,
            "bytes": nbytes,
            "blank_lines": blank,
            "bad_lines": dict(bad),
            "bad_examples": examples,
            "files": file_records(files, self.digests),
        }
        write_json(manifest_path(self.directory, task), manifest)
        return manifest

    def part(self, task: Task, item, offset: int | None = None):
        """One row group of a rows task, tokenized; or one block of a lines task:
        (offset, its part with lines numbered from ``offset``), or, when the offset is
        unknown (None: numbered from the task's first line), (None, the DataError that
        raised)."""
        tokenizer, splitter = self.tools()
        options: dict[str, Any] = dict(
            append_eod=self.append_eod, dtype=self.dtype, splitter=splitter,
            skip_bad_lines=self.skip_bad_lines, keep_empty=self.keep_empty)
        if task.kind == "rows":
            if self.table_reader is None:
                raise DataError(f"{task.path}: parquet input needs a table reader")
            if self.outputs != self.json_keys:  # a conversation encoder: tokens and roles
                values = self.table_reader.read_values(task.path, item, self.json_keys[0])
                tools = (self.table_reader.read_values(task.path, item, "tools")
                         if "tools" in self.table_reader.column_names(task.path) else None)
                return tokenize_conversation_rows(
                    values, cast(ConversationEncoder, tokenizer), self.json_keys, tools=tools,
                    where=f"{task.path} (row group {item})", append_eod=self.append_eod,
                    dtype=self.dtype, skip_bad_lines=self.skip_bad_lines)
            buffers, valid = self.table_reader.read_buffers(task.path, item, self.json_keys)
            return tokenize_rows(buffers, valid, tokenizer, self.json_keys,
                                 where=f"{task.path} (row group {item})", **options)
        first_line, data, _ = item
        try:
            if self.outputs != self.json_keys:  # a conversation encoder: tokens and roles
                return offset, tokenize_conversations(
                    split_lines(data), cast(ConversationEncoder, tokenizer), self.json_keys,
                    path=task.path,
                    first_line=first_line + (offset or 0), append_eod=self.append_eod,
                    dtype=self.dtype, skip_bad_lines=self.skip_bad_lines)
            return offset, tokenize_block(data, tokenizer, self.json_keys, path=task.path,
                                          first_line=first_line + (offset or 0), **options)
        except DataError as error:
            if offset is not None:
                raise
            return None, error

    def _line_parts(self, task: Task, threads: int = 1, pool: ProcessPool | None = None):
        """(first line within the task, 0-based; tokenized block) of a lines task, in
        order (on ``threads`` or ``pool``, see the class docstring). Messages name the
        file's own line numbers: a task that starts past byte 0 counts the lines before it
        only when a block of it has an error to report (a reread of the file up to the
        task, once)."""
        tokenizer, splitter = self.tools() if threads > 1 else (None, None)
        if splitter is not None or getattr(tokenizer, "block_encoder", None) is None:
            threads = 1
        before = 0 if task.start == 0 else None  # lines of the file before the task
        with contextlib.ExitStack() as stack:
            stack.enter_context(naming_read_errors(task.path))
            stream = stack.enter_context(self.open_binary(task.path))
            if task.start:
                stream.seek(task.start)
            if task.stop >= 0:
                bound_reads(stream, task.stop)
            block = _block_bytes(task, max(threads, pool.size if pool else 1), self.chunk_bytes)
            chunks = _line_chunks(stream, task, block, self.chunk_lines)
            for chunk, (offset, part) in _in_order(stack, self, task, chunks, before, threads,
                                                   pool):
                if offset is None and (isinstance(part, DataError) or part.bad_examples):
                    if before is None:
                        before = self._lines_before(task)
                    _, part = self.part(task, chunk, before)  # numbered from the file's start
                part.nbytes = chunk[2]
                yield chunk[0] - 1, part

    def lines(self, task: Task) -> int:
        """Lines (rows) of a task, blank ones counted: a read of it."""
        if task.kind == "rows" and self.table_reader is not None:
            return sum(self.table_reader.row_group_rows(task.path)[task.start : task.stop])
        with naming_read_errors(task.path), self.open_binary(task.path) as stream:
            if task.start:
                stream.seek(task.start)
            if task.stop >= 0:
                bound_reads(stream, task.stop)
            limit = task.stop - task.start if task.stop >= 0 else -1
            return sum(lines_in(block) for block in read_blocks(stream, 1 << 24, limit))

    def _lines_before(self, task: Task) -> int:
        """Newlines in bytes [0, task.start) of the task's (plain) file."""
        count = 0
        remaining = task.start
        with naming_read_errors(task.path), self.open_binary(task.path) as stream:
            while remaining > 0 and (block := stream.read(min(remaining, 1 << 24))):
                count += block.count(b"\n")
                remaining -= len(block)
        return count

    def _table_parts(self, task: Task, threads: int = 1, pool: ProcessPool | None = None):
        """(first row within the task, tokenized row group) of a rows task, in order (on
        ``threads`` when the tokenizer has a native block encoder, or on ``pool``)."""
        if threads > 1 and not self.native_blocks():
            threads = 1
        rows = None
        if self.parts.count > 1 and self.table_reader is not None:
            rows = np.cumsum([0, *self.table_reader.row_group_rows(task.path)])
        with contextlib.ExitStack() as stack:
            groups = range(task.start, task.stop)
            for group, part in _in_order(stack, self, task, groups, None, threads, pool):
                yield (0 if rows is None else int(rows[group] - rows[task.start])), part


def _in_order(stack, runner, task, items, offset, threads, pool):
    """(item, ``runner.part(task, item, offset)``) in order: on ``pool``'s processes (at
    most 4 per process in flight), on ``threads`` threads here, or one by one."""
    if pool is None and threads <= 1:
        return ((item, runner.part(task, item, offset)) for item in items)
    if pool is None:
        work = functools.partial(runner.part, task, offset=offset)
        return stack.enter_context(block_threads.in_order(items, work, threads))

    def windowed():
        pending: collections.deque = collections.deque()
        for number, item in enumerate(items):
            pool.send(number % pool.size, (task, item, offset))
            pending.append((item, number % pool.size))
            if len(pending) >= 4 * pool.size:
                done, worker = pending.popleft()
                yield done, pool.receive(worker)
        while pending:
            done, worker = pending.popleft()
            yield done, pool.receive(worker)

    return windowed()


def _block_bytes(task: Task, threads: int, most: int = CHUNK_BYTES) -> int:
    """Bytes per block of a lines task: ``most``, or less when the task's range is too
    short to give each of ``threads`` a block of that size (down to _MIN_BLOCK_BYTES)."""
    if threads <= 1 or task.stop < 0:
        return most
    share = -(-(task.stop - task.start) // threads)
    return min(most, max(min(_MIN_BLOCK_BYTES, most), share))


def _line_chunks(stream: BinaryIO, task: Task, block_bytes: int, chunk_lines: int):
    """(first line number within the task, block of whole lines, bytes) of the task's
    byte range, in blocks of about ``block_bytes`` and at most ``chunk_lines`` lines."""
    first = 1
    limit = task.stop - task.start if task.stop >= 0 else -1
    for data in read_blocks(stream, block_bytes, limit):
        nbytes = len(data)
        if first == 1 and task.start == 0:
            data = strip_bom(data)
        while data:
            piece, data, count = take_lines(data, chunk_lines)
            size = len(piece) if data else nbytes
            nbytes -= size
            yield first, piece, size
            first += count


_RUNNER: TaskRunner | None = None


def _init_pool(runner: TaskRunner) -> None:
    global _RUNNER
    _RUNNER = runner
    runner.on_part = None  # (a forked copy: the driver reports the parts)
    runner._tools = None  # (built in this process, as a spawned one does: not the driver's)


def _run_pooled(task: Task, *item):
    """A whole task (its manifest), or one block or row group of it (``TaskRunner.part``)."""
    if _RUNNER is None:
        raise RuntimeError("_run_pooled: the pool process was not initialized")
    return _RUNNER.part(task, *item) if item else _RUNNER(task)


def _unordered(pool: ProcessPool, tasks: Sequence[Task]) -> Iterator[dict]:
    """Each worker runs one task at a time and gets the next as it answers; manifests in
    the order they finish."""
    queue = iter(tasks)
    busy = []
    for worker in range(pool.size):
        task = next(queue, None)
        if task is None:
            break
        pool.send(worker, (task,))
        busy.append(worker)
    while busy:
        for worker in pool.ready(busy):
            manifest = pool.receive(worker)
            task = next(queue, None)
            if task is None:
                busy.remove(worker)
            else:
                pool.send(worker, (task,))
            yield manifest


def runner_pool(runner: TaskRunner, size: int, start_method: str | None = None) -> ProcessPool:
    """``size`` processes holding ``runner`` (for ``runner(task, pool=...)`` or whole
    tasks); a context manager, see :class:`~megadata_core.preprocess.processes.ProcessPool`."""
    return ProcessPool(size, _run_pooled, _init_pool, (runner,), start_method)


def native_threads(workers: int) -> int:
    """Block threads of one process for ``workers`` with a native block encoder: the
    usable cores (at most 4, :func:`~megadata_core.preprocess.threads.threads_for_native`)
    or ``workers`` if more. One worker already encodes on every usable core, so more
    workers on the same cores add no thread: 2 workers run as fast as 1, never slower."""
    return max(int(workers), block_threads.threads_for_native())


def local_engine(workers: int = 1, start_method: str | None = None) -> Engine:
    """Run tasks in this process, task after task, each one's blocks on threads
    (``workers == 1``, or a tokenizer with a native block encoder: ``native_threads
    (workers)`` threads, no process started, no block or ids sent through a pipe), or
    else in a pool of ``workers`` processes (``start_method`` default: the platform's;
    spawn for inputs by URL), each taking the next task as it finishes one
    (:class:`~megadata_core.preprocess.processes.ProcessPool`: an error or Ctrl-C stops
    them at once)."""
    if not isinstance(workers, int) or workers < 1:
        raise DataError(f"workers: {workers!r} must be an integer >= 1")

    def run(runner: TaskRunner, tasks: Sequence[Task]) -> Iterator[dict]:
        if not tasks:
            return
        if workers == 1 or runner.native_blocks():  # here: blocks on threads
            here = native_threads(workers)
            yield from (runner(task, threads=here) for task in tasks)
            return
        method = start_method
        if method is None and any(is_remote(task.path) for task in tasks):
            # The driver's TensorStore (planning read the objects) aborts in a forked child.
            method = "spawn"  # (not forkserver: its server keeps the environment it began with)
        with runner_pool(runner, workers, method) as pool:
            if len(tasks) < workers:  # task after task here, its blocks on every process
                yield from (runner(task, pool=pool) for task in tasks)
            else:
                yield from _unordered(pool, tasks)

    return run

