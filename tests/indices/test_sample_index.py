"""sample_index against megatron-core's helpers.build_sample_idx, plus its invariants."""

from __future__ import annotations

import importlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import megadata_core as mdc
from megadata_core.indices import document_index, sample_index, samples_in_epochs

sample_module = importlib.import_module("megadata_core.indices.sample_boundaries")


def _corpus(draw: np.random.Generator, kind: str) -> np.ndarray:
    """Document lengths (int32) of one of several corpus shapes."""
    n = int(draw.integers(1, 400))
    if kind == "mixed":
        lengths = draw.integers(0, 300, n)
    elif kind == "sparse":  # mostly empty documents
        lengths = draw.integers(1, 50, n) * (draw.random(n) < 0.2)
    elif kind == "ones":
        lengths = draw.integers(0, 2, n) + (draw.random(n) < 0.9)
    elif kind == "long":  # documents much longer than a sample
        lengths = draw.integers(0, 20_000, n)
    else:  # one document
        lengths = draw.integers(1, 5000, 1)
    return lengths.astype(np.int32)


def _check(oracle, sizes, doc_idx, seq, epochs, tokens, drop_last, extra):
    ours = sample_index(sizes, doc_idx, seq, epochs, tokens, drop_last, extra)
    theirs = oracle(sizes, doc_idx, seq, epochs, tokens, drop_last, extra)
    assert ours.dtype == theirs.dtype
    np.testing.assert_array_equal(ours, theirs)
    _check_invariants(ours, sizes, doc_idx, seq, epochs * tokens, drop_last, int(extra))
    return ours


def _check_invariants(rows, sizes, doc_idx, seq, total, drop_last, extra):
    """Row j sits at global token j*S; every sample spans S + extra tokens except a
    final partial one; positions never decrease; offsets lie within their document."""
    lengths = sizes[doc_idx].astype(np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)])[:-1]
    pos, off = rows[:, 0].astype(np.int64), rows[:, 1].astype(np.int64)
    assert len(rows) - 1 == samples_in_epochs(1, total, seq, extra, drop_last)
    assert np.all(np.diff(pos) >= 0)
    full = rows[1:][np.arange(1, len(rows)) * seq + extra <= total]
    j = np.arange(len(full) + 1)
    np.testing.assert_array_equal(starts[pos[: len(j)]] + off[: len(j)], j * seq)
    fpos, foff = full[:, 0].astype(np.int64), full[:, 1].astype(np.int64)
    assert np.all((foff >= 0) & (foff <= lengths[fpos] - extra))
    # First document that reaches the sample's last token (never a later empty one).
    assert np.all(starts[fpos] + lengths[fpos] >= j[1:] * seq + extra)
    assert np.all(starts[fpos] < j[1:] * seq + extra)
    tail = rows[len(j) :]
    assert len(tail) == (0 if drop_last or (total - extra) % seq == 0 else 1)
    for p, o in tail:  # at most one row: the partial sample, ending at the stream's end
        assert (p, o) == (len(doc_idx) - 1, lengths[-1] - extra)
        assert total - (len(rows) - 2) * seq < seq + extra


@pytest.mark.parametrize("kind", ["mixed", "sparse", "ones", "long", "single"])
@pytest.mark.parametrize("seed", range(6))
def test_matches_megatron_on_random_corpora(megatron_sample_index, kind, seed):
    draw = np.random.default_rng([seed, len(kind)])
    sizes = _corpus(draw, kind)
    if sizes.sum() == 0:
        sizes[int(draw.integers(len(sizes)))] = 1
    lo = int(draw.integers(0, len(sizes)))
    ids = np.arange(lo, int(draw.integers(lo + 1, len(sizes) + 1)), dtype=np.int32)
    tokens = int(sizes[ids].sum())
    if tokens == 0:
        ids = np.arange(len(sizes), dtype=np.int32)
        tokens = int(sizes.sum())
    for seq in (1, 2, 7, int(draw.integers(8, 600)), 4096):
        for epochs in (1, 3):
            if epochs * tokens // seq > 200_000:  # keep the suite fast
                continue
            doc_idx = document_index(ids, epochs, np.random.RandomState(seed), seed % 2 == 0)
            for drop_last in (True, False):
                for extra in (True, False):
                    _check(megatron_sample_index, sizes, doc_idx, seq, epochs, tokens,
                           drop_last, extra)  # fmt: skip


