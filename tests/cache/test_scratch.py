"""Shuffles of spilled (file-backed) indices: in anonymous memory when it fits, in the
file otherwise; the same values as megatron-core's either way."""

from __future__ import annotations

import mmap
import tracemalloc

import numpy as np
import pytest

from megadata_core.cache import spill as scratch
from megadata_core.cache.spill import spill_arrays
from megadata_core.indices import document_index, gpt_indices, shuffle_index
from megadata_core.indices.gpt import GPT_ARRAYS

FILES = {name: f"x-{name}.npy" for name in GPT_ARRAYS}
IDS = np.arange(7, 200_007, dtype=np.int64)  # an id array: filling it makes no temporary


def _peak_bytes(build) -> tuple[np.ndarray, int]:
    """``build()`` and the peak of numpy's allocations during it (tracemalloc)."""
    tracemalloc.start()
    try:
        result = build()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.fixture(params=["memory", "file"])
def where(request, monkeypatch):
    """Where a spilled array is shuffled: "file" forces the file-backed path."""
    if request.param == "file":
        monkeypatch.setattr(scratch, "SCRATCH_MARGIN", 1 << 62)
    return request.param


@pytest.mark.parametrize("separate", [False, True])
def test_a_spilled_document_index_is_shuffled_where_memory_allows(
    tmp_path, where, separate, megatron_gpt
):
    theirs = np.random.RandomState(8)
    expected = megatron_gpt._build_document_index(IDS, 3, theirs, separate)
    rng = np.random.RandomState(8)
    with spill_arrays(str(tmp_path), FILES, spill_above=0) as empty:
        spilled, peak = _peak_bytes(lambda: document_index(IDS, 3, rng, separate, empty=empty))
        assert isinstance(spilled, np.memmap)
        np.testing.assert_array_equal(spilled, expected)
    part = (2 if separate else 3) * IDS.size * 4  # the largest part shuffled at once
    if where == "memory":
        assert part <= peak < part + (1 << 20)  # one part at a time, then copied back
    else:
        assert peak < part // 8
    assert rng.randint(2**31) == theirs.randint(2**31)  # the stream goes on alike


@pytest.mark.parametrize(("first", "total"), [(300_000, 300_000), (250_000, 300_000)])
def test_a_spilled_shuffle_index_is_shuffled_where_memory_allows(
    tmp_path, where, first, total, megatron_gpt, monkeypatch
):
    monkeypatch.setattr("megadata_core.indices.arrays._ARANGE_BLOCK", 1000)  # small blocks
    expected = megatron_gpt._build_shuffle_index(first, total, np.random.RandomState(3))
    with spill_arrays(str(tmp_path), FILES, spill_above=0) as empty:
        rng = np.random.RandomState(3)
        spilled, peak = _peak_bytes(lambda: shuffle_index(first, total, rng, empty=empty))
        np.testing.assert_array_equal(spilled, expected)
        assert spilled.dtype == expected.dtype
    if where == "memory":
        assert peak >= first * 4
    else:
        assert peak < first


def test_spilled_gpt_indices_equal_the_in_memory_build(tmp_path, where):
    """The three indices through spill files equal the in-memory build (megatron-core's
    values: tests/indices/test_gpt_indices.py)."""
    lengths = np.random.default_rng(2).integers(1, 90, 50_000).astype(np.int32)
    with spill_arrays(str(tmp_path), FILES, spill_above=0) as empty:
        ours = gpt_indices(lengths, range(50_000), 64, 100_000, 21, empty=empty)
        theirs = gpt_indices(lengths, range(50_000), 64, 100_000, 21)
        for mine, reference in zip(ours, theirs):
            assert isinstance(mine, np.memmap)
            np.testing.assert_array_equal(mine, reference)


def test_memory_targets_and_targets_too_large_are_shuffled_in_place(tmp_path):
    in_memory = np.arange(10)
    with scratch.shuffle_scratch(in_memory, margin=0) as work:
        assert work is in_memory
    mapped = np.lib.format.open_memmap(str(tmp_path / "a.npy"), "w+", np.int32, (1000,))
    with scratch.shuffle_scratch(mapped[10:], margin=1 << 62) as work:
        assert work.base is mapped  # the file's own pages
    with scratch.shuffle_scratch(np.asarray(mapped)[10:], margin=0) as work:
        assert not scratch.file_backed(work)
        work[:] = np.arange(990)
    np.testing.assert_array_equal(mapped[10:], np.arange(990))


def test_nothing_is_copied_when_the_shuffle_raises(tmp_path):
    mapped = np.lib.format.open_memmap(str(tmp_path / "a.npy"), "w+", np.int32, (100,))
    with pytest.raises(KeyboardInterrupt), scratch.shuffle_scratch(mapped, margin=0) as work:
        work[:] = 5
        raise KeyboardInterrupt
    assert not mapped.any()


def test_file_backed_sees_through_views(tmp_path):
    mapped = np.lib.format.open_memmap(str(tmp_path / "a.npy"), "w+", np.int32, (100,))
    assert scratch.file_backed(np.asarray(mapped)[3:9].reshape(2, 3))
    with open(tmp_path / "a.npy", "r+b") as stream:
        raw = mmap.mmap(stream.fileno(), 0)
        assert scratch.file_backed(np.ndarray((400,), np.uint8, buffer=raw)[3:9])
        del raw
    assert not scratch.file_backed(np.arange(4)[1:])
    assert scratch.available_memory() > 0
