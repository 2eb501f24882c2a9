"""The task plan: input files cut into deterministic tasks, and the plan's fingerprint.

A task is a byte range of a plain ``.jsonl`` file ending on a line end (about
``task_size`` bytes; a line longer than that stays whole), a whole compressed file
(``.gz``, ``.zst``: no random access), or consecutive row groups of a ``.parquet``
file (about ``task_size`` bytes of them, at least one). Tasks are numbered in input
order, and the corpus is their documents in task order, that is the input order: the
plan is a pure function of the inputs and ``task_size``, never of an engine or a
worker count.

Inputs may be local files or URLs (``s3://``, ``gs://`` with the tensorstore extra;
``remote``): line cuts of a remote ``.jsonl`` are found with ranged reads.

The fingerprint hashes each input's identity — a local file's absolute path, size and
modification time in nanoseconds; an object's URL, size and generation (ETag / GCS
generation) — not its content (hashing a terabyte to plan it would cost a full read),
then the task boundaries and every flag that changes output bytes.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import BinaryIO, Protocol

import numpy as np

from megadata_core.errors import DataError
from megadata_core.preprocess.remote import is_remote, open_remote, remote_identity

_COMPRESSED_SUFFIXES = (".gz", ".zst")
_TABLE_SUFFIXES = (".parquet",)


class TableReader(Protocol):
    """What parquet input needs (``adapters/engines/parquet_records.py`` fills it with pyarrow)."""

    def row_group_sizes(self, path: str) -> list[int]:
        """Bytes (uncompressed) of each row group, in file order."""
        ...

    def read_columns(
        self, path: str, first_group: int, stop_group: int, columns: Sequence[str]
    ) -> tuple[list[list[str]], np.ndarray, int]:
        """Rows of groups [first, stop): (one list of str per column, holding the rows where
        no column is null; int64 positions of the rows dropped for a null; UTF-8 bytes of
        the texts). DataError naming ``path`` for a corrupt file or a missing column."""
        ...

    def row_group_rows(self, path: str) -> list[int]:
        """Rows of each row group, in file order."""
        ...

    def read_buffers(
        self, path: str, group: int, columns: Sequence[str]
    ) -> tuple[list[tuple[np.ndarray, np.ndarray]], np.ndarray]:
        """One row group's columns as they are stored: per column (uint8 UTF-8 data, int64
        offsets: row i is ``data[offsets[i]:offsets[i + 1]]``), and bool[rows], whether no
        column is null in the row. No Python object per row. DataError as read_columns."""
        ...

    def column_names(self, path: str) -> list[str]:
        """The names of the file's columns. DataError as read_columns."""
        ...

    def read_values(self, path: str, group: int, column: str) -> list:
        """One row group's ``column`` as Python values (lists and dicts for nested
        columns, None for nulls): a conversation per row. DataError as read_columns."""
        ...


@dataclass(frozen=True)
class Task:
    """One unit of work: ``kind`` "lines" (bytes [start, stop) of ``path``; stop -1 for a
    whole compressed file) or "rows" (row groups [start, stop) of a parquet ``path``)."""

    index: int
    path: str
    kind: str
    start: int
    stop: int

    @property
    def name(self) -> str:
        """Shard name stem in the work directory."""
        return f"task{self.index:06d}"

    def describe(self) -> str:
        if self.kind == "rows":
            return f"{self.path} (row groups {self.start}-{self.stop - 1})"
        if self.stop < 0:
            return self.path
        return f"{self.path} (bytes {self.start}-{self.stop})"

    def as_list(self) -> list:
        return [self.path, self.kind, self.start, self.stop]


@dataclass(frozen=True)
class Parts:
    """Megatron's ``--partitions`` K on the plan: each task's first line over all inputs
    (``first_lines[task.index]``, blank lines counted), and the partitions' first lines
    when sequential (``starts``; None: line i goes to partition i mod K)."""

    count: int
    first_lines: Sequence[int]
    starts: Sequence[int] | None

    def of(self, task: Task, first: int, offsets: np.ndarray) -> np.ndarray | None:
        """int64 partition of each document (``offsets``: lines past the task's ``first``),
        None when K is 1."""
        if self.count == 1:
            return None
        lines = self.first_lines[task.index] + first + offsets
        if self.starts is None:
            return lines % self.count
        return np.searchsorted(np.asarray(self.starts), lines, side="right") - 1


