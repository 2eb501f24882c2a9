"""IndexedDataset / IndexedDatasetBuilder of the compat layer against megatron-core's."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from compat_helpers import ours, theirs

import megadata_core as mdc


def _write(side, prefix: str, dtype, multimodal: bool = False) -> None:
    """The same builder calls on both sides, Megatron's test style included (digit strings)."""
    module = side("indexed_dataset")
    builder = module.IndexedDatasetBuilder(prefix + ".bin", dtype=dtype, multimodal=multimodal)
    builder.add_document(["5", "17", "3"], [3], modes=[1] if multimodal else None)
    builder.add_item(torch.tensor([9, 2], dtype=torch.int64), mode=2)
    builder.add_item(torch.tensor([4], dtype=torch.int64), mode=0)
    builder.end_document()
    builder.add_document(np.arange(7), [4, 3], modes=[0, 1] if multimodal else None)
    builder.finalize(prefix + ".idx")


@pytest.mark.parametrize("dtype", [np.uint16, np.int32, np.int64, np.uint8])
@pytest.mark.parametrize("multimodal", [False, True])
def test_builder_writes_the_same_bytes(tmp_path, dtype, multimodal):
    _write(theirs, str(tmp_path / "theirs"), dtype, multimodal)
    _write(ours, str(tmp_path / "ours"), dtype, multimodal)
    for suffix in (".bin", ".idx"):
        assert (tmp_path / f"theirs{suffix}").read_bytes() == (
            tmp_path / f"ours{suffix}"
        ).read_bytes()


def test_add_index_merges_as_megatron(tmp_path):
    for name in ("a", "b"):
        _write(theirs, str(tmp_path / name), np.uint16)
    for side, out in ((theirs, "merged_theirs"), (ours, "merged_ours")):
        builder = side("indexed_dataset").IndexedDatasetBuilder(str(tmp_path / f"{out}.bin"),
                                                               dtype=np.uint16)
        builder.add_index(str(tmp_path / "a"))
        builder.add_index(str(tmp_path / "b"))
        builder.finalize(str(tmp_path / f"{out}.idx"))
    for suffix in (".bin", ".idx"):
        assert (tmp_path / f"merged_theirs{suffix}").read_bytes() == (
            tmp_path / f"merged_ours{suffix}"
        ).read_bytes()


@pytest.mark.parametrize("mmap", [True, False])
def test_reads_and_attributes(tmp_path, mmap):
    prefix = str(tmp_path / "corpus")
    _write(theirs, prefix, np.int32)
    them = theirs("indexed_dataset").IndexedDataset(prefix, multimodal=False, mmap=mmap)
    module = ours("indexed_dataset")
    us = module.IndexedDataset(prefix, multimodal=False, mmap=mmap)
    assert type(us.bin_reader).__name__ == type(them.bin_reader).__name__
    assert isinstance(us.bin_reader, module._MMapBinReader if mmap else module._FileBinReader)
    assert len(us) == len(them) == len(us.index)
    for name in ("sequence_lengths", "document_indices"):
        assert np.array_equal(getattr(us, name), getattr(them, name))
    for name in ("sequence_count", "document_count", "dtype", "dtype_size"):
        assert getattr(us.index, name) == getattr(them.index, name), name
    assert np.array_equal(us.index.sequence_pointers, them.index.sequence_pointers)
    for i in range(len(us)):
        assert np.array_equal(us[i], them[i])
        assert us.index[i][:2] == them.index[i][:2]
        assert np.array_equal(us.get(i, offset=1), them.get(i, offset=1))
    for left, right in zip(us[1:4], them[1:4]):
        assert np.array_equal(left, right)
    pointer, length, _ = us.index[2]
    assert np.array_equal(
        us.bin_reader.read(np.int32, int(length), int(pointer)),
        them.bin_reader.read(np.int32, int(length), int(pointer)),
    )
    assert us.exists(prefix) and not us.exists(prefix + "_missing")


def test_multimodal_reads(tmp_path):
    prefix = str(tmp_path / "mm")
    _write(theirs, prefix, np.uint16, multimodal=True)
    them = theirs("indexed_dataset").IndexedDataset(prefix, multimodal=True)
    us = ours("indexed_dataset").IndexedDataset(prefix, multimodal=True)
    for i in range(len(us)):
        (left, mode_left), (right, mode_right) = us[i], them[i]
        assert np.array_equal(left, right) and mode_left == mode_right
    assert np.array_equal(us.sequence_modes, them.index.sequence_modes)


def test_dtype_helpers():
    module, reference = ours("indexed_dataset"), theirs("indexed_dataset")
    for cardinality in (None, 1, 65499, 65500, 10**6):
        assert module.DType.optimal_dtype(cardinality) == reference.DType.optimal_dtype(cardinality)
    for member in reference.DType:
        assert module.DType[member.name].value == member.value
        assert module.DType.size(member.value) == reference.DType.size(member.value)
        dtype = reference.DType.dtype_from_code(member.value)
        assert module.DType.code_from_dtype(dtype) == reference.DType.code_from_dtype(dtype)
    assert module.get_idx_path("a/b") == reference.get_idx_path("a/b")
    assert module.get_bin_path("a/b") == reference.get_bin_path("a/b")


def test_bad_corpus_is_a_data_error(tmp_path):
    prefix = str(tmp_path / "bad")
    _write(theirs, prefix, np.uint16)
    with open(prefix + ".idx", "r+b") as stream:
        stream.write(b"NOTMAGIC!")
    with pytest.raises(mdc.DataError, match="bad magic"):
        ours("indexed_dataset").IndexedDataset(prefix)
