"""Reader and writer behaviour beyond parity: edge cases, pickling, sources, chunking."""

from __future__ import annotations

import os
import pickle
import struct
import sys
import textwrap

import numpy as np
import pytest

import megadata_core as mdc
from megadata_core.format import idx_layout, sources
from megadata_core.format import writer as writer_module


def _write(prefix: str, documents: list[list[list[int]]], dtype=np.uint16) -> None:
    with mdc.IndexedDatasetWriter(prefix, dtype) as writer:
        for document in documents:
            tokens = [t for sequence in document for t in sequence]
            writer.add_document(np.array(tokens, dtype=np.int64), [len(s) for s in document])


def test_empty_corpus(tmp_path):
    prefix = str(tmp_path / "empty")
    _write(prefix, [])
    for mmap in (True, False):
        ds = mdc.IndexedDataset(prefix, mmap=mmap)
        assert len(ds) == 0 and ds.num_documents == 0
        assert ds[0:0] == []
    assert os.path.getsize(prefix + ".bin") == 0


def test_empty_documents_and_sequences(tmp_path):
    prefix = str(tmp_path / "c")
    _write(prefix, [[], [[1, 2], []], [], [[3]]])
    ds = mdc.IndexedDataset(prefix)
    assert ds.document_indices.tolist() == [0, 0, 2, 2, 3]
    assert [s.tolist() for s in ds[:]] == [[1, 2], [], [3]]
    assert ds[-1].tolist() == [3]


def test_pread_and_mmap_agree(tmp_path):
    rng = np.random.default_rng(0)
    prefix = str(tmp_path / "c")
    docs = [[rng.integers(0, 1000, rng.integers(0, 50)).tolist()] for _ in range(200)]
    _write(prefix, docs)
    mapped, pread = mdc.IndexedDataset(prefix), mdc.IndexedDataset(prefix, mmap=False)
    for index in range(len(mapped)):
        np.testing.assert_array_equal(mapped[index], pread[index])
        np.testing.assert_array_equal(mapped.get(index, 0, 0), pread.get(index, 0, 0))
    for got, want in zip(mapped[10:50], pread[10:50], strict=True):
        np.testing.assert_array_equal(got, want)


def test_file_url(tmp_path):
    prefix = str(tmp_path / "c")
    _write(prefix, [[[5, 6, 7]]])
    ds = mdc.IndexedDataset("file://" + prefix)
    assert ds[0].tolist() == [5, 6, 7]


def test_pickle_is_small_and_reopens(tmp_path):
    prefix = str(tmp_path / "c")
    _write(prefix, [[list(range(1000))] for _ in range(100)])
    for mmap in (True, False):
        ds = mdc.IndexedDataset(prefix, mmap=mmap)
        data = pickle.dumps(ds)
        assert len(data) < 1000  # handles and memmaps are dropped, not pickled by value
        clone = pickle.loads(data)
        np.testing.assert_array_equal(clone[7], ds[7])
        assert repr(clone) == repr(ds)


class _MemorySource:
    """An in-process byte source over a dict of objects: a real registry client."""

    objects: dict[str, bytes] = {}

    def __init__(self, path: str) -> None:
        self.path = path
        if path not in self.objects:
            raise mdc.DataError(f"{path}: no such object")

    def size(self) -> int:
        return len(self.objects[self.path])

    def read(self, offset: int, length: int) -> bytes:
        return self.objects[self.path][offset : offset + length]

    def close(self) -> None:
        pass


def test_registered_scheme_reads_through_the_source(tmp_path):
    prefix = str(tmp_path / "c")
    _write(prefix, [[[1, 2, 3], [4]], [[5]]])
    for suffix in (".bin", ".idx"):
        with open(prefix + suffix, "rb") as stream:
            _MemorySource.objects["mem://bucket/c" + suffix] = stream.read()
    mdc.register_scheme("mem", _MemorySource)
    ds = mdc.IndexedDataset("mem://bucket/c")
    assert [s.tolist() for s in ds[:]] == [[1, 2, 3], [4], [5]]
    assert ds.get(0, 1, 2).tolist() == [2, 3]
    assert isinstance(_MemorySource("mem://bucket/c.bin"), sources.ByteSource)


def test_entry_point_scheme_is_discovered(tmp_path, monkeypatch):
    """A package that declares a 'megadata.storage' entry point is found by scheme."""
    site = tmp_path / "site"
    (site / "fake_storage_pkg").mkdir(parents=True)
    (site / "fake_storage_pkg" / "__init__.py").write_text(
        textwrap.dedent("""
        from megadata_core.format.sources import LocalFileSource

        def open_source(url):
            return LocalFileSource(url.split("://", 1)[1])
    """)
    )
    dist = site / "fake_storage_pkg-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-storage-pkg\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        "[megadata.storage]\nfakefs = fake_storage_pkg:open_source\n"
    )
    monkeypatch.syspath_prepend(str(site))
    prefix = str(tmp_path / "c")
    _write(prefix, [[[9, 8]]])
    ds = mdc.IndexedDataset("fakefs://" + prefix)
    assert ds[0].tolist() == [9, 8]
    sys.modules.pop("fake_storage_pkg", None)


