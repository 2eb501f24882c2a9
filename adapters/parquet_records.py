"""Parquet input for preprocessing: row groups and string columns read with pyarrow.

``ParquetReader()`` fills ``megadata_core.preprocess.TableReader``; pass it as
``table_reader`` (tools/preprocess_data.py does for ``.parquet`` inputs). Columns are
converted to Python strings by pyarrow in one call per column (no Python loop per row);
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
            "parquet input needs pyarrow: pip install 'megadata[parquet]' (or pip install pyarrow)"
        ) from None
    return pyarrow


class ParquetReader:
    """Stateless (picklable): opens the file on each call."""

    def _open(self, path: str):
        pa = _pyarrow()
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

    def read_columns(
        self, path: str, first_group: int, stop_group: int, columns: Sequence[str]
    ) -> tuple[list[list[str]], np.ndarray, int]:
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
        valid = np.ones(table.num_rows, dtype=bool)
        nbytes = 0
        for name in columns:
            column = table.column(name)
            if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
                raise DataError(f"{path}: column {name!r} holds {column.type}, not strings")
            valid &= column.is_valid().to_numpy(zero_copy_only=False)
        if not valid.all():
            table = table.filter(pa.array(valid))
        texts = []
        for name in columns:
            column = table.column(name)
            nbytes += int(pa.compute.sum(pa.compute.binary_length(column)).as_py() or 0)
            texts.append(column.to_pylist())
        return texts, np.flatnonzero(~valid).astype(np.int64), nbytes

    def __repr__(self) -> str:
        return "ParquetReader()"
