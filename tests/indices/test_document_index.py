"""document_index against megatron-core's _build_document_index."""

from __future__ import annotations

import numpy as np
import pytest

import megadata_core as mdc
from megadata_core.indices import document_index


def test_golden_first_values():
    index = document_index(np.arange(10_000_000), 1, np.random.RandomState(1234), False)
    assert index.dtype == np.int32
    assert index[:5].tolist() == [6539158, 5257737, 8780719, 3021630, 5042346]


@pytest.mark.parametrize("seed", [0, 1, 1234, 2**32 - 1])
@pytest.mark.parametrize("epochs", [1, 2, 5])
@pytest.mark.parametrize("separate", [False, True])
def test_matches_megatron(megatron_gpt, seed, epochs, separate):
    draw = np.random.default_rng(seed)
    lo = int(draw.integers(0, 1000))
    ids = np.arange(lo, lo + int(draw.integers(1, 3000)), dtype=np.int32)
    ours_rng, their_rng = np.random.RandomState(seed), np.random.RandomState(seed)
    ours = document_index(ids, epochs, ours_rng, separate)
    theirs = megatron_gpt._build_document_index(ids, epochs, their_rng, separate)
    assert ours.dtype == theirs.dtype == np.int32
    np.testing.assert_array_equal(ours, theirs)
    # The state advanced identically: the shuffle index that follows sees the same stream.
    assert ours_rng.randint(2**31) == their_rng.randint(2**31)


def test_arbitrary_ids_and_dtypes(megatron_gpt):
    ids = np.random.default_rng(3).integers(0, 2**31 - 1, 777).astype(np.int64)
    ours = document_index(ids, 3, np.random.RandomState(9), True)
    theirs = megatron_gpt._build_document_index(ids, 3, np.random.RandomState(9), True)
    np.testing.assert_array_equal(ours, theirs)


def test_epochs_hold_each_id_once():
    ids = np.arange(50, 90)
    index = document_index(ids, 4, np.random.RandomState(5), True)
    np.testing.assert_array_equal(np.sort(index[-40:]), ids)  # final epoch on its own
    np.testing.assert_array_equal(np.sort(index[:-40]), np.repeat(ids, 3))


def test_empty_ids_draw_nothing():
    rng = np.random.RandomState(4)
    assert document_index(np.array([], np.int32), 3, rng, False).shape == (0,)
    assert rng.randint(1000) == np.random.RandomState(4).randint(1000)


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ((np.arange(3), 0, np.random.RandomState(0), False), "num_epochs"),
        ((np.arange(3), 1, np.random.default_rng(0), False), "rng"),
        ((np.array([2**31]), 1, np.random.RandomState(0), False), "doc_ids"),
        ((np.array([-1, 2]), 1, np.random.RandomState(0), False), "doc_ids"),
        ((np.zeros((2, 2), int), 1, np.random.RandomState(0), False), "doc_ids"),
    ],
)
def test_bad_input(args, field):
    with pytest.raises(mdc.DataError, match=field):
        document_index(*args)
