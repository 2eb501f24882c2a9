"""Parquet input for preprocessing: row groups and string columns read with pyarrow.

``ParquetReader()`` fills ``megadata_core.preprocess.TableReader``; pass it as
``table_reader`` (tools/preprocess_data.py does for ``.parquet`` inputs). ``read_buffers``
hands the columns over as Arrow stores them (numpy views of the UTF-8 data and offsets,
for a native encoder); ``read_columns`` converts them to Python strings in one pyarrow
call per column (no Python loop per row);
rows where any wanted column is null are dropped and reported by position. A URL
(``s3://``, ``gs://``) is read through ``megadata_core.preprocess.remote``'s ranged file:
pyarrow fetches the footer and then only the column chunks of the row groups it reads.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from megadata_core.errors import DataError
from megadata_core.preprocess.remote import is_remote, open_remote


def _pyarrow():
    try:
        import pyarrow.compute
        import pyarrow.parquet
    except ImportError:
        raise DataError(
            "parquet input needs pyarrow: pip install 'megadata-core[parquet]' "
            "(or pip install pyarrow)"
        ) from None
    return pyarrow


POOLS = ("system", "jemalloc", "mimalloc")


class ParquetReader:
    """Picklable: opens the file on each call.

    ``memory_pool``: None keeps pyarrow's default memory pool; a name of ``POOLS`` makes it
    pyarrow's default in each process this reader reads in (pyarrow has one default pool
    per process, and ``read_row_groups`` takes no pool of its own). tools/preprocess_data.py
    asks for "system": with pyarrow 26's mimalloc, each row group's fresh buffers cost
    page zeroing in the kernel, as much as the encoding itself (docs/benchmarks.md).
    """

    def __init__(self, memory_pool: str | None = None) -> None:
        if memory_pool is not None and memory_pool not in POOLS:
            raise DataError(f"memory_pool: {memory_pool!r} is not one of {', '.join(POOLS)}")
        self.memory_pool = memory_pool
        self._names: dict[str, list[str]] = {}

    def _use_pool(self, pa) -> None:
        if self.memory_pool is None or pa.default_memory_pool().backend_name == self.memory_pool:
            return
        try:
            pool = getattr(pa, f"{self.memory_pool}_memory_pool")()
        except (NotImplementedError, pa.ArrowException) as error:  # a build without it
            raise DataError(f"memory_pool: {self.memory_pool!r} is not available in this "
                            f"pyarrow ({error})") from None
        pa.set_memory_pool(pool)

    def _open(self, path: str):
        pa = _pyarrow()
        self._use_pool(pa)
        try:
            if is_remote(path):
                return pa.parquet.ParquetFile(open_remote(path, buffer_size=None))
            return pa.parquet.ParquetFile(path)
        except FileNotFoundError:
            raise DataError(f"{path}: input file not found") from None
        except (pa.ArrowException, OSError) as error:
            raise DataError(f"{path}: not a readable parquet file ({error})") from None

    def row_group_sizes(self, path: str) -> list[int]:
        metadata = self._open(path).metadata
        return [metadata.row_group(i).total_byte_size for i in range(metadata.num_row_groups)]

    def row_group_rows(self, path: str) -> list[int]:
        metadata = self._open(path).metadata
        return [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)]

    def _read(self, path: str, first_group: int, stop_group: int, columns: Sequence[str],
              strings: bool = True):
        """(pyarrow, the table of the row groups' ``columns``), checked: strings only
        (unless ``strings`` is False)."""
        pa = _pyarrow()
        file = self._open(path)
        names = file.schema_arrow.names
        missing = [c for c in columns if c not in names]
        if missing:
            raise DataError(
                f"{path}: missing column(s) {missing} for json_keys (columns present: "
                f"{', '.join(names[:8])}{', ...' if len(names) > 8 else ''})"
            )
        try:
            table = file.read_row_groups(range(first_group, stop_group), columns=list(columns))
        except (pa.ArrowException, OSError) as error:
            raise DataError(
                f"{path}: cannot read row groups {first_group}-{stop_group - 1} ({error})"
            ) from None
        for name in columns if strings else ():
            column = table.column(name)
            if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
                raise DataError(f"{path}: column {name!r} holds {column.type}, not strings")
        return pa, table

    def read_buffers(
        self, path: str, group: int, columns: Sequence[str]
    ) -> tuple[list[tuple[np.ndarray, np.ndarray]], np.ndarray]:
        """The row group's columns as Arrow stores them (numpy views of its buffers where it
        can), and which rows have no null."""
        pa, table = self._read(path, group, group + 1, columns)
        valid = np.ones(table.num_rows, dtype=bool)
        buffers = []
        for name in columns:
            array = table.column(name).combine_chunks()
            valid &= array.is_valid().to_numpy(zero_copy_only=False)
            _, offsets, data = array.buffers()
            kind = np.int64 if pa.types.is_large_string(array.type) else np.int32
            offsets = np.frombuffer(offsets, kind)[array.offset : array.offset + len(array) + 1]
            data = np.frombuffer(data, np.uint8) if data is not None else np.zeros(0, np.uint8)
            buffers.append((data, offsets.astype(np.int64)))
        return buffers, valid

    def column_names(self, path: str) -> list[str]:
        if path not in self._names:  # asked once per row group: the footer is read once
            self._names[path] = list(self._open(path).schema_arrow.names)
        return self._names[path]

    def read_values(self, path: str, group: int, column: str) -> list:
        """The row group's ``column`` as Python values (a list of messages per row for a
        conversations column), None for nulls."""
        _, table = self._read(path, group, group + 1, [column], strings=False)
        return table.column(column).to_pylist()

    def read_columns(
        self, path: str, first_group: int, stop_group: int, columns: Sequence[str]
    ) -> tuple[list[list[str]], np.ndarray, int]:
        pa, table = self._read(path, first_group, stop_group, columns)
        valid = np.ones(table.num_rows, dtype=bool)
        nbytes = 0
        for name in columns:
            valid &= table.column(name).is_valid().to_numpy(zero_copy_only=False)
        if not valid.all():
            table = table.filter(pa.array(valid))
        texts = []
        for name in columns:
            column = table.column(name)
            nbytes += int(pa.compute.sum(pa.compute.binary_length(column)).as_py() or 0)
            texts.append(column.to_pylist())
        return texts, np.flatnonzero(~valid).astype(np.int64), nbytes

    def __repr__(self) -> str:
        pool = "" if self.memory_pool is None else f"memory_pool={self.memory_pool!r}"
        return f"ParquetReader({pool})"
