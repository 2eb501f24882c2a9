"""The block-wise index build: equal to the one-shot build for any block size, built into
spill files of the cache entry byte-identical to in-memory arrays written by the cache,
and exact at the int32 boundaries a billion-document corpus reaches."""

from __future__ import annotations

import glob
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from megadata_core import DataError
from megadata_core.cache import entries as cache
from megadata_core.cache import keys as hashing
from megadata_core.cache import npy_files as cache_files
from megadata_core.cache.spill import spill_arrays
from megadata_core.indices import document_index, gpt_indices
from megadata_core.indices.feistel import FeistelDocumentIndex, feistel_document_index
from megadata_core.indices.gpt import GPT_ARRAYS, feistel_gpt_indices
from megadata_core.indices.sample_boundaries import sample_index

SETTINGS = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def _reference_rows(lengths, documents, seq, extra, count) -> list[list[int]]:
    """Rows 1..count of the sample index from Python ints (the module docstring's rule)."""
    ends = np.cumsum(np.asarray(lengths, dtype=object)[np.asarray(documents)])
    rows = [[0, 0]]
    for j in range(1, count + 1):
        target = j * seq + extra
        i = next(k for k, end in enumerate(ends) if end >= target)
        rows.append([i, j * seq - (ends[i - 1] if i else 0)])
    return rows


@SETTINGS
@given(
    st.lists(st.integers(0, 40), min_size=1, max_size=300),
    st.integers(1, 3),
    st.integers(1, 50),
    st.integers(1, 400),
    st.integers(1, 3),
    st.booleans(),
    st.booleans(),
)
def test_any_block_size_gives_the_one_shot_rows(
    lengths, epochs, seq, block, threads, drop_last, extra
):
    lengths = np.array(lengths, np.int32)
    if lengths.sum() == 0:
        lengths[0] = 1
    tokens = int(lengths.sum())
    documents = feistel_document_index(np.arange(len(lengths)), epochs, 3)
    one_shot = sample_index(lengths, documents, seq, epochs, tokens, drop_last, extra)
    # the materialized order in blocks, and the order computed per block
    for source in (documents, FeistelDocumentIndex(range(len(lengths)), epochs, 3)):
        rows = sample_index(
            lengths, source, seq, epochs, tokens, drop_last, extra,
            num_threads=threads, block_size=block,
        )
        np.testing.assert_array_equal(rows, one_shot)
        assert rows.dtype == one_shot.dtype


@SETTINGS
@given(st.integers(1, 500), st.integers(1, 4), st.integers(0, 2**32 - 1), st.data())
def test_feistel_blocks_equal_the_materialized_order(count, epochs, seed, data):
    ids = data.draw(st.sampled_from(["range", "array"]))
    base = data.draw(st.integers(0, 1000))
    doc_ids = range(base, base + count) if ids == "range" else np.arange(count) * 3 + base
    whole = feistel_document_index(np.asarray(doc_ids), epochs, seed)
    lazy = FeistelDocumentIndex(doc_ids, epochs, seed)
    lo = data.draw(st.integers(0, len(whole)))
    hi = data.draw(st.integers(lo, len(whole)))
    block = lazy.block(lo, hi)
    assert block.dtype == np.int32
    np.testing.assert_array_equal(block, whole[lo:hi])


def test_a_feistel_block_outside_the_index_is_a_data_error():
    with pytest.raises(DataError, match=r"block: \[5, 11\)"):
        FeistelDocumentIndex(range(5), 2, 0).block(5, 11)


def _lengths(count: int = 4000) -> np.ndarray:
    return np.random.default_rng(4).integers(0, 70, count).astype(np.int32)


@pytest.mark.parametrize("shuffle", ["megatron", "feistel"])
def test_spilled_entries_are_the_files_the_cache_writes_from_memory(tmp_path, shuffle):
    lengths, ids = _lengths(), range(100, 3900)
    tokens = int(lengths[100:3900].sum())

    def build(empty) -> dict[str, np.ndarray]:
        if shuffle == "megatron":
            arrays = gpt_indices(lengths, ids, 16, 30_000, 5, empty=empty)
            return dict(zip(GPT_ARRAYS, arrays))
        return feistel_gpt_indices(lengths, ids, 16, 30_000, 5, tokens, empty=empty)

    description = {"kind": "test", "shuffle": shuffle}
    names = tuple(build(_in_memory))
    memory = str(tmp_path / "memory")
    spilled = str(tmp_path / "spilled")
    cache.load_or_build(memory, description, "train", lambda: build(_in_memory), names=names)
    key = hashing.description_key(description)
    files = {
        name: os.path.basename(path)
        for name, path in cache.entry_paths(spilled, key, "train", names).items()
        if name in names
    }
    with spill_arrays(spilled, files, spill_above=0) as empty:
        made = build(empty)
        assert all(isinstance(array, np.memmap) for array in made.values() if array.size > 2)
        arrays = cache.load_or_build(spilled, description, "train", lambda: made, names=names)
    for name in names:
        path = cache.entry_paths(spilled, key, "train", names)[name]
        with open(path, "rb") as ours, open(path.replace(spilled, memory), "rb") as theirs:
            assert ours.read() == theirs.read(), name
        assert arrays[name].filename == path
    records = [open(p).read() for d in (memory, spilled) for p in glob.glob(f"{d}/*desc*")]
    assert records[0] == records[1]  # sizes and CRCs recorded alike
    assert not glob.glob(os.path.join(spilled, ".*.tmp"))  # every temporary renamed


