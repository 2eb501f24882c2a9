"""An index value out of range met while reading is a DataError naming the array and the
cache entry, never an IndexError (nor a negative value silently counted from the end)."""

from __future__ import annotations

import glob
import os
import warnings

import numpy as np
import pytest
from cache_helpers import DOCUMENTS, SAMPLES, config, dataset, make_corpus

import megadata_core as mdc
from megadata_core.cache import entries as cache
from megadata_core.indices.gpt import GPT_ARRAYS


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> str:
    return make_corpus(tmp_path_factory.mktemp("corpus"))


def _entry_with(corpus, cache_dir, change) -> tuple[mdc.GPTDataset, str]:
    """A cache entry whose arrays ``change(arrays)`` edited, saved with matching
    checksums (a bad index written by a bug, not damaged on disk), and the dataset
    loaded from it."""
    built = dataset(corpus, cache_dir)
    arrays = {name: np.array(getattr(built, name)) for name in GPT_ARRAYS}
    changed = change(arrays)
    cache.save_cached(cache_dir, built.description(), "train", arrays)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loaded = dataset(corpus, cache_dir)
    (path,) = glob.glob(os.path.join(cache_dir, f"*-train-{changed}.npy"))
    return loaded, os.path.basename(path)


def _position_reading_row(loaded, row: int) -> int:
    return int(np.flatnonzero(np.asarray(loaded.shuffle_index) == row)[0])


@pytest.mark.parametrize("value", [SAMPLES + 10**6, 2**32 - 5])
def test_a_shuffle_index_row_out_of_range_is_a_data_error(corpus, tmp_path, value):
    def change(arrays):
        arrays["shuffle_index"][11] = value
        return "shuffle_index"

    dataset, entry = _entry_with(corpus, str(tmp_path / "cache"), change)
    with pytest.raises(mdc.DataError, match=f"shuffle_index.*{entry}"):
        dataset.__getitems__([3, 11])
    with pytest.raises(mdc.DataError, match=f"shuffle_index.*{entry}"):
        dataset[11]
    dataset.__getitems__([3, 12])  # other rows still read


@pytest.mark.parametrize("value", [-1, DOCUMENTS, 10**6])
def test_a_document_id_out_of_range_is_a_data_error(corpus, tmp_path, value):
    def change(arrays):
        arrays["document_index"][500] = value
        return "document_index"

    dataset, entry = _entry_with(corpus, str(tmp_path / "cache"), change)
    rows = np.flatnonzero(np.asarray(dataset.sample_index)[:, 0] <= 500)
    row = int(rows[-1])  # the sample that reads document_index position 500
    with pytest.raises(mdc.DataError, match=f"document_index.*{entry}"):
        dataset.__getitems__([_position_reading_row(dataset, row)])


@pytest.mark.parametrize("value", [-3, 10**7])
def test_a_sample_index_position_out_of_range_is_a_data_error(corpus, tmp_path, value):
    def change(arrays):
        arrays["sample_index"][-1, 0] = value
        return "sample_index"

    dataset, entry = _entry_with(corpus, str(tmp_path / "cache"), change)
    position = _position_reading_row(dataset, len(dataset) - 1)  # reads the last row
    with pytest.raises(mdc.DataError, match=f"sample_index.*{entry}"):
        dataset.__getitems__([position])


@pytest.mark.parametrize("value", [-2, 10**4])
def test_a_sample_index_offset_out_of_range_is_a_data_error(corpus, tmp_path, value):
    def change(arrays):
        arrays["sample_index"][-1, 1] = value
        return "sample_index"

    dataset, entry = _entry_with(corpus, str(tmp_path / "cache"), change)
    position = _position_reading_row(dataset, len(dataset) - 1)
    with pytest.raises(mdc.DataError, match=f"sample_index.*{entry}"):
        dataset.__getitems__([position])


def _blend(corpus, cache_dir):
    indexed = mdc.IndexedDataset(corpus)
    blend_config = config(cache_dir)
    members = [
        mdc.GPTDataset(indexed, np.arange(0, 200), None, config(None)),
        mdc.GPTDataset(indexed, np.arange(200, 400), None, config(None)),
    ]
    return mdc.BlendedDataset(members, [0.5, 0.5], 150, blend_config)


@pytest.mark.parametrize(
    "name, value",
    [("dataset_index", 2), ("dataset_index", -1), ("dataset_sample_index", 10**5),
     ("dataset_sample_index", -1)],
)
def test_a_blend_index_out_of_range_is_a_data_error(corpus, tmp_path, name, value):
    cache_dir = str(tmp_path / "cache")
    blend = _blend(corpus, cache_dir)
    arrays = {key: np.array(array) for key, array in blend._arrays.items()}
    arrays[name][7] = value
    cache.save_cached(cache_dir, blend.description(), "train", arrays)
    damaged = _blend(corpus, cache_dir)
    (path,) = glob.glob(os.path.join(cache_dir, f"*-train-{name}.npy"))
    with pytest.raises(mdc.DataError, match=f"{name}.*{os.path.basename(path)}"):
        damaged.__getitems__([1, 7])
    with pytest.raises(mdc.DataError, match=f"{name}.*{os.path.basename(path)}"):
        damaged[7]
    damaged.__getitems__([1, 8])