@settings(max_examples=250, deadline=None)
@given(
    lengths=st.lists(
        st.one_of(st.just(0), st.just(0), st.just(1), st.integers(0, 40)),
        min_size=1,
        max_size=60,
    ),
    seq=st.integers(1, 40),
    epochs=st.integers(1, 3),
    seed=st.integers(0, 2**32 - 1),
    separate=st.booleans(),
    drop_last=st.booleans(),
    extra=st.booleans(),
)
def test_property_many_empty_documents(
    megatron_sample_index, lengths, seq, epochs, seed, separate, drop_last, extra
):
    sizes = np.array(lengths, dtype=np.int32)
    if sizes.sum() == 0:
        sizes[-1] = 3
    ids = np.arange(len(sizes), dtype=np.int32)
    doc_idx = document_index(ids, epochs, np.random.RandomState(seed), separate)
    _check(megatron_sample_index, sizes, doc_idx, seq, epochs, int(sizes.sum()),
           drop_last, extra)  # fmt: skip


@settings(max_examples=100, deadline=None)
@given(
    data=st.data(),
    num_docs=st.integers(1, 30),
    seq=st.integers(1, 64),
    drop_last=st.booleans(),
    extra=st.booleans(),
)
def test_property_arbitrary_document_order(
    megatron_sample_index, data, num_docs, seq, drop_last, extra
):
    """Any list of positions (repeats, gaps) is a valid single-epoch document index."""
    sizes = np.array(data.draw(st.lists(st.integers(0, 100), min_size=num_docs,
                                        max_size=num_docs)), np.int32)  # fmt: skip
    doc_idx = np.array(data.draw(st.lists(st.integers(0, num_docs - 1), min_size=1,
                                          max_size=80)), np.int32)  # fmt: skip
    tokens = int(sizes[doc_idx].sum())
    if tokens == 0:
        return
    _check(megatron_sample_index, sizes, doc_idx, seq, 1, tokens, drop_last, extra)


def test_boundaries_on_document_ends_and_empty_documents(megatron_sample_index):
    sizes = np.array([3, 0, 5, 0], np.int32)
    doc_idx = np.arange(4, dtype=np.int32)
    # extra = 0: the sample boundary after 3 tokens points at the END of document 0.
    rows = _check(megatron_sample_index, sizes, doc_idx, 3, 1, 8, False, False)
    assert rows.tolist() == [[0, 0], [0, 3], [2, 3], [3, 0]]
    # extra = 1, partial sample ending on an empty last document: offset -1, as Megatron.
    rows = _check(megatron_sample_index, sizes, doc_idx, 2, 1, 8, False, True)
    assert rows.tolist() == [[0, 0], [0, 2], [2, 1], [2, 3], [3, -1]]


def test_threads_and_blocks_never_change_the_result(megatron_sample_index):
    draw = np.random.default_rng(5)
    sizes = (draw.integers(0, 60, 5000) * (draw.random(5000) < 0.7)).astype(np.int32)
    doc_idx = document_index(np.arange(5000), 2, np.random.RandomState(1), False)
    tokens = int(sizes.sum())
    expected = megatron_sample_index(sizes, doc_idx, 33, 2, tokens, False, True)
    for block in (1, 7, 333, 4096, 10_000, 1 << 21):
        for threads in (1, 3):
            rows = sample_index(
                sizes, doc_idx, 33, 2, tokens, False, True, num_threads=threads, block_size=block
            )
            np.testing.assert_array_equal(rows, expected)


