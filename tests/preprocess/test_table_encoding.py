"""Table inputs: the selection of a string column's rows that the native encoder takes
(the others go to the exact path), against slicing each row out by itself; the parquet
reader's memory pool."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from megadata_core import DataError
from megadata_core.preprocess.table_encoding import _select


@given(lengths=st.lists(st.integers(0, 9), max_size=30), before=st.integers(0, 5),
       after=st.integers(0, 5), data=st.data())
def test_select_keeps_exactly_the_chosen_rows(lengths, before, after, data):
    """A window of a column (bytes before and after it), any subset of its rows."""
    total = len(lengths)
    offsets = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)]) + before
    column = np.arange(int(offsets[-1]) + after, dtype=np.int64).astype(np.uint8)
    rows = np.flatnonzero(np.array(data.draw(st.lists(st.booleans(), min_size=total,
                                                     max_size=total)), bool))
    text, out = _select(column, offsets, rows, total)
    expected = [column[offsets[r] : offsets[r + 1]] for r in rows.tolist()]
    assert out.dtype == np.int64 and out.size == rows.size + 1
    assert [text[a:b].tolist() for a, b in zip(out[:-1], out[1:])] == [
        e.tolist() for e in expected]


def test_parquet_reader_memory_pool(tmp_path):
    """The pool named becomes pyarrow's default where the reader reads (and the columns
    are the same); a name pyarrow has not is refused."""
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    from megadata_adapters.engines.parquet_records import ParquetReader

    path = str(tmp_path / "t.parquet")
    pq.write_table(pa.table({"text": ["a", "bc", None, "déf"]}), path, row_group_size=3)
    before = pa.default_memory_pool()
    try:
        pa.set_memory_pool(pa.jemalloc_memory_pool() if before.backend_name == "system"
                           else pa.system_memory_pool())
        other = pa.default_memory_pool().backend_name
        plain = ParquetReader().read_buffers(path, 0, ["text"])
        assert pa.default_memory_pool().backend_name == other
        reader = pickle.loads(pickle.dumps(ParquetReader(memory_pool=before.backend_name)))
        pooled = reader.read_buffers(path, 0, ["text"])
        assert pa.default_memory_pool().backend_name == before.backend_name
        assert [(d.tobytes(), o.tolist()) for d, o in plain[0]] == [
            (d.tobytes(), o.tolist()) for d, o in pooled[0]]
        assert plain[1].tolist() == pooled[1].tolist() == [True, True, False]
    finally:
        pa.set_memory_pool(before)
    with pytest.raises(DataError, match="memory_pool: 'tcmalloc' is not one of"):
        ParquetReader(memory_pool="tcmalloc")