def _in_memory(name, shape, dtype):
    return np.empty(shape, dtype)


def test_a_failed_build_leaves_no_spill_file(tmp_path):
    with pytest.raises(DataError):
        files = {"document_index": "x-document_index.npy"}
        with spill_arrays(str(tmp_path), files, spill_above=0) as empty:
            document_index(range(10), 2, np.random.RandomState(0), False, empty=empty)
            assert glob.glob(str(tmp_path / ".x-document_index.npy.*.tmp"))
            raise DataError("the build failed")
    assert os.listdir(tmp_path) == []


def test_a_spilled_entry_is_checked_whole_once_then_by_identity(tmp_path, monkeypatch):
    """The second start reads no file whole (the verified record vouches for it); a
    truncated file is still found."""
    lengths, directory = _lengths(), str(tmp_path)
    description = {"kind": "test-verify"}
    key = hashing.description_key(description)
    paths = cache.entry_paths(directory, key, "train", GPT_ARRAYS)
    files = {name: os.path.basename(paths[name]) for name in GPT_ARRAYS}

    def build(empty):
        arrays = gpt_indices(lengths, range(4000), 8, None, 1, empty=empty)
        return dict(zip(GPT_ARRAYS, arrays))

    with spill_arrays(directory, files, spill_above=0) as empty:
        cache.load_or_build(directory, description, "train", lambda: build(empty), names=GPT_ARRAYS)
    for name in GPT_ARRAYS:  # built an hour ago (see cache_files.RACY_NS)
        then = os.stat(paths[name]).st_mtime_ns - 3600 * 10**9
        os.utime(paths[name], ns=(then, then))
    read_whole = []
    real = cache_files.stream_crc
    monkeypatch.setattr(cache_files, "stream_crc", lambda s: read_whole.append(1) or real(s))

    def start():
        cache_files._CHECKED.clear()  # as a new process
        return cache.load_or_build(directory, description, "train", lambda: 1 / 0, names=GPT_ARRAYS)

    start()
    assert len(read_whole) == 3  # the first start checks every file once
    start()
    assert len(read_whole) == 3  # the next one only compares identities
    os.truncate(paths["shuffle_index"], os.path.getsize(paths["shuffle_index"]) - 4)
    with pytest.raises(DataError, match="truncated"):
        cache.load_cached(directory, description, "train", GPT_ARRAYS, verify="full")


# -- int32 boundaries -------------------------------------------------------------------


def test_token_offsets_past_2_to_the_32_are_exact():
    """Cumulative tokens pass 2^31 and 2^32 (lengths near int32's max): the int64 sums
    give the exact rows; positions and offsets stay within int32 as Megatron's dtype."""
    big = 2**31 - 1
    lengths = np.array([big, 5, big, big, 3], np.int32)
    documents = np.array([0, 1, 2, 3, 4, 0], np.int32)
    tokens = int(lengths.astype(np.int64).sum()) + big
    seq = 2**29 + 7
    rows = sample_index(lengths, documents, seq, 1, tokens, True, True, block_size=2)
    assert rows.dtype == np.int32
    expected = _reference_rows(lengths, documents, seq, 1, len(rows) - 1)
    assert rows.tolist() == expected
    assert sum(lengths.astype(np.int64)[documents]) > 2**33


def test_document_ids_up_to_2_to_the_31_minus_1():
    """The largest int32 ids, Megatron's dtype for the document index; one more is a
    DataError, not a wrapped value."""
    top = range(2**31 - 6, 2**31)
    index = document_index(top, 2, np.random.RandomState(1), False)
    assert index.dtype == np.int32 and sorted(index.tolist()) == sorted(list(top) * 2)
    lazy = FeistelDocumentIndex(top, 3, 7)
    assert sorted(lazy.block(0, 18).tolist()) == sorted(list(top) * 3)
    with pytest.raises(DataError, match="2147483648"):
        document_index(range(2**31 - 1, 2**31 + 1), 1, np.random.RandomState(1), False)


def test_positions_past_2_to_the_32_in_a_feistel_document_index():
    """3 epochs of 2^31 - 1 documents: positions past 2^31 and 2^32 land in the right
    epoch; a block equals the entry-wise lookup (no int32 position anywhere)."""
    count = 2**31 - 1
    lazy = FeistelDocumentIndex(range(count), 3, 11)
    for lo in (2**31 - 3, 2**32 - 5, 3 * count - 4):
        block = lazy.block(lo, lo + 4)
        np.testing.assert_array_equal(block, lazy[np.arange(lo, lo + 4)])
        assert (block >= 0).all() and (block < count).all()


def test_arrays_up_to_the_spill_size_stay_in_memory(tmp_path):
    files = {"shuffle_index": "x-shuffle_index.npy"}
    with spill_arrays(str(tmp_path), files, spill_above=4000) as empty:
        small = empty("shuffle_index", (1000,), np.dtype(np.uint32))
        large = empty("shuffle_index", (1001,), np.dtype(np.uint32))
        assert not isinstance(small, np.memmap) and isinstance(large, np.memmap)
