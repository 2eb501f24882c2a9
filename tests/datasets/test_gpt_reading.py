"""The batched token copies of megadata_core.datasets.reading: spill_copy (whole blocks
that spill into later pieces), its fallbacks, and the pieces of a batch."""

from __future__ import annotations

import numpy as np
import pytest
from gpt_oracle import ours_dataset, write_corpus
from hypothesis import given, settings
from hypothesis import strategies as st

from megadata_core.datasets import reading
from megadata_core.modes.concat import locate_pieces

SPILL = reading.SPILL
LENGTHS = [0, 1, 2, 31, 32, 33, SPILL - 1, SPILL, SPILL + 1, 2 * SPILL + 3, 700]


def _expected(source, source_start, out_start, length, size, fill):
    expected = np.full(size, fill, dtype=np.int64)
    for s, o, n in zip(source_start.tolist(), out_start.tolist(), length.tolist()):
        expected[o : o + n] = source[s : s + n]
    return expected


def test_rows_are_written_in_index_order():
    # spill_copy relies on it; on a numpy where it fails, spill_copy always declines.
    assert reading._writes_in_order()


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.sampled_from(LENGTHS), min_size=1, max_size=14),
    gaps=st.booleans(),
    same_dtype=st.booleans(),
    seed=st.integers(0, 1000),
)
def test_spill_copy_matches_slices(lengths, gaps, same_dtype, seed):
    rng = np.random.default_rng(seed)
    source = rng.integers(0, 60000, 6000).astype(np.uint16)
    length = np.array(lengths, dtype=np.int64)
    source_start = rng.integers(0, len(source) - 700 - SPILL, len(length)).astype(np.int64)
    gap = rng.integers(0, 5, len(length)) if gaps else np.zeros(len(length), np.int64)
    out_start = np.cumsum(length + gap) - length  # increasing, ranges never overlap
    end = int(out_start[-1] + length[-1])
    out = np.full(end + SPILL - 1, 9, dtype=np.uint16 if same_dtype else np.int32)
    assert reading.spill_copy(source, source_start, out, out_start, length)
    expected = _expected(source, source_start, out_start, length, len(out), 9)
    covered = np.zeros(len(out), dtype=bool)
    for o, n in zip(out_start.tolist(), length.tolist()):
        covered[o : o + n] = True
    np.testing.assert_array_equal(out[covered], expected[covered])  # the rest: arbitrary


def test_spill_copy_declines_reads_past_the_source():
    source = np.arange(3 * SPILL, dtype=np.uint16)
    length = np.array([5, 10], dtype=np.int64)
    out_start = np.array([0, 5], dtype=np.int64)
    out = np.zeros(15 + SPILL - 1, dtype=np.int32)
    near_end = np.array([0, len(source) - 10], dtype=np.int64)  # a block would pass the end
    assert not reading.spill_copy(source, near_end, out, out_start, length)
    assert not out.any()  # nothing copied
    short = np.arange(SPILL - 1, dtype=np.uint16)  # shorter than one block
    assert not reading.spill_copy(short, np.zeros(2, np.int64), out, out_start, length)
    assert reading.spill_copy(source, np.array([0, 2 * SPILL - 10]), out, out_start, length)
    np.testing.assert_array_equal(out[:15], np.r_[0:5, 2 * SPILL - 10 : 2 * SPILL])


def test_spill_copy_without_ranges():
    out = np.zeros(SPILL, dtype=np.int32)
    empty = np.zeros(0, dtype=np.int64)
    assert reading.spill_copy(np.arange(SPILL, dtype=np.uint16), empty, out, empty, empty)
    assert not out.any()


@pytest.mark.parametrize(
    "corpus_dtype, token_dtype",
    [(np.uint16, np.int32), (np.int32, np.int32), (np.uint16, np.int64)],
)
def test_batches_reading_the_end_of_the_bin(tmp_path, monkeypatch, corpus_dtype, token_dtype):
    # Long documents, the last one included in every epoch: batches mix the spill copy
    # and its fallback (a block past the end of the .bin); both equal single samples.
    rng = np.random.default_rng(5)
    lengths = rng.integers(SPILL // 2, 3 * SPILL, 40)
    prefix = write_corpus(str(tmp_path / "c"), lengths, rng, dtype=corpus_dtype)
    dataset = ours_dataset(
        prefix, None, "train", eod=3, random_seed=3, sequence_length=300,
        create_attention_mask=False,
    ).with_token_dtype(token_dtype)
    indexed = dataset.indexed
    stream = np.concatenate([indexed[int(doc)] for doc in dataset.document_index])
    order = np.asarray(dataset.shuffle_index[np.arange(len(dataset))], dtype=np.int64)
    expected = np.stack([stream[300 * row : 300 * row + 301] for row in order])
    spilled = []

    def recording(*args):
        spilled.append(spill_copy(*args))
        return spilled[-1]

    spill_copy = reading.spill_copy
    monkeypatch.setattr(reading, "spill_copy", recording)
    for start in range(0, len(dataset), 7):
        batch = dataset.__getitems__(np.arange(start, min(start + 7, len(dataset))))
        np.testing.assert_array_equal(batch["tokens"], expected[start : start + 7, :-1])
        np.testing.assert_array_equal(batch["labels"], expected[start : start + 7, 1:])
        assert batch["tokens"].dtype == token_dtype
    assert True in spilled and False in spilled  # both paths ran


def test_pieces_start():
    sample_index = np.array([[0, 2], [1, 3], [1, 9]], dtype=np.int32)
    document_index = np.array([1, 0], dtype=np.int32)
    lengths = np.array([10, 6], dtype=np.int32)
    pieces = locate_pieces(sample_index, document_index, lengths, np.array([1, 0]), 1)
    np.testing.assert_array_equal(pieces.document, [0, 1, 0])
    np.testing.assert_array_equal(pieces.start, [3, 2, 0])
    np.testing.assert_array_equal(pieces.length, [7, 4, 4])
    np.testing.assert_array_equal(pieces.first, [0, 1])
