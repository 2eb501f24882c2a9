"""Every rejected input is a DataError that names the file and the field."""

from __future__ import annotations

import os
import struct

import numpy as np
import pytest

import megadata_core as mdc
from megadata_core.format import idx_layout


@pytest.fixture()
def corpus(tmp_path):
    """A valid uint16 corpus of 4 sequences in 3 documents; returns its prefix."""
    prefix = str(tmp_path / "corpus")
    with mdc.IndexedDatasetWriter(prefix, np.uint16) as writer:
        writer.add_document([1, 2, 3, 4, 5], [2, 3])
        writer.add_document([6, 7], [2])
        writer.add_document([8], [1])
    return prefix


def _patch(path: str, offset: int, data: bytes) -> None:
    with open(path, "r+b") as stream:
        stream.seek(offset)
        stream.write(data)


def _truncate(path: str, size: int) -> None:
    with open(path, "r+b") as stream:
        stream.truncate(size)


COUNT, DOCS = 4, 4
LENGTHS_AT = idx_layout.HEADER_SIZE
POINTERS_AT = LENGTHS_AT + 4 * COUNT
DOCUMENTS_AT = POINTERS_AT + 8 * COUNT


def _open_error(prefix: str, **kwargs) -> str:
    with pytest.raises(mdc.DataError) as info:
        mdc.IndexedDataset(prefix, **kwargs)
    return str(info.value)


def test_valid_fixture_opens(corpus):
    ds = mdc.IndexedDataset(corpus)
    assert len(ds) == COUNT and ds.num_documents == DOCS - 1


def test_bad_magic(corpus):
    _patch(corpus + ".idx", 0, b"NOTANIDX\x00")
    message = _open_error(corpus)
    assert "corpus.idx" in message and "magic" in message


def test_unknown_version(corpus):
    _patch(corpus + ".idx", 9, struct.pack("<Q", 2))
    message = _open_error(corpus)
    assert "corpus.idx" in message and "version 2" in message


def test_unknown_dtype_code(corpus):
    _patch(corpus + ".idx", 17, bytes([9]))
    message = _open_error(corpus)
    assert "corpus.idx" in message and "dtype code 9" in message


def test_truncated_header(corpus):
    _truncate(corpus + ".idx", 20)
    message = _open_error(corpus)
    assert "corpus.idx" in message and "truncated header" in message


def test_truncated_arrays(corpus):
    _truncate(corpus + ".idx", DOCUMENTS_AT + 8)
    message = _open_error(corpus)
    assert "corpus.idx" in message and "truncated arrays" in message


def test_trailing_bytes_fit_no_layout(corpus):
    with open(corpus + ".idx", "ab") as stream:
        stream.write(b"\x00\x00\x00")
    message = _open_error(corpus)
    assert "corpus.idx" in message and "fit no layout" in message


def test_counts_do_not_fit_file_size(corpus):
    _patch(corpus + ".idx", 18, struct.pack("<QQ", 1 << 40, DOCS))
    message = _open_error(corpus)
    assert "corpus.idx" in message and "sequence count" in message


def test_zero_document_count(corpus):
    _patch(corpus + ".idx", 26, struct.pack("<Q", 0))
    message = _open_error(corpus)
    assert "corpus.idx" in message and "document count" in message


def test_explicit_multimodal_mismatch(corpus):
    message = _open_error(corpus, multimodal=True)
    assert "corpus.idx" in message and "multimodal=True" in message


def test_negative_length(corpus):
    _patch(corpus + ".idx", LENGTHS_AT + 4, struct.pack("<i", -3))
    message = _open_error(corpus)
    assert "corpus.idx" in message and "sequence_lengths[1]" in message and "-3" in message


def test_document_indices_not_starting_at_zero(corpus):
    _patch(corpus + ".idx", DOCUMENTS_AT, struct.pack("<q", 1))
    message = _open_error(corpus)
    assert "document_indices must start at 0" in message and "corpus.idx" in message


def test_document_indices_decreasing(corpus):
    _patch(corpus + ".idx", DOCUMENTS_AT + 16, struct.pack("<q", 1))
    message = _open_error(corpus)
    assert "non-decreasing" in message and "corpus.idx" in message


def test_document_indices_not_ending_at_count(corpus):
    _patch(corpus + ".idx", DOCUMENTS_AT + 24, struct.pack("<q", 3))
    message = _open_error(corpus)
    assert "must end at the sequence count 4" in message and "corpus.idx" in message


def test_pointer_misaligned(corpus):
    _patch(corpus + ".idx", POINTERS_AT + 8, struct.pack("<q", 3))
    message = _open_error(corpus)
    assert "sequence_pointers[1]" in message and "misaligned" in message


def test_pointer_overlapping(corpus):
    _patch(corpus + ".idx", POINTERS_AT + 16, struct.pack("<q", 2))
    message = _open_error(corpus)
    assert "sequence_pointers[2]" in message and "overlapping" in message


def test_pointer_past_end_of_bin(corpus):
    _patch(corpus + ".idx", POINTERS_AT + 24, struct.pack("<q", 4096))
    message = _open_error(corpus)
    assert "sequence_pointers[3]" in message and "past the end" in message