def test_megatron_float32_ceil_loses_the_last_sample(megatron_helpers):
    """float32(2**24 + 1) == 2**24, so Megatron's ceil drops the 1-token partial sample."""
    length, seq = 2**24 + 1, 4096
    sizes, doc_idx = np.array([length], np.int32), np.zeros(1, np.int32)
    theirs = megatron_helpers.build_sample_idx(sizes, doc_idx, seq, 1, length, False, False)
    ours = sample_index(sizes, doc_idx, seq, 1, length, False, False)
    assert len(theirs) - 1 == int(np.ceil(np.float32(length) / np.float32(seq))) == 4096
    assert len(ours) - 1 == -(-length // seq) == 4097
    np.testing.assert_array_equal(ours[:-1], theirs)  # equal wherever both have a row
    assert ours[-1].tolist() == [0, length]  # the partial sample: token 2**24 to the end


def test_megatron_float32_ceil_can_add_an_empty_sample(megatron_helpers):
    """16779763 = 1001 * 16763 exactly (no partial sample), but float32 rounds it up to
    16779764 and the float32 quotient rounds up past 16763: Megatron counts one sample
    too many and repeats the end row (a 0-token sample)."""
    length, seq = 16_779_763, 1001
    sizes, doc_idx = np.array([length], np.int32), np.zeros(1, np.int32)
    theirs = megatron_helpers.build_sample_idx(sizes, doc_idx, seq, 1, length, False, False)
    ours = sample_index(sizes, doc_idx, seq, 1, length, False, False)
    assert len(theirs) - 1 == 16764 and len(ours) - 1 == 16763
    np.testing.assert_array_equal(ours, theirs[:-1])
    assert theirs[-1].tolist() == theirs[-2].tolist() == [0, length]


@pytest.mark.parametrize(
    ("length", "seq", "extra"),
    [(2**24 + 1, 4096, 0), (2**24 + 2, 4096, 1), (33_557_982, 1002, 0), (2**25 + 1, 8192, 0),
     (50_331_649, 12288, 0), (2**25 - 1, 601, 0), (2**24 + 3, 1024, 0), (12_345, 7, 1)],
)  # fmt: skip
def test_float32_count_explains_every_difference(megatron_helpers, length, seq, extra):
    """Megatron's count is ceil(float32(E*T - extra) / float32(S)); ours is exact; the rows
    agree wherever both exist."""
    sizes, doc_idx = np.array([length], np.int32), np.zeros(1, np.int32)
    theirs = megatron_helpers.build_sample_idx(sizes, doc_idx, seq, 1, length, False, extra)
    ours = sample_index(sizes, doc_idx, seq, 1, length, False, extra)
    assert len(theirs) - 1 == int(np.ceil(np.float32(length - extra) / np.float32(seq)))
    assert len(ours) - 1 == -(-(length - extra) // seq)
    common = min(len(ours), len(theirs))
    np.testing.assert_array_equal(ours[:common], theirs[:common])


def test_dtype_rule_is_megatrons():
    assert sample_module.sample_index_dtype(2**31 - 1, 100) == np.int32
    assert sample_module.sample_index_dtype(2**31, 100) == np.int64
    assert sample_module.sample_index_dtype(10, 2**31) == np.int64


def test_offsets_past_int32_fit_in_int64():
    # One 3e9-token document cannot be an int32 size, but our function takes int64 sizes.
    sizes = np.array([3_000_000_000], np.int64)
    rows = sample_index(sizes, np.zeros(1, np.int32), 10**9, 1, 3_000_000_000, True, False)
    assert rows.dtype == np.int64
    assert rows.tolist() == [[0, 0], [0, 10**9], [0, 2 * 10**9], [0, 3 * 10**9]]


def test_zero_samples():
    rows = sample_index(np.array([3], np.int32), np.zeros(1, np.int32), 8, 1, 3, True, True)
    assert rows.tolist() == [[0, 0]]


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"sequence_length": 0}, "sequence_length"),
        ({"sequence_length": -4}, "sequence_length"),
        ({"num_epochs": 0}, "num_epochs"),
        ({"tokens_per_epoch": 0}, "tokens_per_epoch"),
        ({"tokens_per_epoch": 7}, "tokens_per_epoch"),  # 2 x 7 != 20 tokens
        ({"sequence_lengths": np.array([5, -1, 5])}, "sequence_lengths"),
        ({"sequence_lengths": np.array([], np.int32)}, "sequence_lengths"),
        ({"sequence_lengths": np.array([5.0, 5.0, 5.0])}, "sequence_lengths"),
        ({"document_index": np.array([0, 3])}, "document_index"),
        ({"document_index": np.array([0, -1])}, "document_index"),
        ({"document_index": np.array([], np.int32)}, "document_index"),
        ({"document_index": np.zeros((1, 2), np.int32)}, "document_index"),
        ({"num_threads": 0}, "num_threads"),
    ],
)
def test_bad_input_names_the_field(kwargs, field):
    args = {
        "sequence_lengths": np.array([5, 0, 5], np.int32),
        "document_index": np.array([0, 2, 2, 0], np.int32),
        "sequence_length": 4,
        "num_epochs": 2,
        "tokens_per_epoch": 10,
    }
    args.update(kwargs)
    with pytest.raises(mdc.DataError, match=field):
        sample_index(**args)