def plan_parts(
    tasks: Sequence[Task], count: int, sequential: bool, count_lines: Callable[[Task], int]
) -> Parts:
    """The :class:`Parts` of ``tasks`` (``count_lines(task)``: the lines of a task, a
    read of the inputs when K > 1)."""
    if count == 1:
        return Parts(1, [0] * len(tasks), None)
    first_lines = np.cumsum([0, *(count_lines(task) for task in tasks)]).tolist()
    size = -(-first_lines[-1] // count)
    starts = [min(k * size, first_lines[-1]) for k in range(count)] if sequential else None
    return Parts(count, first_lines[:-1], starts)


def is_table(path: str) -> bool:
    return path.endswith(_TABLE_SUFFIXES)


def _line_boundaries(path: str, size: int, task_size: int, stream: BinaryIO) -> list[int]:
    """Byte offsets [0, b1, ..., size] cutting a file at the first line end at or after
    each multiple of ``task_size`` (reads one line per cut, not the file)."""
    bounds = [0]
    cut = task_size
    while cut < size:
        stream.seek(cut - 1)
        stream.readline()  # to just past the line end at or after byte cut - 1
        bound = stream.tell()
        if bound >= size:
            break
        bounds.append(bound)
        cut = max(cut + task_size, bound + 1)
    bounds.append(size)
    return bounds


def plan_tasks(
    paths: Sequence[str],
    task_size: int,
    *,
    table_reader: TableReader | None = None,
    open_plain: Callable[[str], BinaryIO] | None = None,
    sizes: Sequence[int] | None = None,
) -> list[Task]:
    """The tasks of ``paths`` (local files or URLs), in input order; ``task_size`` in
    bytes; ``sizes`` (bytes of each input) when already known (``input_identities``)."""
    if not isinstance(task_size, int) or task_size < 1:
        raise DataError(f"task_size: {task_size!r} must be a positive number of bytes")
    tasks: list[Task] = []
    for number, path in enumerate(paths):
        if is_table(path):
            if table_reader is None:
                raise DataError(
                    f"{path}: parquet input needs a table reader "
                    "(pip install 'megadata-core[parquet]'"
                    "; megadata-preprocess passes "
                    "megadata_adapters.engines.parquet_records.ParquetReader)"
                )
            groups = table_reader.row_group_sizes(path)
            start = 0
            total = 0
            for group, nbytes in enumerate(groups):
                total += nbytes
                if total >= task_size or group == len(groups) - 1:
                    tasks.append(Task(len(tasks), path, "rows", start, group + 1))
                    start, total = group + 1, 0
            continue
        if path.endswith(_COMPRESSED_SUFFIXES):
            tasks.append(Task(len(tasks), path, "lines", 0, -1))
            continue
        size = sizes[number] if sizes is not None else input_identity(path)[1]
        opener = open_plain or _open_plain
        with opener(path) as stream:
            bounds = _line_boundaries(path, size, task_size, stream)
        for start, stop in zip(bounds[:-1], bounds[1:]):
            tasks.append(Task(len(tasks), path, "lines", start, stop))
    return tasks


def _open_plain(path: str) -> BinaryIO:
    if is_remote(path):
        return open_remote(path, buffer_size=1 << 18)  # a cut reads about one line
    return open(path, "rb")  # noqa: SIM115


def input_identity(path: str) -> list:
    """[absolute path, size, mtime in ns] of a local input; [url, size, generation] of
    an object."""
    if is_remote(path):
        return remote_identity(path)
    try:
        stat = os.stat(path)
    except FileNotFoundError:
        raise DataError(f"{path}: input file not found") from None
    return [os.path.abspath(path), stat.st_size, stat.st_mtime_ns]


def input_identities(paths: Sequence[str]) -> list[list]:
    """``input_identity`` of each path; objects are asked concurrently (a few requests each)."""
    if not any(is_remote(path) for path in paths):
        return [input_identity(path) for path in paths]
    with ThreadPoolExecutor(16) as pool:
        return list(pool.map(input_identity, paths))


def plan_command(
    paths: Sequence[str],
    tasks: Sequence[Task],
    options: Mapping[str, object],
    identities: Sequence[list] | None = None,
) -> dict:
    """Everything the output bytes depend on, as JSON-ready values."""
    return {
        "inputs": list(identities) if identities is not None else input_identities(paths),
        "tasks": [task.as_list() for task in tasks],
        **{name: _jsonable(value) for name, value in sorted(options.items())},
    }


def fingerprint(command: Mapping[str, object]) -> str:
    """sha256 (hex) of a plan command."""
    text = json.dumps(command, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def command_differences(old: Mapping[str, object], new: Mapping[str, object]) -> list[str]:
    """'name: old -> new' for each differing entry (task lists summarised)."""
    differences = []
    for name in sorted(set(old) | set(new)):
        before, after = old.get(name), new.get(name)
        if before == after:
            continue
        if name in ("inputs", "tasks") and isinstance(before, list) and isinstance(after, list):
            differences.append(f"{name}: {_list_change(before, after)}")
        else:
            differences.append(f"{name}: {before!r} there, {after!r} now")
    return differences


def _list_change(before: list, after: list) -> str:
    if len(before) != len(after):
        return f"{len(before)} there, {len(after)} now"
    for old, new in zip(before, after):
        if old != new:
            return f"{old!r} there, {new!r} now"
    return "differ"


def _jsonable(value):
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return repr(value)
