"""``msc://`` through a storage client that offers only ``read(path=..., byte_range=...)``,
the one method Megatron's own MSC reader calls. Megatron-LM's ``test_bin_reader`` serves
its corpora through such a double (no ``get_posix_path``, no ``info``; the
``multistorageclient`` module itself faked when the package is missing), and the drop-in
failed on it with ``'StorageClient' object has no attribute 'get_posix_path'``. Here the
core and the drop-in read as from the local corpus, and a missing or short object is a
DataError naming the URL."""

from __future__ import annotations

import os
import shutil
import sys
import types

import numpy as np
import pytest

import megadata_core as mdc
from megadata_adapters.storage.msc_bins import MSCSource

PROFILE = "msc://default"  # what Megatron's double strips to find the local path


class _ReadOnlyClient:
    """Megatron's test double: a local file read by byte range, and nothing else."""

    def __init__(self) -> None:
        self.reads = 0

    def read(self, path, byte_range):
        self.reads += 1
        with open(path, "rb") as stream:
            stream.seek(byte_range.offset)
            return stream.read(byte_range.size)


@pytest.fixture
def client(monkeypatch, tmp_path) -> _ReadOnlyClient:
    """A fake ``multistorageclient`` (``types.Range`` and ``resolve_storage_client`` only)
    whose every URL resolves to a :class:`_ReadOnlyClient` and the URL's local path."""
    package = types.ModuleType("multistorageclient")
    package_types = types.ModuleType("multistorageclient.types")

    class Range:
        def __init__(self, offset: int, size: int) -> None:
            self.offset, self.size = offset, size

    package_types.Range = Range
    package.types = package_types
    double = _ReadOnlyClient()
    package.resolve_storage_client = lambda url: (double, url.removeprefix(PROFILE))
    monkeypatch.setitem(sys.modules, "multistorageclient", package)
    monkeypatch.setitem(sys.modules, "multistorageclient.types", package_types)
    monkeypatch.setenv("MEGADATA_MSC_CACHE", str(tmp_path / "msc_cache"))
    return double


def test_the_double_has_only_read(client):
    assert not hasattr(client, "get_posix_path") and not hasattr(client, "info")


def test_reads_equal_the_local_corpus(client, local_corpora):
    local = mdc.IndexedDataset(local_corpora["web"])
    for _ in range(2):  # the second open finds the .idx copy it made
        remote = mdc.IndexedDataset(PROFILE + local_corpora["web"], mmap=False)
        assert len(remote) == len(local) and remote.dtype == local.dtype
        np.testing.assert_array_equal(remote.sequence_lengths, local.sequence_lengths)
        np.testing.assert_array_equal(remote.document_indices, local.document_indices)
        for index in (0, 17, len(local) - 1):
            np.testing.assert_array_equal(remote[index], local[index])
        np.testing.assert_array_equal(remote.get(9, 3, 40), local.get(9, 3, 40))
    assert client.reads > 0


def test_sizes_come_from_single_byte_reads(client, local_corpora, tmp_path):
    empty = tmp_path / "empty.bin"
    empty.write_bytes(b"")
    for path in (local_corpora["web"] + ".bin", local_corpora["web"] + ".idx", str(empty)):
        source = MSCSource(PROFILE + path)
        size = os.path.getsize(path)
        assert source.size() == size
        assert source.check_size(size) == size
        assert source.check_size(0) == 0
        with pytest.raises(mdc.DataError, match=rf"{PROFILE + path}: .*shorter"):
            source.check_size(size + 1)
        with open(path, "rb") as stream:
            assert source.read(0, size) == stream.read()
        source.close()


def test_missing_and_short_objects_name_the_url(client, local_corpora, tmp_path):
    missing = PROFILE + str(tmp_path / "missing")
    with pytest.raises(mdc.DataError, match=rf"{missing}\.idx: not found"):
        mdc.IndexedDataset(missing, mmap=False)
    short = str(tmp_path / "short")
    shutil.copyfile(local_corpora["web"] + ".idx", short + ".idx")
    with open(local_corpora["web"] + ".bin", "rb") as stream:
        data = stream.read()
    with open(short + ".bin", "wb") as stream:
        stream.write(data[: len(data) // 2])
    with pytest.raises(mdc.DataError, match=rf"{PROFILE + short}\.bin: .*shorter"):
        mdc.IndexedDataset(PROFILE + short, mmap=False)


def test_the_megatron_drop_in_reads_through_it(client, local_corpora, tmp_path):
    """Megatron's test_bin_reader, in short: an msc:// IndexedDataset with an
    object_storage_config reads as the local one; the drop-in's object_storage_utils
    find and copy the objects."""
    pytest.importorskip("torch", reason="the Megatron drop-in serves torch tensors")
    from megadata_adapters.trainers.megatron_datasets import indexed_dataset
    from megadata_adapters.trainers.megatron_datasets import object_storage_utils as utils

    prefix = PROFILE + local_corpora["web"]
    config = indexed_dataset.ObjectStorageConfig(path_to_idx_cache=str(tmp_path / "idx"))
    remote = indexed_dataset.IndexedDataset(prefix, multimodal=False, mmap=False,
                                            object_storage_config=config)
    local = indexed_dataset.IndexedDataset(local_corpora["web"], multimodal=False, mmap=False)
    assert type(remote.bin_reader).__name__ == "_MultiStorageClientBinReader"
    assert len(remote) == len(local)
    for index in (0, 5, len(local) - 1):
        np.testing.assert_array_equal(remote[index], local[index])
    assert utils.dataset_exists(prefix, prefix + ".idx", prefix + ".bin")
    missing = PROFILE + str(tmp_path / "none")
    assert not utils.dataset_exists(missing, missing + ".idx", missing + ".bin")
    target = str(tmp_path / "copy" / "web.idx")
    utils.cache_index_file(prefix + ".idx", target)
    with open(target, "rb") as copy, open(local_corpora["web"] + ".idx", "rb") as original:
        assert copy.read() == original.read()
