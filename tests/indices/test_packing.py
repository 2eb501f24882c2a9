"""best_fit_pack: equal to a plain O(D * B) best-fit-decreasing, and its invariants."""

from __future__ import annotations

import os
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from megadata_core import DataError
from megadata_core.cache.spill import spill_arrays
from megadata_core.indices import packing
from megadata_core.indices.arrays import SCRATCH_PREFIX
from megadata_core.indices.feistel import feistel_document_order
from megadata_core.indices.gpt import seeded_random_state, shuffle_index
from megadata_core.indices.packed_samples import packed_indices
from megadata_core.indices.packing import best_fit_pack


def reference_bfd(lengths: list[int], capacity: int, order: list[int]) -> list[list[tuple]]:
    """Best fit decreasing, one piece at a time: pieces by (length desc, rank in order,
    offset); each to the open bin with the least remaining capacity that holds it, ties to
    the bin that has had that remaining capacity longest; else a new bin."""
    pieces = []
    for rank, document in enumerate(order):
        length, offset = lengths[document], 0
        while length - offset >= capacity:
            pieces.append((capacity, rank, offset, document))
            offset += capacity
        if length > offset:
            pieces.append((length - offset, rank, offset, document))
    pieces.sort(key=lambda piece: (-piece[0], piece[1], piece[2]))
    remaining, since, bins = [], [], []
    for time, (size, _, offset, document) in enumerate(pieces):
        best = None
        for b in range(len(remaining)):
            if remaining[b] >= size and (
                best is None or (remaining[b], since[b]) < (remaining[best], since[best])
            ):
                best = b
        if best is None:
            remaining.append(capacity)
            bins.append([])
            since.append(time)
            best = len(bins) - 1
        remaining[best] -= size
        since[best] = time
        bins[best].append((document, offset, size))
    return bins


def bins_of(packed) -> list[list[tuple]]:
    rows = zip(packed.bin_offsets[:-1].tolist(), packed.bin_offsets[1:].tolist())
    return [
        list(
            zip(
                packed.piece_document[a:b].tolist(),
                packed.piece_offset[a:b].tolist(),
                packed.piece_length[a:b].tolist(),
            )
        )
        for a, b in rows
    ]


@settings(max_examples=300, deadline=None)
@given(
    st.integers(1, 24).flatmap(
        lambda capacity: st.tuples(
            st.just(capacity),
            st.lists(st.integers(0, 3 * capacity + 1), max_size=40),
            st.randoms(use_true_random=False),
        )
    )
)
def test_equals_reference_bfd(case):
    capacity, lengths, random = case
    order = list(range(len(lengths)))
    random.shuffle(order)
    packed = best_fit_pack(np.array(lengths, dtype=np.int64), capacity, np.array(order))
    assert bins_of(packed) == reference_bfd(lengths, capacity, order)


@settings(max_examples=100, deadline=None)
@given(
    st.integers(1, 64),
    st.lists(st.integers(0, 200), max_size=200),
)
def test_every_token_once_and_no_bin_over_capacity(capacity, lengths):
    lengths = np.array(lengths, dtype=np.int64)
    packed = best_fit_pack(lengths, capacity)
    assert packed.piece_document.dtype == np.int64
    assert packed.bin_offsets[0] == 0 and (np.diff(packed.bin_offsets) >= 1).all()
    assert (packed.bin_lengths() <= capacity).all()
    assert (packed.piece_length >= 1).all()
    # every token of every document exactly once: pieces tile each document
    covered = np.zeros(int(lengths.sum()), dtype=np.int64)
    base = np.concatenate([[0], np.cumsum(lengths)])
    for d, o, n in zip(packed.piece_document, packed.piece_offset, packed.piece_length):
        covered[base[d] + o : base[d] + o + n] += 1
    assert (covered == 1).all()
    # only documents longer than a bin are cut
    cut = np.bincount(packed.piece_document, minlength=len(lengths)) > 1
    assert not (cut & (lengths <= capacity)).any()