def test_pointer_gap(corpus):
    with open(corpus + ".bin", "ab") as stream:
        stream.write(b"\x00" * 64)
    _patch(corpus + ".idx", POINTERS_AT + 24, struct.pack("<q", 16))
    message = _open_error(corpus)
    assert "sequence_pointers[3]" in message and "gap" in message


def test_bin_shorter_than_index(corpus):
    _truncate(corpus + ".bin", 10)
    message = _open_error(corpus)
    assert "corpus.bin" in message and "shorter" in message


def test_missing_bin(corpus):
    os.remove(corpus + ".bin")
    message = _open_error(corpus)
    assert "corpus.bin" in message and "not found" in message


def test_missing_idx(corpus):
    os.remove(corpus + ".idx")
    message = _open_error(corpus)
    assert "corpus.idx" in message and "not found" in message


def test_empty_idx_file(corpus):
    _truncate(corpus + ".idx", 0)
    message = _open_error(corpus)
    assert "corpus.idx" in message and "empty file" in message


def test_unknown_url_scheme_names_the_extra(monkeypatch):
    from megadata_core.format import sources

    # As on an install without the tensorstore extra: no provider for s3:// (and no
    # request ever leaves the machine).
    monkeypatch.setattr(sources, "_registry", {})
    monkeypatch.setattr(sources.metadata, "entry_points", lambda group: [])
    message = _open_error("s3://bucket/corpus")
    assert "s3://" in message and "megadata-core[tensorstore]" in message
    message = _open_error("weird://bucket/corpus")
    assert "weird://" in message and "megadata.storage" in message


def test_add_index_dtype_mismatch(corpus, tmp_path):
    writer = mdc.IndexedDatasetWriter(str(tmp_path / "out"), np.int32)
    with pytest.raises(mdc.DataError, match=r"corpus\.idx.*dtype uint16.*int32"):
        writer.add_index(corpus)
    writer.abort()


def test_add_index_multimodal_mismatch(corpus, tmp_path):
    writer = mdc.IndexedDatasetWriter(str(tmp_path / "out"), np.uint16, multimodal=True)
    with pytest.raises(mdc.DataError, match="multimodal"):
        writer.add_index(corpus)
    writer.abort()


@pytest.mark.parametrize(
    ("tokens", "pattern"),
    [
        (np.array([1.5, 2.0]), "dtype float64"),
        (np.array(["a", "b"]), "dtype <U1"),
        (np.array([3, -1]), "negative token -1"),
        (np.array([70000]), "out of range 70000"),
    ],
)
def test_wrong_tokens_on_write(tmp_path, tokens, pattern):
    prefix = str(tmp_path / "out")
    with pytest.raises(mdc.DataError, match=pattern):
        with mdc.IndexedDatasetWriter(prefix, np.uint16) as writer:
            writer.add_item(tokens)
    assert os.listdir(tmp_path) == []


def test_unsupported_writer_dtype(tmp_path):
    with pytest.raises(mdc.DataError, match="uint32"):
        mdc.IndexedDatasetWriter(str(tmp_path / "out"), np.uint32)


def test_add_document_lengths_must_sum_to_tokens(tmp_path):
    prefix = str(tmp_path / "out")
    with pytest.raises(mdc.DataError, match="lengths sum to 4 but the document has 3 tokens"):
        with mdc.IndexedDatasetWriter(prefix, np.uint16) as writer:
            writer.add_document([1, 2, 3], [2, 2])
    assert os.listdir(tmp_path) == []


def test_add_document_negative_length(tmp_path):
    with pytest.raises(mdc.DataError, match="negative"):
        with mdc.IndexedDatasetWriter(str(tmp_path / "out"), np.uint16) as writer:
            writer.add_document([1, 2, 3], [4, -1])


def test_open_document_at_finalize_leaves_nothing(tmp_path):
    writer = mdc.IndexedDatasetWriter(str(tmp_path / "out"), np.uint16)
    writer.add_document([1, 2], [2])
    writer.add_item([3])
    with pytest.raises(mdc.DataError, match="after the last end_document"):
        writer.finalize()
    assert os.listdir(tmp_path) == []


def test_crash_leaves_no_files_under_final_name(tmp_path):
    prefix = str(tmp_path / "out")
    with pytest.raises(RuntimeError):
        with mdc.IndexedDatasetWriter(prefix, np.uint16) as writer:
            writer.add_document(np.arange(100), [100])
            raise RuntimeError("simulated crash")
    assert os.listdir(tmp_path) == []


def test_missing_output_directory(tmp_path):
    with pytest.raises(mdc.DataError, match="does not exist"):
        mdc.IndexedDatasetWriter(str(tmp_path / "nope" / "out"))


def test_get_out_of_sequence(corpus):
    ds = mdc.IndexedDataset(corpus)
    with pytest.raises(mdc.DataError, match="offset 5"):
        ds.get(0, offset=5)
    with pytest.raises(mdc.DataError, match="length 3"):
        ds.get(0, offset=1, length=3)
    with pytest.raises(IndexError):
        ds[4]
    with pytest.raises(mdc.DataError, match="contiguous"):
        ds[0:4:2]
