"""Random-access advice on the large read-only maps that index lookups read: the kernel
records it on the mapping (``rr`` in /proc/self/smaps VmFlags); the values read are the
same."""

from __future__ import annotations

import numpy as np
import pytest

import megadata_core as mdc
from megadata_core.format import page_advice


def random_read_flags(array: np.ndarray) -> set[bool]:
    """For each mapping of /proc/self/smaps under ``array``'s bytes: whether its VmFlags
    hold ``rr`` (MADV_RANDOM)."""
    lo, hi = array.ctypes.data, array.ctypes.data + array.nbytes
    found, inside = set(), False
    with open("/proc/self/smaps") as stream:
        for line in stream:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                start, end = (int(part, 16) for part in head.split("-"))
                inside = start < hi and end > lo
            elif head == "VmFlags:" and inside:
                found.add("rr" in line.split()[1:])
    return found


@pytest.fixture
def small_threshold(monkeypatch):
    monkeypatch.setattr(page_advice, "RANDOM_ABOVE", 1000)


def test_a_read_only_map_is_advised_and_reads_the_same(tmp_path, small_threshold):
    np.arange(100_000, dtype=np.int64).tofile(tmp_path / "a.bin")
    whole = np.memmap(tmp_path / "a.bin", dtype=np.int64, mode="r")
    part = np.asarray(whole)[40_000:90_000]
    assert random_read_flags(part) == {False}
    assert page_advice.advise_random(part, None, np.arange(10)) == 1
    assert random_read_flags(part) == {True}
    np.testing.assert_array_equal(part, np.arange(40_000, 90_000))


def test_small_writable_and_memory_arrays_are_left_alone(tmp_path, small_threshold):
    np.zeros(10_000, np.int32).tofile(tmp_path / "a.bin")
    writable = np.memmap(tmp_path / "a.bin", dtype=np.int32, mode="r+")
    small = np.memmap(tmp_path / "a.bin", dtype=np.int32, mode="r")[:100]
    assert page_advice.advise_random(writable, small, np.zeros(10_000)) == 0
    assert random_read_flags(writable) == {False}


@pytest.mark.parametrize("shuffle", ["megatron", "feistel"])
def test_a_dataset_advises_its_index_and_idx_maps(tmp_path, small_threshold, shuffle):
    prefix = str(tmp_path / "corpus")
    lengths = np.random.default_rng(1).integers(1, 60, 3000)
    with mdc.IndexedDatasetWriter(prefix, np.uint16) as writer:
        for length in lengths:
            writer.add_document(np.ones(length, np.uint16), [length])
    config = mdc.GPTDataConfig(random_seed=3, sequence_length=32, path_to_cache=str(tmp_path),
                               eod_id=0, shuffle=shuffle)
    indexed = mdc.IndexedDataset(prefix)
    assert random_read_flags(indexed.sequence_lengths) == {False}
    dataset = mdc.GPTDataset(indexed, np.arange(3000), 20_000, config)
    advised = [indexed.sequence_lengths, indexed.sequence_pointers, dataset.sample_index]
    if shuffle == "megatron":
        advised += [dataset.document_index, dataset.shuffle_index]
    for array in advised:
        assert random_read_flags(array) == {True}
    # read in order only (past the page it shares with the end of the pointers)
    assert random_read_flags(indexed.document_indices[1024:]) == {False}
    again = mdc.GPTDataset(mdc.IndexedDataset(prefix), np.arange(3000), 20_000, config)
    np.testing.assert_array_equal(dataset[7]["tokens"], again[7]["tokens"])