def test_near_lower_bound_on_many_documents():
    rng = np.random.default_rng(3)
    lengths = np.maximum(1, rng.lognormal(np.log(300), 1.0, 20_000)).astype(np.int64)
    packed = best_fit_pack(lengths, 2049, rng.permutation(len(lengths)))
    fewest = -(-int(lengths.sum()) // 2049)
    assert packed.num_bins <= fewest * 1.001 + 1


def test_order_breaks_ties_only():
    lengths = np.array([3, 3, 3, 5], dtype=np.int64)
    first = best_fit_pack(lengths, 8, np.array([0, 1, 2, 3]))
    second = best_fit_pack(lengths, 8, np.array([2, 1, 0, 3]))
    assert np.array_equal(first.bin_offsets, second.bin_offsets)
    assert np.array_equal(first.piece_length, second.piece_length)
    assert bins_of(first) == [[(3, 0, 5), (0, 0, 3)], [(1, 0, 3), (2, 0, 3)]]
    assert bins_of(second) == [[(3, 0, 5), (2, 0, 3)], [(1, 0, 3), (0, 0, 3)]]


@pytest.mark.parametrize(
    "args, message",
    [
        ((np.array([1, -2]), 4), "lengths: negative length -2"),
        ((np.array([1, 2]), 0), "capacity: 0 must be >= 1"),
        ((np.array([1, 2]), 4, np.array([0, 0])), "order: not a permutation"),
        ((np.array([1, 2]), 4, np.array([0, 2])), "order: 2 is outside [0, 2)"),
        ((np.array([1, 2]), 4, np.array([0])), "order: expected a permutation"),
    ],
)
def test_bad_input(args, message):
    with pytest.raises(DataError, match=message.replace("[", r"\[").replace(")", r"\)")):
        best_fit_pack(*args)


def test_empty():
    packed = best_fit_pack(np.zeros(3, dtype=np.int64), 4)
    assert packed.num_bins == 0 and len(packed.piece_document) == 0


# lengths, capacity, documents per block: the fill's inputs; then one more integer, and the
# random source of the order
FILL_CASES = (st.lists(st.integers(0, 40), min_size=1, max_size=300), st.integers(1, 17),
              st.integers(1, 64))


def _fill_case(lengths, capacity, random):
    """(int32 lengths, a random int64 order of the documents, their layout)."""
    lengths = np.array(lengths, dtype=np.int32)
    order = np.array(random.sample(range(len(lengths)), len(lengths)), dtype=np.int64)
    return lengths, order, packing.pack_layout(lengths, capacity)


@settings(max_examples=60, deadline=None)
@given(*FILL_CASES, st.integers(1, 50), st.randoms(use_true_random=False))
def test_fill_in_blocks_and_row_ranges_equals_one_pass(lengths, capacity, block, scratch, random):
    """The fill walks the order a block at a time and, for an output larger than its
    buffer, writes it a row range at a time: any block and buffer size gives the rows
    of one pass over everything (which the BFD reference checks above)."""
    lengths, order, layout = _fill_case(lengths, capacity, random)
    whole = packing.fill_documents(layout, order)
    with mock.patch.object(packing, "_BLOCK", block):
        assert np.array_equal(packing.pack_layout(lengths, capacity).row, layout.row)
        parts = packing.fill_documents(
            layout, lambda lo, hi: order[lo:hi], np.empty(len(whole), np.int32), scratch * 4
        )
    assert np.array_equal(parts, whole)


@settings(max_examples=60, deadline=None)
@given(*FILL_CASES, st.integers(2, 4), st.randoms(use_true_random=False))
def test_fill_on_threads_equals_one_pass(lengths, capacity, block, threads, random):
    """Blocks filled in waves on several threads (each block's places from the blocks
    before it) give the rows of one pass on one thread."""
    lengths, order, layout = _fill_case(lengths, capacity, random)
    with mock.patch.object(packing, "fill_threads", lambda: 1):
        whole = packing.fill_documents(layout, order)
    with mock.patch.object(packing, "_BLOCK", block), mock.patch.object(
            packing, "fill_threads", lambda: threads):
        waves = packing.fill_documents(layout, lambda lo, hi: order[lo:hi])
    assert np.array_equal(waves, whole)


@pytest.mark.parametrize("shuffle", ["megatron", "feistel"])
@pytest.mark.parametrize("span", [True, False])
def test_packed_indices_equal_one_best_fit_pack_per_epoch(shuffle, span):
    """The epochs (packed beside the drawing of the next order) equal best_fit_pack of
    each epoch's order, drawn in sequence, and the sample shuffle comes after them."""
    rng = np.random.default_rng(9)
    corpus = rng.integers(0, 40, 500).astype(np.int32)
    ids = range(37, 500) if span else np.sort(rng.choice(500, 300, replace=False))
    lengths = corpus[np.asarray(ids)]
    out = packed_indices(corpus, ids, 15, 3000, 5, feistel=shuffle == "feistel")
    epochs, head, full, capacity = out["packed_shape"].tolist()
    assert epochs > 2 and capacity == 16
    draws = seeded_random_state(5)
    pieces = len(out["piece_document"]) // epochs
    for epoch in range(epochs):
        if shuffle == "megatron":
            order = np.arange(len(lengths))
            draws.shuffle(order)
        else:
            order = feistel_document_order(np.arange(len(lengths)), 5, epoch)
        packed = best_fit_pack(lengths, capacity, order)
        rows = out["piece_document"][epoch * pieces : (epoch + 1) * pieces]
        assert np.array_equal(rows, np.asarray(ids)[packed.piece_document])
        assert np.array_equal(out["bin_offsets"], packed.bin_offsets)
        assert np.array_equal(
            out["full_offset"][epoch * full : (epoch + 1) * full], packed.piece_offset[:full]
        )
    if shuffle == "megatron":
        expected = shuffle_index(head, epochs * (len(out["bin_offsets"]) - 1), draws)
        assert np.array_equal(out["shuffle_index"], expected)


def test_layout_same_for_int32_and_int64_lengths():
    lengths = np.random.default_rng(4).integers(0, 3000, 2000)
    order = np.random.default_rng(5).permutation(2000)
    wide, narrow = (best_fit_pack(lengths.astype(t), 1000, order) for t in (np.int64, np.int32))
    assert bins_of(wide) == bins_of(narrow)
    assert narrow.piece_offset.dtype == narrow.piece_length.dtype == np.int64


@pytest.mark.parametrize("shuffle", ["megatron", "feistel"])
@pytest.mark.parametrize("span", [True, False])
def test_spilled_packed_indices_equal_in_memory(tmp_path, shuffle, span):
    """Built into spill files (results, the working rows and the Megatron orders all
    file mappings) and filled a few rows at a time through the buffer, the arrays equal
    the in-memory build; every working file is gone afterwards."""
    rng = np.random.default_rng(4)
    corpus = rng.integers(0, 60, 3000).astype(np.int32)
    ids = range(100, 2900) if span else np.sort(rng.choice(3000, 2000, replace=False))
    expected = packed_indices(corpus, ids, 31, 900, 7, feistel=shuffle == "feistel")
    names = {name: f"entry-{name}.npy" for name in expected}
    with mock.patch.object(packing, "FILL_SCRATCH", 400), mock.patch.object(
        packing, "_BLOCK", 256
    ):
        with spill_arrays(str(tmp_path), names, spill_above=0,
                          working_prefix=SCRATCH_PREFIX) as empty:
            spilled = packed_indices(
                corpus, ids, 31, 900, 7, feistel=shuffle == "feistel", empty=empty
            )
            assert isinstance(spilled["piece_document"], np.memmap)
            assert any(".scratch-pack-rows" in name for name in os.listdir(tmp_path))
            for name, array in expected.items():
                np.testing.assert_array_equal(np.asarray(spilled[name]), array, err_msg=name)
            del spilled
    assert os.listdir(tmp_path) == []
