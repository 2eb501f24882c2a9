"""A Python ``range`` of document ids gives the same indices as the id array, in O(1)
memory for the ids; the id checks are those of arrays."""

from __future__ import annotations

import numpy as np
import pytest

import megadata_core as mdc
from megadata_core.indices import document_index, gpt_indices, tokens_per_epoch
from megadata_core.indices import gpt as gpt_module


@pytest.mark.parametrize("epochs", [1, 3])
@pytest.mark.parametrize("separate", [False, True])
def test_document_index_of_a_range_equals_the_array(epochs, separate, monkeypatch):
    monkeypatch.setattr("megadata_core.indices.arrays._ARANGE_BLOCK", 7)  # ragged blocks
    ids = range(40, 140)
    ours = document_index(ids, epochs, np.random.RandomState(3), separate)
    array = document_index(np.arange(40, 140), epochs, np.random.RandomState(3), separate)
    assert ours.dtype == array.dtype == np.int32
    np.testing.assert_array_equal(ours, array)


def test_tokens_per_epoch_of_a_range_and_of_gathered_blocks(monkeypatch):
    lengths = np.random.default_rng(0).integers(0, 100, 1000).astype(np.int32)
    expected = int(lengths[100:900].sum())
    assert tokens_per_epoch(lengths, range(100, 900)) == expected
    monkeypatch.setattr(gpt_module, "_GATHER_BLOCK", 7)
    assert tokens_per_epoch(lengths, np.arange(100, 900)) == expected
    ids = np.random.default_rng(1).integers(0, 1000, 333)
    assert tokens_per_epoch(lengths, ids) == int(lengths[ids].sum())
    assert tokens_per_epoch(lengths, range(5, 5)) == 0
    assert tokens_per_epoch(lengths, range(0, 1000, 3)) == int(lengths[::3].sum())


def test_gpt_indices_of_a_range_equal_the_array():
    lengths = np.random.default_rng(2).integers(0, 50, 3000).astype(np.int32)
    for num_samples in (None, 500, 9000):
        ours = gpt_indices(lengths, range(100, 2900), 32, num_samples, 7)
        array = gpt_indices(lengths, np.arange(100, 2900, dtype=np.int32), 32, num_samples, 7)
        for mine, theirs in zip(ours, array):
            assert mine.dtype == theirs.dtype
            np.testing.assert_array_equal(mine, theirs)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: tokens_per_epoch(np.ones(5, np.int32), range(3, 6)), r"id 5 is out of range"),
        (lambda: tokens_per_epoch(np.ones(5, np.int32), range(-1, 2)), r"id -1 is out of range"),
        (
            lambda: document_index(range(2**31 - 2, 2**31 + 1), 1, np.random.RandomState(0), False),
            r"doc_ids: id 2147483648 is out of range",
        ),
    ],
)
def test_range_ids_are_checked_like_arrays(call, match):
    with pytest.raises(mdc.DataError, match=match):
        call()
