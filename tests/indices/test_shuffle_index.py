"""shuffle_index against megatron-core's _build_shuffle_index."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

import megadata_core as mdc
from megadata_core.indices import document_index, shuffle_index

# The package exports the function under the module's name; fetch the module itself.
shuffle_module = importlib.import_module("megadata_core.indices.gpt")


@pytest.mark.parametrize("seed", [0, 7, 1234])
@pytest.mark.parametrize(
    ("first", "total"), [(0, 0), (1, 1), (0, 5), (5, 5), (100, 137), (136, 137), (9999, 10000)]
)
def test_matches_megatron(megatron_gpt, seed, first, total):
    ours_rng, their_rng = np.random.RandomState(seed), np.random.RandomState(seed)
    ours = shuffle_index(first, total, ours_rng)
    theirs = megatron_gpt._build_shuffle_index(first, total, their_rng)
    assert ours.dtype == theirs.dtype == np.uint32
    np.testing.assert_array_equal(ours, theirs)
    assert ours_rng.randint(2**31) == their_rng.randint(2**31)


def test_after_a_document_index_on_the_same_state(megatron_gpt):
    ids = np.arange(300, dtype=np.int32)
    ours_rng, their_rng = np.random.RandomState(11), np.random.RandomState(11)
    megatron_gpt._build_document_index(ids, 2, their_rng, True)
    document_index(ids, 2, ours_rng, True)
    np.testing.assert_array_equal(
        shuffle_index(500, 640, ours_rng), megatron_gpt._build_shuffle_index(500, 640, their_rng)
    )


def test_parts_are_separate_permutations():
    index = shuffle_index(60, 100, np.random.RandomState(2))
    np.testing.assert_array_equal(np.sort(index[:60]), np.arange(60))
    np.testing.assert_array_equal(np.sort(index[60:]), np.arange(60, 100))


def test_int64_threshold_is_megatrons():
    # Megatron: int64 when total_size >= iinfo(uint32).max - 1; too big to build here.
    assert shuffle_module.UINT32_LIMIT == np.iinfo(np.uint32).max - 1 == 2**32 - 2


def test_int64_branch_values(monkeypatch):
    monkeypatch.setattr(shuffle_module, "UINT32_LIMIT", 50)
    wide = shuffle_index(30, 50, np.random.RandomState(3))
    narrow = shuffle_index(30, 49, np.random.RandomState(3))
    assert wide.dtype == np.int64 and narrow.dtype == np.uint32
    np.testing.assert_array_equal(narrow, shuffle_index(30, 49, np.random.RandomState(3)))


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ((-1, 5), "num_samples"),
        ((6, 5), "num_samples"),
        ((0, -5), "total_size"),
        ((1.5, 5), "num_samples"),
    ],
)
def test_bad_input(args, field):
    with pytest.raises(mdc.DataError, match=field):
        shuffle_index(*args, np.random.RandomState(0))
    with pytest.raises(mdc.DataError, match="rng"):
        shuffle_index(1, 2, np.random.default_rng(0))