def test_validation_across_chunks(tmp_path, monkeypatch):
    monkeypatch.setattr(idx_layout, "VALIDATION_CHUNK", 7)
    prefix = str(tmp_path / "c")
    _write(prefix, [[[i] * (i % 5) for i in range(d, d + 3)] for d in range(30)])
    ds = mdc.IndexedDataset(prefix)
    assert len(ds) == 90
    count = len(ds)
    pointers_at = idx_layout.HEADER_SIZE + 4 * count
    with open(prefix + ".idx", "r+b") as stream:
        stream.seek(pointers_at + 8 * 50)
        stream.write(struct.pack("<q", int(ds.sequence_pointers[50]) + 2))
    with pytest.raises(mdc.DataError, match=r"sequence_pointers\[50\]"):
        mdc.IndexedDataset(prefix)


def test_writer_spills_and_streams_in_small_chunks(tmp_path, monkeypatch):
    """Spilling and chunked finalize give the same bytes as one big buffer."""
    rng = np.random.default_rng(1)
    docs = [
        [rng.integers(0, 60000, rng.integers(0, 9)).tolist() for _ in range(3)] for _ in range(300)
    ]
    _write(str(tmp_path / "big_chunks"), docs)
    monkeypatch.setattr(writer_module, "_SPILL_ITEMS", 5)
    monkeypatch.setattr(writer_module, "_COPY_CHUNK", 7)
    _write(str(tmp_path / "small_chunks"), docs)
    for prefix in ("small_chunks",):
        with mdc.IndexedDatasetWriter(str(tmp_path / "merged"), np.uint16) as writer:
            writer.add_index(str(tmp_path / prefix))
            writer.add_index(str(tmp_path / prefix))
    for suffix in (".bin", ".idx"):
        big = (tmp_path / ("big_chunks" + suffix)).read_bytes()
        assert (tmp_path / ("small_chunks" + suffix)).read_bytes() == big
    merged = mdc.IndexedDataset(str(tmp_path / "merged"))
    assert len(merged) == 2 * 900 and merged.num_documents == 600


def test_writer_rejects_use_after_finalize(tmp_path):
    writer = mdc.IndexedDatasetWriter(str(tmp_path / "c"), np.uint16)
    writer.add_document([1], [1])
    writer.finalize()
    with pytest.raises(mdc.DataError, match="already finalized"):
        writer.add_item([2])


def test_writer_accepts_torch_tensors_and_lists(tmp_path):
    import torch

    prefix = str(tmp_path / "c")
    with mdc.IndexedDatasetWriter(prefix, np.int32) as writer:
        writer.add_item(torch.tensor([1, 2, 3]))
        writer.add_item([4, 5])
        writer.end_document()
    assert [s.tolist() for s in mdc.IndexedDataset(prefix)[:]] == [[1, 2, 3], [4, 5]]


def test_writer_finalize_accepts_megatron_style_idx_path(tmp_path):
    prefix = str(tmp_path / "c")
    writer = mdc.IndexedDatasetWriter(prefix, np.uint16)
    writer.add_document([1], [1])
    writer.finalize(prefix + ".idx")
    assert mdc.IndexedDataset(prefix)[0].tolist() == [1]


@pytest.mark.parametrize("multimodal", [False, True])
def test_add_documents_equals_one_call_per_document(tmp_path, multimodal):
    rng = np.random.default_rng(4)
    counts = rng.integers(0, 4, size=200)
    lengths = rng.integers(0, 20, size=int(counts.sum()))
    tokens = rng.integers(0, 60000, size=int(lengths.sum())).astype(np.uint16)
    modes = rng.integers(-5, 5, size=lengths.size).astype(np.int8)
    with mdc.IndexedDatasetWriter(str(tmp_path / "bulk"), multimodal=multimodal) as writer:
        writer.add_documents(tokens, lengths, counts, modes if multimodal else None)
    sequence_ends = np.concatenate([[0], np.cumsum(lengths)])
    document_ends = np.concatenate([[0], np.cumsum(counts)])
    with mdc.IndexedDatasetWriter(str(tmp_path / "single"), multimodal=multimodal) as writer:
        for first, last in zip(document_ends[:-1], document_ends[1:]):
            writer.add_document(
                tokens[sequence_ends[first] : sequence_ends[last]],
                lengths[first:last],
                modes[first:last] if multimodal else None,
            )
    for suffix in (".bin", ".idx"):
        bulk = (tmp_path / ("bulk" + suffix)).read_bytes()
        assert bulk == (tmp_path / ("single" + suffix)).read_bytes()


def test_add_documents_rejects_inconsistent_counts(tmp_path):
    writer = mdc.IndexedDatasetWriter(str(tmp_path / "c"))
    with pytest.raises(mdc.DataError, match="sequence_lengths sum to 3 but tokens has 2"):
        writer.add_documents([1, 2], [1, 2])
    with pytest.raises(mdc.DataError, match="sequence_counts sum to 1 but there are 2"):
        writer.add_documents([1, 2], [1, 1], [1])
    with pytest.raises(mdc.DataError, match="non-negative"):
        writer.add_documents([1, 2], [3, -1])
    writer.abort()
    assert os.listdir(tmp_path) == []


def test_token_view(tmp_path):
    prefix = str(tmp_path / "c")
    _write(prefix, [[[1, 2], [3]], [[4, 5, 6]]])
    np.testing.assert_array_equal(mdc.IndexedDataset(prefix).token_view(), [1, 2, 3, 4, 5, 6])
    assert mdc.IndexedDataset(prefix, mmap=False).token_view() is None
    empty = str(tmp_path / "e")
    _write(empty, [[[]]])
    assert mdc.IndexedDataset(empty).token_view().size == 0
