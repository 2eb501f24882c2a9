"""Byte-identical output to megatron-core's IndexedDatasetBuilder, and mutual readability."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import megadata_core as mdc
from megadata_core.format.idx_layout import DTYPE_BY_CODE

ALL_DTYPES = list(DTYPE_BY_CODE.values())


def _random_tokens(rng: np.random.Generator, dtype: np.dtype, count: int) -> np.ndarray:
    if dtype.kind == "f":
        return rng.standard_normal(count).astype(dtype)
    info = np.iinfo(dtype)
    high = min(int(info.max), 60000)
    low = max(int(info.min), -1000)
    return rng.integers(low, high, size=count, endpoint=True).astype(dtype)


def _random_ops(rng: np.random.Generator, dtype: np.dtype, multimodal: bool, count: int):
    """A random sequence of writer calls: ("item", tokens, mode) / ("end",) / ("doc", ...)."""
    ops = []
    for _ in range(count):
        kind = rng.choice(["item", "end", "doc"], p=[0.5, 0.15, 0.35])
        if kind == "item":
            ops.append(
                (
                    "item",
                    _random_tokens(rng, dtype, int(rng.integers(0, 40))),
                    int(rng.integers(-3, 4)),
                )
            )
        elif kind == "end":
            ops.append(("end",))
        else:
            lengths = rng.integers(0, 30, size=int(rng.integers(0, 5)))
            modes = rng.integers(-3, 4, size=len(lengths)) if multimodal else None
            ops.append(("doc", _random_tokens(rng, dtype, int(lengths.sum())), lengths, modes))
    ops.append(("end",))  # an index whose last document is open is unreadable, even by Megatron
    return ops


def _apply_ours(writer, ops):
    for op in ops:
        if op[0] == "item":
            writer.add_item(op[1], mode=op[2])
        elif op[0] == "end":
            writer.end_document()
        else:
            writer.add_document(op[1], op[2].tolist(), None if op[3] is None else op[3].tolist())


def _apply_megatron(builder, ops):
    for op in ops:
        if op[0] == "item":
            builder.add_item(torch.from_numpy(op[1].copy()), mode=op[2])
        elif op[0] == "end":
            builder.end_document()
        else:
            modes = None if op[3] is None else op[3].tolist()
            builder.add_document(torch.from_numpy(op[1].copy()), op[2].tolist(), modes)


def _files_equal(prefix_a: str, prefix_b: str) -> None:
    for suffix in (".bin", ".idx"):
        with open(prefix_a + suffix, "rb") as a, open(prefix_b + suffix, "rb") as b:
            assert a.read() == b.read(), f"{suffix} differs"


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("multimodal", [False, True])
def test_writer_byte_identical_to_megatron(tmp_path, megatron_indexed, dtype, multimodal):
    rng = np.random.default_rng(hash((str(dtype), multimodal)) % 2**32)
    ops = _random_ops(rng, dtype, multimodal, 60)
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    with mdc.IndexedDatasetWriter(ours, dtype, multimodal=multimodal) as writer:
        _apply_ours(writer, ops)
    builder = megatron_indexed.IndexedDatasetBuilder(
        theirs + ".bin", np.dtype(dtype).type, multimodal
    )
    _apply_megatron(builder, ops)
    builder.finalize(theirs + ".idx")
    _files_equal(ours, theirs)


@pytest.mark.parametrize("multimodal", [False, True])
def test_merge_byte_identical_to_megatron(tmp_path, megatron_indexed, multimodal):
    rng = np.random.default_rng(7 + multimodal)
    dtype = np.dtype(np.int32)
    parts = []
    for part in range(4):
        prefix = str(tmp_path / f"part{part}")
        with mdc.IndexedDatasetWriter(prefix, dtype, multimodal=multimodal) as writer:
            _apply_ours(writer, _random_ops(rng, dtype, multimodal, int(rng.integers(0, 30))))
        parts.append(prefix)
    tail_ops = _random_ops(rng, dtype, multimodal, 10)
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    with mdc.IndexedDatasetWriter(ours, dtype, multimodal=multimodal) as writer:
        _apply_ours(writer, tail_ops[:5])
        for prefix in parts:
            writer.add_index(prefix)
        _apply_ours(writer, tail_ops[5:])
    builder = megatron_indexed.IndexedDatasetBuilder(
        theirs + ".bin", np.dtype(dtype).type, multimodal
    )
    _apply_megatron(builder, tail_ops[:5])
    for prefix in parts:
        builder.add_index(prefix)
    _apply_megatron(builder, tail_ops[5:])
    builder.finalize(theirs + ".idx")
    _files_equal(ours, theirs)


def test_merge_datasets_function_matches_sequential_adds(tmp_path):
    rng = np.random.default_rng(3)
    parts = []
    for part in range(3):
        prefix = str(tmp_path / f"p{part}")
        with mdc.IndexedDatasetWriter(prefix, np.uint16) as writer:
            _apply_ours(writer, _random_ops(rng, np.dtype(np.uint16), False, 20))
        parts.append(prefix)
    mdc.merge_datasets(parts, str(tmp_path / "merged"))
    merged = mdc.IndexedDataset(str(tmp_path / "merged"))
    expected = [seq for prefix in parts for seq in mdc.IndexedDataset(prefix)[:]]
    assert len(merged) == len(expected)
    for got, want in zip(merged[:], expected, strict=True):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("mmap", [True, False])
def test_we_read_what_megatron_writes(tmp_path, megatron_indexed, dtype, mmap):
    rng = np.random.default_rng(11)
    ops = _random_ops(rng, dtype, True, 50)
    prefix = str(tmp_path / "theirs")
    builder = megatron_indexed.IndexedDatasetBuilder(prefix + ".bin", np.dtype(dtype).type, True)
    _apply_megatron(builder, ops)
    builder.finalize(prefix + ".idx")
    ours = mdc.IndexedDataset(prefix, mmap=mmap)  # multimodal inferred from the size
    theirs = megatron_indexed.IndexedDataset(prefix, multimodal=True, mmap=mmap)
    assert ours.multimodal is True
    assert ours.dtype == np.dtype(dtype)
    assert len(ours) == len(theirs)
    np.testing.assert_array_equal(ours.sequence_lengths, theirs.sequence_lengths)
    np.testing.assert_array_equal(ours.sequence_pointers, theirs.index.sequence_pointers)
    np.testing.assert_array_equal(ours.document_indices, theirs.document_indices)
    np.testing.assert_array_equal(ours.sequence_modes, theirs.index.sequence_modes)
    for index in range(len(ours)):
        (got, got_mode), (want, want_mode) = ours[index], theirs[index]
        np.testing.assert_array_equal(got, want)
        assert got_mode == want_mode
    if len(ours) > 3:
        got_slice, _ = ours[1 : len(ours) - 1]
        want_slice, _ = theirs[1 : len(theirs) - 1]
        for got, want in zip(got_slice, want_slice, strict=True):
            np.testing.assert_array_equal(got, want)
        long = int(np.argmax(ours.sequence_lengths))
        length = int(ours.sequence_lengths[long])
        got, _ = ours.get(long, offset=length // 3, length=length // 2)
        want, _ = theirs.get(long, offset=length // 3, length=length // 2)
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_megatron_reads_what_we_write(tmp_path, megatron_indexed, dtype):
    rng = np.random.default_rng(5)
    ops = _random_ops(rng, dtype, False, 50)
    prefix = str(tmp_path / "ours")
    with mdc.IndexedDatasetWriter(prefix, dtype) as writer:
        _apply_ours(writer, ops)
    ours = mdc.IndexedDataset(prefix)
    theirs = megatron_indexed.IndexedDataset(prefix)
    assert len(theirs) == len(ours)
    np.testing.assert_array_equal(theirs.document_indices, ours.document_indices)
    for index in range(len(ours)):
        np.testing.assert_array_equal(theirs[index], ours[index])


def test_optimal_dtype_matches_megatron(megatron_indexed):
    for vocab in [None, 0, 257, 65499, 65500, 65536, 2**20]:
        assert mdc.optimal_dtype(vocab) == megatron_indexed.DType.optimal_dtype(vocab)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    documents=st.lists(
        st.lists(st.lists(st.integers(0, 65535), max_size=12), max_size=4), max_size=12
    )
)
def test_round_trip_property(tmp_path_factory, documents):
    """Whatever documents go in come out: lengths, boundaries, pointers, tokens."""
    prefix = str(tmp_path_factory.mktemp("rt") / "corpus")
    with mdc.IndexedDatasetWriter(prefix, np.uint16) as writer:
        for document in documents:
            tokens = np.array([t for seq in document for t in seq], dtype=np.int64)
            writer.add_document(tokens, [len(seq) for seq in document])
    ds = mdc.IndexedDataset(prefix)
    sequences = [seq for document in documents for seq in document]
    assert len(ds) == len(sequences)
    assert ds.num_documents == len(documents)
    expected_bounds = np.concatenate([[0], np.cumsum([len(d) for d in documents])])
    np.testing.assert_array_equal(ds.document_indices, expected_bounds.astype(np.int64))
    lengths = np.array([len(s) for s in sequences], dtype=np.int64)
    np.testing.assert_array_equal(ds.sequence_lengths, lengths)
    np.testing.assert_array_equal(
        ds.sequence_pointers,
        2 * np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
        if len(lengths)
        else np.zeros(0, np.int64),
    )
    for got, want in zip(ds[:], sequences, strict=True):
        assert got.tolist() == want
