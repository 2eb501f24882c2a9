"""GPTDataset rejects bad input with a DataError naming the field."""

from __future__ import annotations

import os

import numpy as np
import pytest
from gpt_oracle import write_corpus

import megadata_core as mdc


@pytest.fixture
def corpus(tmp_path):
    rng = np.random.default_rng(0)
    lengths = np.array([5, 0, 7, 0, 0, 9, 4])
    return mdc.IndexedDataset(write_corpus(str(tmp_path / "c"), lengths, rng))


def _config(**changes):
    return mdc.GPTDataConfig(**{"random_seed": 1, "sequence_length": 4, "eod_id": 3, **changes})


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ((np.arange(7), -1, _config()), "num_samples"),
        ((np.arange(7), 2.0, _config()), "num_samples"),
        ((np.arange(0), 10, _config()), "indices"),  # no documents, samples asked
        ((np.arange(0), None, _config()), "indices"),
        ((np.array([1, 3, 4]), 10, _config()), "indices"),  # documents without tokens
        ((np.array([0, 7]), 10, _config()), "indices"),  # out of range
        ((np.arange(7).reshape(7, 1), 10, _config()), "indices"),
        ((np.arange(7), 10, _config(eod_id=70000)), "eod_id"),  # not a uint16 token
        ((np.arange(7), 10, _config(eod_id=-1)), "eod_id"),
        ((np.arange(7), 10, _config(eod_id=None, eod_mask_loss=True)), "eod_id"),
        ((np.arange(7), 10, "config"), "config"),
    ],
)
def test_bad_input(corpus, args, field):
    with pytest.raises(mdc.DataError, match=field):
        mdc.GPTDataset(corpus, *args)


def test_bad_split_and_dtype(corpus):
    with pytest.raises(mdc.DataError, match="split"):
        mdc.GPTDataset(corpus, np.arange(7), 10, _config(), split="training")
    with pytest.raises(mdc.DataError, match="token_dtype"):
        mdc.GPTDataset(corpus, np.arange(7), 10, _config(), token_dtype=np.float32)
    with pytest.raises(mdc.DataError, match="pad_id"):
        mdc.GPTDataset(corpus, np.arange(7), 10, _config(pad_id=2**40))


def test_int64_corpus_needs_int64_tokens(tmp_path):
    rng = np.random.default_rng(1)
    prefix = write_corpus(str(tmp_path / "wide"), [6, 6], rng, dtype=np.int64)
    indexed = mdc.IndexedDataset(prefix)
    with pytest.raises(mdc.DataError, match="token_dtype"):
        mdc.GPTDataset(indexed, np.arange(2), 2, _config())
    dataset = mdc.GPTDataset(indexed, np.arange(2), 2, _config(), token_dtype=np.int64)
    assert dataset[0]["tokens"].dtype == np.int64


def test_empty_split_with_no_samples_is_empty(corpus):
    dataset = mdc.GPTDataset(corpus, np.arange(0), 0, _config())
    assert len(dataset) == 0
    assert dataset.__getitems__([])["tokens"].shape == (0, 4)


def test_out_of_range_samples(corpus):
    dataset = mdc.GPTDataset(corpus, np.arange(7), 3, _config())
    with pytest.raises(IndexError):
        dataset[len(dataset)]
    with pytest.raises(IndexError):
        dataset.__getitems__([0, -len(dataset) - 1])
    with pytest.raises(TypeError):
        dataset["0"]
    np.testing.assert_array_equal(dataset[-1]["tokens"], dataset[len(dataset) - 1]["tokens"])


def test_corrupt_cache_entry_is_rebuilt(corpus, tmp_path):
    config = _config(path_to_cache=str(tmp_path / "cache"))
    expected = np.array(mdc.GPTDataset(corpus, np.arange(7), 10, config).sample_index)
    (entry,) = [name for name in os.listdir(tmp_path / "cache") if "sample_index" in name]
    with open(tmp_path / "cache" / entry, "r+b") as stream:
        stream.truncate(os.path.getsize(tmp_path / "cache" / entry) - 8)
    with pytest.warns(UserWarning, match="sample_index"):
        again = mdc.GPTDataset(corpus, np.arange(7), 10, config)
    np.testing.assert_array_equal(again.sample_index, expected)
